"""SubprocVectorEnv: same results as SyncVectorEnv, error handling, cleanup.

Factory forms through the trainer, the __main__ guard and step timeouts: test_subproc_reliability.py.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import time
import warnings
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import ParallelEnv

from marl_note.envs.adapters import StepResult
from marl_note.envs.subproc import SubprocVectorEnv
from marl_note.envs.vector import SyncVectorEnv

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from pettingzoo.classic import tictactoe_v3

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = partial(gym.make, "CartPole-v1")


class TinyParallel(ParallelEnv):
    """Scripted Parallel env: agents with Box, Discrete (numpy and Python int) and mismatched-dtype
    observations; "b" terminates early, the rest truncate; "a" carries an info action mask."""

    metadata = {"name": "tiny_parallel_v0"}

    def __init__(self, horizon: int = 5):
        self.possible_agents = ["a", "b", "c", "d"]
        self.horizon = horizon
        self._obs = {"a": gym.spaces.Box(-1, 1, (3,), np.float32), "b": gym.spaces.Discrete(7),
                     "c": gym.spaces.Box(-1, 1, (2, 2), np.float64), "d": gym.spaces.Discrete(4)}
        self.rng = None

    def observation_space(self, agent):
        return self._obs[agent]

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _observe(self):
        return {"a": self.rng.uniform(-1, 1, 3).astype(np.float32), "b": np.int64(self.rng.integers(7)),
                "c": self.rng.uniform(-1, 1, (2, 2)).astype(np.float32),  # dtype differs from its space
                "d": int(self.rng.integers(4))}

    def _infos(self):
        return {a: ({"action_mask": self.rng.integers(0, 2, 3).astype(bool) | np.array([1, 0, 0], bool)}
                    if a == "a" else {"t": self.t}) for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None or self.rng is None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        obs = self._observe()
        return {a: obs[a] for a in self.agents}, self._infos()

    def step(self, actions):
        self.t += 1
        obs = self._observe()
        rewards = {a: float(actions[a]) + float(self.rng.normal()) for a in self.agents}
        terms = {a: a == "b" and self.t >= 2 for a in self.agents}
        truncs = {a: self.t >= self.horizon for a in self.agents}
        out = {a: obs[a] for a in self.agents}
        infos = self._infos()
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return out, rewards, terms, truncs, infos


class FailingEnv(gym.Env):
    """CartPole-like env that raises (or kills its process) on a chosen step."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, mode: str = "raise", at: int = 2, tag: int = 0):
        self.mode, self.at, self.tag, self.t = mode, at, tag, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.tag == 1 and self.t >= self.at:
            if self.mode == "raise":
                raise ValueError("boom from FailingEnv")
            if self.mode == "exit":
                os._exit(3)
            if self.mode == "hang":
                time.sleep(30)
        return np.zeros(2, np.float32), 0.0, False, False, {}


def make_failing(mode: str, tag: int):
    return FailingEnv(mode=mode, tag=tag)


def broken_factory():
    raise RuntimeError("cannot build this env")


# ---------------------------------------------------------------------------------------------

def assert_same(x, y, path="result"):
    """Deep equality including dict key order, array dtypes and Python/numpy scalar types."""
    if isinstance(x, StepResult):
        assert isinstance(y, StepResult), path
        for f in dataclasses.fields(StepResult):
            assert_same(getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}")
        return
    assert type(x) is type(y), f"{path}: {type(x)} != {type(y)}"
    if isinstance(x, dict):
        assert list(x) == list(y), f"{path}: keys {list(x)} != {list(y)}"
        for k in x:
            assert_same(x[k], y[k], f"{path}[{k!r}]")
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and x.shape == y.shape, f"{path}: {x.dtype}{x.shape} != {y.dtype}{y.shape}"
        assert np.array_equal(x, y), f"{path}: {x} != {y}"
    else:
        assert x == y, f"{path}: {x!r} != {y!r}"


def pick_actions(res: StepResult, action_n: int, rng: np.random.Generator) -> dict:
    acts = {}
    for agent in res.obs:
        if agent in res.masks:
            acts[agent] = int(rng.choice(np.flatnonzero(res.masks[agent])))
        else:
            acts[agent] = int(rng.integers(action_n))
    return acts


def drive_both(fns, steps, action_n, shared_memory, processes=2, seed=7):
    """Drive a SyncVectorEnv and a SubprocVectorEnv with identical actions; compare every result."""
    rng = np.random.default_rng(seed)
    sync = SyncVectorEnv(fns)
    sub = SubprocVectorEnv(fns, processes=processes, shared_memory=shared_memory)
    try:
        assert sub.num_envs == sync.num_envs == len(fns)
        a, b = sync.reset(seed=seed), sub.reset(seed=seed)
        assert_same(a, b)
        history, episodes = [], 0
        for _ in range(steps):
            subset = [i for i in range(len(fns)) if rng.random() < 0.7] or [0]
            acts = {i: pick_actions(a[i], action_n, rng) for i in subset}
            ra, rb = sync.step(acts), sub.step(acts)
            assert list(rb) == subset
            assert_same(ra, rb)
            history.append((ra, rb))
            for i in subset:
                a[i] = ra[i]
                episodes += ra[i].episode_over
        for ra, rb in history:  # results handed out earlier are copies, not live shared memory
            assert_same(ra, rb)
        return sub, episodes
    finally:
        sub.close()
        sync.close()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_tictactoe_matches_sync(shared_memory):
    sub, episodes = drive_both([tictactoe_v3.env] * 5, steps=60, action_n=9, shared_memory=shared_memory)
    assert episodes > 5
    assert bool(sub._state["shms"]) is False  # freed by close()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_parallel_env_matches_sync(shared_memory):
    _, episodes = drive_both([TinyParallel, partial(TinyParallel, horizon=3), TinyParallel], steps=30, action_n=3,
                             shared_memory=shared_memory, processes=3)
    assert episodes > 5


