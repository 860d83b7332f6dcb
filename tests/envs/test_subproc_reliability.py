"""The subprocess env pool through DecentralizedTrainer(processes=N): every env form the README
shows reaches the workers, a script without the ``__main__`` guard fails in the parent, and a stuck
env is an error (worker killed and reaped, shared memory freed) instead of a hang."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from functools import partial

import gymnasium as gym
import pytest

from marl_note.agents import RandomAgent
from marl_note.envs import with_agent_id
from marl_note.envs.subproc import EnvTimeoutError, SubprocVectorEnv
from marl_note.trainers import DecentralizedTrainer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from mpe2 import simple_spread_v3
    from pettingzoo.classic import rps_v2, tictactoe_v3

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def play_two_episodes(env) -> DecentralizedTrainer:
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=2, processes=2, seed=0)
    try:
        seats = [RandomAgent(trainer.action_space(a), seed=0) for a in trainer.possible_agents]
        result = trainer.test(seats, episodes=2)
        assert result["num_collected_episodes"] == 2
        venv = trainer._test_venv
        assert isinstance(venv, SubprocVectorEnv) and venv.processes == 2
    finally:
        trainer.close()
    return trainer


FORMS = {
    "gym id": "CartPole-v1",
    "lambda": lambda: gym.make("CartPole-v1"),
    "partial(gym.make)": partial(gym.make, "CartPole-v1"),
    "AEC factory": tictactoe_v3.env,
    "PettingZoo module": tictactoe_v3,
    "parallel_env (local closure)": rps_v2.parallel_env,
    "MPE parallel_env": simple_spread_v3.parallel_env,
    "partial(MPE parallel_env)": partial(simple_spread_v3.parallel_env, max_cycles=10),
    "with_agent_id(MPE parallel_env)": with_agent_id(simple_spread_v3.parallel_env),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_readme_env_form_runs_in_worker_processes(form):
    play_two_episodes(FORMS[form])


def test_closure_defined_in_a_function_runs_in_worker_processes():
    cycles = 7

    def make():
        return with_agent_id(lambda: simple_spread_v3.parallel_env(max_cycles=cycles))()

    play_two_episodes(make)


def test_unserializable_factory_error_names_factory_and_cause():
    lock = threading.Lock()

    def make():
        with lock:
            return gym.make("CartPole-v1")

    with pytest.raises(TypeError) as info:
        SubprocVectorEnv([partial(gym.make, "CartPole-v1"), make], processes=2)
    msg = str(info.value)
    assert "env factory #1" in msg and "make" in msg and "lock" in msg
    assert "partial" not in msg and "context" not in msg  # no advice that does not work


# ------------------------------------------------------------------------------------------ guard

SCRIPT = """
import os
from pettingzoo.classic import tictactoe_v3
from marl_note.agents import RandomAgent
from marl_note.trainers import DecentralizedTrainer
{guard}
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, processes=2, seed=0)
    trainer.test([RandomAgent(trainer.action_space(a)) for a in trainer.possible_agents], episodes=2)
    trainer.close()
    with open({log!r}, "a") as f:
        f.write(f"done {{os.getpid()}}\\n")
"""


def run_script(tmp_path, guard: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = str(tmp_path / "side_effect.txt")
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT.format(guard=guard, log=log))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    lines = open(log).read().split() if os.path.exists(log) else []
    return out, lines


def test_script_without_main_guard_fails_in_parent_and_does_not_rerun(tmp_path):
    out, lines = run_script(tmp_path, guard="if True:  # no __main__ guard")
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert "MissingMainGuardError" in last and 'if __name__ == "__main__":' in last, out.stderr
    assert lines.count("done") == 0, lines  # the body never ran to its end, in the parent or a worker


def test_script_with_main_guard_succeeds_once(tmp_path):
    out, lines = run_script(tmp_path, guard='if __name__ == "__main__":')
    assert out.returncode == 0, out.stderr
    assert lines.count("done") == 1, lines


# ---------------------------------------------------------------------------------------- timeout

class StuckEnv(gym.Wrapper):
    """CartPole whose ``call`` never returns for the env seeded ``stuck_seed`` (after ``after`` steps)."""

    def __init__(self, call: str, stuck_seed: int, after: int = 3):
        super().__init__(gym.make("CartPole-v1"))
        self.call, self.stuck_seed, self.after, self.seed, self.steps = call, stuck_seed, after, None, 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.seed = seed
        if self.call == "reset" and seed == self.stuck_seed:
            time.sleep(1e6)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.call == "step" and self.seed == self.stuck_seed and self.steps > self.after:
            time.sleep(1e6)
        return self.env.step(action)


class NoOpLearner(RandomAgent):
    """A learning seat that plays randomly and learns nothing (train() needs one)."""

    def observe(self, transitions):
        pass

    def update(self, batch_size):
        return {}


def shm_exists(name: str) -> bool:
    return os.path.exists(os.path.join("/dev/shm", name.lstrip("/")))


@pytest.mark.parametrize("call", ["reset", "step"])
def test_stuck_env_raises_kills_worker_and_frees_shared_memory(call):
    seen: dict = {}

    class Record:  # the train venv when training begins (the one the run's collector then steps)
        def on_train_begin(self, trainer):
            venv = trainer.train_envs()
            seen["procs"] = list(venv._state["procs"])
            seen["shms"] = [s.name for s in venv._state["shms"]]
            seen["began"] = time.monotonic()  # the workers are up: their start-up is not what is timed

    trainer = DecentralizedTrainer(partial(StuckEnv, call, stuck_seed=1), num_train_envs=3, num_test_envs=1,
                                   update_freq=6, episodes_per_train=50, processes=2, seed=0, step_timeout=1.0)
    agent = NoOpLearner(trainer.action_space("agent_0"))
    t0 = time.monotonic()
    try:
        with pytest.raises(EnvTimeoutError) as info:
            trainer.train([agent], learning_mask=[1], plot=False, progress=False, callbacks=[Record()])
        elapsed = time.monotonic() - seen.get("began", t0)
        if call == "reset":  # the closed pool is replaced: the next run meets the stuck env again, not a closed pool
            with pytest.raises(EnvTimeoutError):
                trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    finally:
        trainer.close()
    msg = str(info.value)
    # step_timeout=1.0, not the stuck env's 1e6 s nor the default 60 s (room for a loaded machine)
    assert elapsed < 1.0 + 40, elapsed
    assert f"env 1 did not finish {call}" in msg and "1.0 s" in msg and "step_timeout" in msg, msg
    pid = int(re.search(r"pid (\d+)", msg).group(1))
    assert info.value.env_indices == [1] and info.value.pids == [pid] and info.value.call == call
    with pytest.raises(ProcessLookupError):  # killed and reaped, not a zombie
        os.kill(pid, 0)
    assert pid in [p.pid for p in seen["procs"]]
    assert not any(p.is_alive() for p in seen["procs"])  # the whole pool is down
    assert seen["shms"] and not any(shm_exists(n) for n in seen["shms"])


def test_step_timeout_is_validated():
    for bad in (0, -1.0, math.nan, math.inf, "60", True):
        with pytest.raises(ValueError, match="step_timeout"):
            DecentralizedTrainer("CartPole-v1", step_timeout=bad)
    assert DecentralizedTrainer("CartPole-v1", step_timeout=None).step_timeout is None