def test_cartpole_matches_sync():
    _, episodes = drive_both([CARTPOLE] * 3, steps=120, action_n=2, shared_memory=True)
    assert episodes >= 3


def test_shared_memory_carries_box_and_discrete_obs():
    with SubprocVectorEnv([TinyParallel, tictactoe_v3.env], processes=2) as venv:
        assert len(venv._state["shms"]) == 2
        assert set(venv._state["views"][0]) == {"a", "b", "c", "d"}  # "c"'s float32 obs fall back to the pipe
        assert set(venv._state["views"][1]) == {"player_1", "player_2"}
        res = venv.reset(seed=0)
        assert type(res[0].obs["b"]) is np.int64 and type(res[0].obs["d"]) is int
        assert res[0].obs["a"].base is None or not isinstance(res[0].obs["a"].base, memoryview)
    with SubprocVectorEnv([tictactoe_v3.env], shared_memory=False) as venv:
        assert venv._state["shms"] == [] and venv.processes == 1


def test_step_subset_and_bad_index():
    with SubprocVectorEnv([CARTPOLE] * 3, processes=2) as venv:
        venv.reset(seed=0)
        assert list(venv.step({2: {"agent_0": 0}, 0: {"agent_0": 1}})) == [2, 0]
        assert venv.step({}) == {}
        with pytest.raises(IndexError):
            venv.step({3: {"agent_0": 0}})


def test_lambda_factory_works_with_every_start_method():
    with SubprocVectorEnv([CARTPOLE, lambda: gym.make("CartPole-v1")], processes=2) as venv:
        assert venv.context in ("forkserver", "spawn")
        assert sorted(venv.reset(seed=1)) == [0, 1]
    if "fork" in __import__("multiprocessing").get_all_start_methods():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork in a threaded process (3.12+)
            with SubprocVectorEnv([lambda: gym.make("CartPole-v1")] * 2, context="fork") as venv:
                assert venv.context == "fork"
                assert sorted(venv.reset(seed=1)) == [0, 1]


def test_worker_exception_reraised_with_env_index_and_traceback():
    venv = SubprocVectorEnv([partial(make_failing, "raise", t) for t in (0, 1, 0)], processes=2)
    try:
        venv.reset(seed=0)
        venv.step({i: {"agent_0": 0} for i in range(3)})
        with pytest.raises(ValueError, match="boom from FailingEnv") as info:
            venv.step({i: {"agent_0": 0} for i in range(3)})
        note = "\n".join(getattr(info.value, "__notes__", [])) or str(info.value)
        assert "env 1" in note and "in step" in note and "Traceback" in note
        # pipes stayed in step: the other envs still answer
        assert sorted(venv.step({0: {"agent_0": 0}, 2: {"agent_0": 1}})) == [0, 2]
    finally:
        venv.close()


def test_factory_error_raised_from_constructor():
    with pytest.raises(RuntimeError, match="cannot build this env") as info:
        SubprocVectorEnv([CARTPOLE, broken_factory], processes=2)
    assert "env 1" in "\n".join(getattr(info.value, "__notes__", [])) + str(info.value)


def test_dead_worker_gives_runtime_error_not_hang():
    venv = SubprocVectorEnv([partial(make_failing, "exit", t) for t in (0, 1)], processes=2)
    venv.reset(seed=0)
    venv.step({0: {"agent_0": 0}, 1: {"agent_0": 0}})
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="died with exit code 3"):
        venv.step({0: {"agent_0": 0}, 1: {"agent_0": 0}})
    assert time.monotonic() - t0 < 30  # at once, not after the default timeout (60 s); room for a loaded machine
    with pytest.raises(RuntimeError, match="unusable"):
        venv.step({0: {"agent_0": 0}})
    venv.close()
    assert not any(p.is_alive() for p in venv._state["procs"])


def test_hung_worker_times_out():
    venv = SubprocVectorEnv([partial(make_failing, "hang", t) for t in (0, 1)], processes=2, timeout=1.0)
    venv.reset(seed=0)
    venv.step({0: {"agent_0": 0}, 1: {"agent_0": 0}})
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="env 1 did not finish step within 1.0 s"):
        venv.step({1: {"agent_0": 0}})
    assert venv.closed  # killed and closed at once, without waiting for close()
    venv.close()
    assert time.monotonic() - t0 < 30  # timeout=1.0, not the hang's forever; room for a loaded machine
    assert not any(p.is_alive() for p in venv._state["procs"])


def test_close_is_idempotent_and_stops_processes():
    venv = SubprocVectorEnv([CARTPOLE] * 2, processes=2)
    procs = list(venv._state["procs"])
    assert all(p.is_alive() for p in procs)
    venv.close()
    venv.close()
    assert not any(p.is_alive() for p in procs)
    assert all(p.exitcode == 0 for p in procs)  # closed politely, not terminated
    with pytest.raises(RuntimeError, match="closed"):
        venv.reset(seed=0)


def test_unclosed_env_leaves_no_processes_at_exit():
    script = textwrap.dedent("""
        from functools import partial
        import gymnasium as gym
        from marl_note.envs.subproc import SubprocVectorEnv
        if __name__ == "__main__":
            venv = SubprocVectorEnv([partial(gym.make, "CartPole-v1")] * 2, processes=2)
            venv.reset(seed=0)
            print(" ".join(str(p.pid) for p in venv._state["procs"]), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60  # a bounded wait (they stop at once): room for a loaded machine
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            break
        time.sleep(0.05)
    assert not alive, f"worker processes {alive} outlived the interpreter"
