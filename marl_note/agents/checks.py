"""Conformance checks for a registered algorithm, shipped as library code (like PettingZoo's ``api_test``).

:func:`check_agent` builds the algorithm small (its registry entry's ``tiny`` options) on every set
of spaces it declares, in every backend it has, and checks the agent contract end to end:

- **acting**: ``act(obs, mask, explore)`` returns one action per row, of the action space's shape,
  finite, within a Discrete's range and legal under the mask, exploring or not;
- **learning**: ``observe`` takes the batches the trainer hands over (per-stream
  :class:`~marl_note.types.Transitions`, or :class:`~marl_note.types.JointTransitions` for a joint
  learner), ``update(batch_size)`` returns a metrics dict with an integer ``gradient_steps`` and
  finite numbers, takes a gradient step within ``max_steps`` env steps, and changes the weights;
- **state**: ``state_dict()`` is numpy only; the same seed gives the same initial state (in both
  backends: the weights are drawn in numpy); ``is_on_policy`` agrees with the entry;
- **save / restore**: a checkpoint restores to the identical state, and the restored agent acts
  exactly as the saved one did from that state (greedy and exploring: its generator and
  exploration schedule are in the state). With two backends the checkpoint of each is restored in
  the other; with one, in the same;
- **numpy acting**: where the agent acts through a numpy copy of its weights (``numpy_policy()``),
  the same checkpoint restored with ``numpy_acting=False`` acts through the framework and must
  choose the same greedy actions (Box actions to ``1e-5``).

A failure raises :class:`AgentCheckError` naming the algorithm, backend, case and what is wrong.
Nothing here imports a framework: each backend is imported through the registry when checked.

Example:
    >>> report = check_agent("dqn", "torch")
    >>> report.backends, report.cases
    (('torch',), ('Discrete',))
    >>> "numpy parity" in report.checks and "restore torch->torch" in report.checks
    True
"""
from __future__ import annotations

import copy
import inspect
import numbers
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from marl_note.agents import registry
from marl_note.agents.checkpoints.restoring import replay_of
from marl_note.agents.registry import Algorithm
from marl_note.types import JointTransitions, Transitions

__all__ = ["AgentCase", "AgentCheckError", "AgentReport", "RandomTask", "JointRandomTask", "check_agent",
           "default_cases"]

_OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
_ACTIONS = {"Discrete": gym.spaces.Discrete(3), "Box": gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
            "MultiDiscrete": gym.spaces.MultiDiscrete([2, 3]), "MultiBinary": gym.spaces.MultiBinary(3)}
_BOX_TOL = 1e-5  # Box actions through the numpy copy and the framework agree to float32 rounding


class AgentCheckError(AssertionError):
    """An algorithm that breaks the agent contract; the message names the algorithm, backend, case and problem."""


@runtime_checkable
class Task(Protocol):
    """What feeds an agent during :func:`check_agent`: rows of observations to act on, then the batches
    the trainer would hand over (``None``: none ready this step).

    ``reset() -> (obs, mask)``; ``step(actions) -> (batch or None, obs, mask)``.

    Example:
        >>> isinstance(RandomTask(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), 1, seed=0), Task)
        True
    """

    def reset(self) -> tuple[Any, Any]: ...

    def step(self, actions: Any) -> tuple[Any, Any, Any]: ...


@dataclass(frozen=True)
class AgentCase:
    """One set of spaces :func:`check_agent` builds an algorithm on, and the task that feeds it.

    ``observation_space`` / ``action_space`` are spaces, or ``{seat: space}`` dicts for a joint
    learner. ``task(num_streams, seed)`` makes the :class:`Task`; None: :class:`RandomTask` (or
    :class:`JointRandomTask` for dicts of spaces).

    Example:
        >>> case = AgentCase("Box", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)))
        >>> obs, mask = case.make_task(2, seed=0).reset()
        >>> obs.shape, mask is None
        ((2, 3), True)
    """

    label: str
    observation_space: Any
    action_space: Any
    task: Callable[[int, int], Task] | None = None

    @property
    def joint(self) -> bool:
        return isinstance(self.action_space, Mapping)

    def make_task(self, num_streams: int, seed: int) -> Task:
        if self.task is not None:
            return self.task(num_streams, seed)
        if self.joint:
            return JointRandomTask(self.observation_space, self.action_space, num_streams, seed)
        return RandomTask(self.observation_space, self.action_space, num_streams, seed)


def default_cases(entry: Algorithm) -> list[AgentCase]:
    """The cases of an entry without its own ``cases``: one per declared action space (a Box(4,)
    observation; Discrete actions with masks), or for a joint learner one two-seat case whose seats
    cover its action spaces.

    Example:
        >>> [c.label for c in default_cases(registry.get("sac"))]
        ['Discrete', 'Box']
        >>> case = default_cases(registry.get("maddpg"))[0]
        >>> case.label, sorted(case.action_space)
        ('joint Discrete+Box', ['agent_0', 'agent_1'])
    """
    if entry.joint:
        kinds = list(entry.actions) * (2 if len(entry.actions) == 1 else 1)
        seats = [f"agent_{i}" for i in range(len(kinds))]
        obs = {s: gym.spaces.Box(-1.0, 1.0, (3 + i,), np.float32) for i, s in enumerate(seats)}  # unequal sizes
        return [AgentCase("joint " + "+".join(entry.actions), obs, {s: _ACTIONS[k] for s, k in zip(seats, kinds)})]
    return [AgentCase(kind, _OBS, _ACTIONS[kind]) for kind in entry.actions]


def _sampler(space: gym.Space, seed: int) -> Callable[[int], np.ndarray]:
    space = copy.deepcopy(space)
    space.seed(seed)
    return lambda n: np.stack([np.asarray(space.sample()) for _ in range(n)])


class RandomTask:
    """Random observations (sampled from the space), rewards and episode ends, ``num_streams`` rows a step.

    Every row is its own stream (an env); an episode ends with probability 0.15 a step (terminated)
    or after 8 steps (truncated), and the row then starts a new one, as the trainer's auto-reset
    does. Discrete actions get random masks with at least one legal action. ``step`` returns the
    step's :class:`~marl_note.types.Transitions` and the next observations and masks.

    Example:
        >>> task = RandomTask(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), num_streams=4, seed=0)
        >>> obs, mask = task.reset()
        >>> obs.shape, mask.shape, bool(mask.any(axis=1).all())
        ((4, 2), (4, 3), True)
        >>> batch, obs, mask = task.step(np.zeros(4, np.int64))
        >>> len(batch), batch.stream.tolist(), batch.next_mask.shape
        (4, [0, 1, 2, 3], (4, 3))
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, num_streams: int, seed: int,
                 masked: bool | None = None):
        self.n = int(num_streams)
        self.rng = np.random.default_rng(seed)
        self.sample_obs = _sampler(observation_space, seed)
        self.masked = isinstance(action_space, gym.spaces.Discrete) if masked is None else masked
        self.num_actions = int(getattr(action_space, "n", 0)) if self.masked else 0
        self.t = np.zeros(self.n, np.int64)

    def _mask(self) -> np.ndarray | None:
        if not self.masked:
            return None
        mask = self.rng.random((self.n, self.num_actions)) < 0.6
        mask[np.arange(self.n), self.rng.integers(0, self.num_actions, self.n)] = True
        return mask

    def reset(self) -> tuple[np.ndarray, np.ndarray | None]:
        self.obs, self.mask = self.sample_obs(self.n), self._mask()
        return self.obs, self.mask

    def step(self, actions: np.ndarray) -> tuple[Transitions, np.ndarray, np.ndarray | None]:
        next_obs, next_mask = self.sample_obs(self.n), self._mask()
        self.t += 1
        terminated = self.rng.random(self.n) < 0.15
        truncated = (self.t >= 8) & ~terminated
        batch = Transitions(obs=self.obs, act=np.asarray(actions), rew=self.rng.normal(size=self.n).astype(np.float32),
                            next_obs=next_obs, terminated=terminated, truncated=truncated, mask=self.mask,
                            next_mask=next_mask, stream=np.arange(self.n, dtype=np.int64))
        done = terminated | truncated
        self.obs, self.mask = next_obs.copy(), None if next_mask is None else next_mask.copy()
        if done.any():  # auto-reset: the finished rows start a new episode
            self.obs[done] = self.sample_obs(int(done.sum()))
            if self.mask is not None:
                fresh = self._mask()
                assert fresh is not None
                self.mask[done] = fresh[done]
            self.t[done] = 0
        return batch, self.obs, self.mask


class JointRandomTask:
    """:class:`RandomTask` for a joint learner: ``{seat: observations}`` in, :class:`JointTransitions` out.

    Example:
        >>> task = JointRandomTask({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(2)}, 3, seed=0)
        >>> obs, masks = task.reset()
        >>> obs["a"].shape, masks
        ((3, 2), None)
        >>> batch, obs, masks = task.step({"a": np.zeros(3, np.int64)})
        >>> batch.rew.shape, batch.alive.all()
        ((3, 1), np.True_)
    """

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space],
                 num_streams: int, seed: int):
        self.agents = tuple(action_spaces)
        self.n = int(num_streams)
        self.rng = np.random.default_rng(seed)
        self.samplers = {a: _sampler(observation_spaces[a], seed + k) for k, a in enumerate(self.agents)}
        self.t = np.zeros(self.n, np.int64)

    def _sample(self, n: int) -> dict[str, np.ndarray]:
        return {a: sample(n) for a, sample in self.samplers.items()}

    def reset(self) -> tuple[dict[str, np.ndarray], None]:
        self.obs = self._sample(self.n)
        return self.obs, None

    def step(self, actions: Mapping[str, np.ndarray]) -> tuple[JointTransitions, dict[str, np.ndarray], None]:
        k = len(self.agents)
        next_obs = self._sample(self.n)
        self.t += 1
        ends = self.rng.random(self.n) < 0.15
        terminated = np.repeat(ends[:, None], k, axis=1)
        truncated = np.repeat(((self.t >= 8) & ~ends)[:, None], k, axis=1)
        batch = JointTransitions(self.agents, obs=dict(self.obs), act={a: np.asarray(actions[a]) for a in self.agents},
                                 rew=self.rng.normal(size=(self.n, k)).astype(np.float32), next_obs=next_obs,
                                 terminated=terminated, truncated=truncated, alive=np.ones((self.n, k), bool),
                                 stream=np.arange(self.n, dtype=np.int64))
        done = terminated[:, 0] | truncated[:, 0]
        self.obs = {a: v.copy() for a, v in next_obs.items()}
        if done.any():
            fresh = self._sample(int(done.sum()))
            for a in self.agents:
                self.obs[a][done] = fresh[a]
            self.t[done] = 0
        return batch, self.obs, None


@dataclass
class AgentReport:
    """What :func:`check_agent` checked: the backends, the cases and each check passed, in order.

    Example:
        >>> AgentReport("dqn", ("torch",), ("Discrete",), ["act"]).checks
        ['act']
    """

    algorithm: str
    backends: tuple[str, ...]
    cases: tuple[str, ...]
    checks: list[str] = field(default_factory=list)

    def passed(self, check: str) -> None:
        if check not in self.checks:
            self.checks.append(check)


class _Checker:
    """One algorithm, backend and case: builds, acts, learns and saves, raising AgentCheckError naming all four."""

    def __init__(self, entry: Algorithm, backend: str, case: AgentCase, options: Mapping[str, Any], seed: int,
                 max_steps: int, batch_size: int):
        self.entry, self.backend, self.case = entry, backend, case
        self.options, self.seed, self.max_steps, self.batch_size = dict(options), seed, max_steps, batch_size
        self.cls = entry.cls(backend)

    def fail(self, what: str, backend: str | None = None) -> AgentCheckError:
        return AgentCheckError(f"check_agent({self.entry.name!r}, backend {backend or self.backend!r}, case "
                               f"{self.case.label!r}): {what}")

    def build(self, seed: int) -> Any:
        try:
            return self.cls(self.case.observation_space, self.case.action_space, seed=seed, **self.options)
        except Exception as exc:
            raise self.fail(f"{self.cls.__name__}(spaces, seed={seed}, **{self.options}) raised "
                            f"{type(exc).__name__}: {exc}") from exc

    # -- acting ------------------------------------------------------------------------------------
    def act(self, agent: Any, obs: Any, mask: Any, explore: bool) -> Any:
        """The actions of every seat (a dict for a joint learner), checked against the spaces."""
        if not self.case.joint:
            actions = agent.act(obs, mask, explore=explore)
            self.check_actions(actions, self.case.action_space, obs, mask, explore, "")
            return actions
        out = {}
        seats = agent.seat_agents()
        if [getattr(s, "agent_id", None) for s in seats] != list(self.case.action_space):
            raise self.fail(f"seat_agents() must give one seat actor per agent, in order "
                            f"{list(self.case.action_space)}")
        for seat, name in zip(seats, self.case.action_space):
            seat_mask = None if mask is None else mask[name]
            kwargs = {"env_ids": np.arange(len(obs[name]))} if getattr(seat, "accepts_env_ids", False) else {}
            out[name] = seat.act(obs[name], seat_mask, explore=explore, **kwargs)
            self.check_actions(out[name], self.case.action_space[name], obs[name], seat_mask, explore,
                               f" of seat {name!r}")
        return out

    def check_actions(self, actions: Any, space: Any, obs: Any, mask: Any, explore: bool, who: str) -> None:
        n = len(obs)
        call = f"act(obs[{n}], mask={'...' if mask is not None else None}, explore={explore}){who}"
        if not isinstance(actions, np.ndarray):
            raise self.fail(f"{call} returned {type(actions).__name__}, not a numpy array")
        if actions.shape != (n, *space.shape):
            raise self.fail(f"{call} returned shape {actions.shape}, expected {(n, *space.shape)}: one action per row "
                            f"of {space}")
        if isinstance(space, gym.spaces.Box):
            if actions.dtype.kind != "f" or not np.isfinite(actions).all():
                raise self.fail(f"{call} returned non-finite or non-float Box actions ({actions.dtype})")
            return
        if actions.dtype.kind not in "iu":
            raise self.fail(f"{call} returned {actions.dtype} actions for {space}; expected integers")
        if isinstance(space, gym.spaces.Discrete):
            bad = (actions < space.start) | (actions >= space.start + space.n)
            if bad.any():
                raise self.fail(f"{call} returned action {int(actions[bad][0])} outside {space}")
            if mask is not None and not np.asarray(mask)[np.arange(n), actions - space.start].all():
                row = int(np.flatnonzero(~np.asarray(mask)[np.arange(n), actions - space.start])[0])
                raise self.fail(f"{call} returned action {int(actions[row])} in row {row}, which its mask forbids")
        elif not all(space.contains(a) for a in actions.astype(space.dtype)):
            raise self.fail(f"{call} returned actions outside {space}")

    def same_actions(self, got: Any, want: Any, what: str, exact: bool, backend: str | None = None) -> None:
        pairs = [(k, got[k], want[k]) for k in want] if isinstance(want, Mapping) else [("", got, want)]
        for seat, g, w in pairs:
            where = f" (seat {seat!r})" if seat else ""
            if exact or np.asarray(w).dtype.kind in "iub":
                same = np.array_equal(g, w)
            else:
                same = np.allclose(g, w, rtol=_BOX_TOL, atol=_BOX_TOL)
            if not same:
                got, want = np.asarray(g).tolist()[:6], np.asarray(w).tolist()[:6]
                raise self.fail(f"{what}{where}: got {got}, expected {want}", backend)

    # -- learning ----------------------------------------------------------------------------------
    def observe(self, agent: Any, batch: Any) -> None:
        if self.case.joint:
            agent.observe_joint(batch)
        else:
            agent.observe(batch)

    def learn(self, agent: Any) -> tuple[Any, Any]:
        """Act, observe and update until two updates took gradient steps; returns probe (obs, mask) rows."""
        task = self.case.make_task(8, self.seed)
        obs, mask = task.reset()
        probes: list[tuple[Any, Any]] = []
        learned = 0
        for step in range(self.max_steps):
            actions = self.act(agent, obs, mask, explore=True)
            batch, obs, mask = task.step(actions)
            probes = (probes + [(copy.deepcopy(obs), copy.deepcopy(mask))])[-3:]
            if batch is not None and len(batch):
                self.observe(agent, batch)
            metrics = agent.update(self.batch_size)
            learned += self.check_metrics(metrics, step)
            if learned >= 2 and step >= 4:
                return _concatenate(probes)
        raise self.fail(f"no gradient step in {self.max_steps} steps of {len(obs)} rows (update({self.batch_size}) "
                        f"after each): give options that let it learn sooner (e.g. learning_starts=..., n_steps=...)")

    def check_metrics(self, metrics: Any, step: int) -> int:
        if not isinstance(metrics, Mapping):
            raise self.fail(f"update() returned {type(metrics).__name__}, not a dict of metrics")
        steps = metrics.get("gradient_steps")
        if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, numbers.Integral) or steps < 0:
            raise self.fail(f"update() must report gradient_steps as a non-negative integer, got {steps!r} "
                            f"(step {step})")
        for key, value in metrics.items():
            if isinstance(value, numbers.Number) and not np.isfinite(float(value)):  # type: ignore[arg-type]
                raise self.fail(f"update() reported a non-finite {key} = {value} at step {step}")
        return int(steps)

    # -- state -------------------------------------------------------------------------------------
    def state(self, agent: Any, what: str) -> dict[str, np.ndarray]:
        state = agent.state_dict()
        if not isinstance(state, Mapping):
            raise self.fail(f"{what}: state_dict() returned {type(state).__name__}, not a dict")
        bad = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, (np.ndarray, np.generic))]
        if bad:
            raise self.fail(f"{what}: state_dict() must hold numpy arrays under string keys only; {bad[0]!r} holds "
                            f"{type(state[bad[0]]).__name__}")
        return {k: np.array(v, copy=True) for k, v in state.items()}

    def same_state(self, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], what: str,
                   backend: str | None = None) -> None:
        if set(got) != set(want):
            raise self.fail(f"{what}: state_dict keys differ: missing {sorted(set(want) - set(got))[:5]}, extra "
                            f"{sorted(set(got) - set(want))[:5]}", backend)
        for key in want:
            g, w = got[key], want[key]
            if g.shape != w.shape or g.dtype != w.dtype or not np.array_equal(g, w, equal_nan=w.dtype.kind == "f"):
                raise self.fail(f"{what}: state_dict[{key!r}] differs ({g.dtype} {g.shape} vs {w.dtype} {w.shape})",
                                backend)


def _concatenate(probes: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """The probe rows of the last few steps as one batch (dicts key-wise)."""
    def cat(parts: list[Any]) -> Any:
        if parts[0] is None:
            return None
        if isinstance(parts[0], Mapping):
            return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return np.concatenate(parts)

    return cat([p[0] for p in probes]), cat([p[1] for p in probes])


def _entry(algorithm: str | type | Algorithm) -> Algorithm:
    if isinstance(algorithm, Algorithm):
        return algorithm
    if isinstance(algorithm, str):
        return registry.get(algorithm)
    if isinstance(algorithm, type):
        entry = registry.entry_of(algorithm)
        if entry is None or all(algorithm is not c for c in registry._classes(entry)):
            derived = f" (it derives from {entry.name!r})" if entry is not None else ""
            raise registry.RegistryError(f"{algorithm.__qualname__} is not a registered algorithm's class{derived}: "
                                         f"register it (marl_note.agents.registry.register) to check it; the entry "
                                         f"says which spaces it takes")
        return entry
    raise TypeError(f"check_agent takes a registered name, an algorithm class or an Algorithm entry, got "
                    f"{type(algorithm).__name__}")


def _cases(entry: Algorithm) -> list[AgentCase]:
    if entry.cases is None:
        return default_cases(entry)
    cases = list(registry._resolve(entry.name, "cases", entry.cases)())
    if not cases or not all(isinstance(c, AgentCase) for c in cases):
        raise registry.RegistryError(f"algorithm {entry.name!r}: cases() must return a non-empty list of AgentCase")
    return cases


def check_agent(algorithm: str | type | Algorithm, backend: str | Sequence[str] | None = None, *,
                options: Mapping[str, Any] | None = None, seed: int = 0, max_steps: int = 200,
                batch_size: int = 8) -> AgentReport:
    """Check a registered algorithm against the agent contract (module docstring); returns what was checked.

    ``algorithm``: a registered name, a registered class or an :class:`~marl_note.agents.registry.Algorithm`.
    ``backend``: ``"torch"``, ``"tf"``, a list of them, or None for every backend the entry has
    (checkpoints then cross between them). ``options`` override the entry's ``tiny`` constructor
    options. A failure raises :class:`AgentCheckError`.

    Example:
        >>> from marl_note.agents.torch import PPO
        >>> check_agent(PPO, "torch", options={"n_steps": 8}).cases
        ('Discrete', 'Box')
        >>> check_agent("dqn", "torch", options={"learning_starts": 10_000}, max_steps=20)
        Traceback (most recent call last):
        ...
        marl_note.agents.checks.AgentCheckError: check_agent('dqn', backend 'torch', case 'Discrete'): no gradient \
step in 20 steps of 8 rows (update(8) after each): give options that let it learn sooner (e.g. learning_starts=..., \
n_steps=...)
    """
    entry = _entry(algorithm)
    backends = entry.backends if backend is None else (backend,) if isinstance(backend, str) else tuple(backend)
    for b in backends:
        if b not in entry.backends:
            raise registry.RegistryError(f"algorithm {entry.name!r} has no {b} class; it has "
                                         f"{', '.join(entry.backends)}")
    opts = {**entry.tiny, **(options or {})}
    cases = _cases(entry)
    report = AgentReport(entry.name, tuple(backends), tuple(c.label for c in cases))
    with tempfile.TemporaryDirectory(prefix="check_agent-") as tmp:
        for case in cases:
            _check_case(entry, backends, case, opts, seed, max_steps, batch_size, tmp, report)
    return report


def _check_case(entry: Algorithm, backends: Sequence[str], case: AgentCase, options: Mapping[str, Any], seed: int,
                max_steps: int, batch_size: int, tmp: str, report: AgentReport) -> None:
    saved: dict[str, tuple[str, dict[str, np.ndarray], Any, Any, Any, Any]] = {}
    initial: dict[str, dict[str, np.ndarray]] = {}
    checkers = {b: _Checker(entry, b, case, options, seed, max_steps, batch_size) for b in backends}
    for b, ck in checkers.items():
        agent = ck.build(seed)
        initial[b] = before = ck.state(agent, "a new agent")
        if len(backends) == 1:  # with two, the backends' initial states are compared instead
            ck.same_state(ck.state(ck.build(seed), "a second new agent"), before, f"two agents built with seed={seed}")
            report.passed("seeded construction")
        on_policy = registry.is_on_policy(agent)
        if on_policy != entry.on_policy:
            raise ck.fail(f"is_on_policy(agent) is {on_policy}, but the entry says on_policy={entry.on_policy}")
        report.passed("is_on_policy")
        obs, mask = ck.learn(agent)
        report.passed("act")
        report.passed("observe/update")
        after = ck.state(agent, "a trained agent")
        if all(np.array_equal(after[k], before[k]) for k in before if k in after and before[k].dtype.kind == "f"):
            raise ck.fail("two updates with gradient steps changed no float array of state_dict()")
        report.passed("learning changes the weights")
        path = os.path.join(tmp, f"{entry.name}-{b}-{case.label}".replace(" ", "_").replace("+", "_"))
        try:  # with its replay: an agent may explore by how full it is (SAC's uniform warm-up)
            agent.save(path, **({"include_replay": True} if replay_of(agent) is not None else {}))
        except Exception as exc:
            raise ck.fail(f"save() raised {type(exc).__name__}: {exc}") from exc
        greedy = ck.act(agent, obs, mask, explore=False)
        exploring = ck.act(agent, obs, mask, explore=True)
        saved[b] = (path, after, obs, mask, greedy, exploring)
        _check_numpy_parity(ck, agent, path, after, obs, mask, greedy, report)
    _check_initial_states(checkers, initial, report)
    for b, (path, state, obs, mask, greedy, exploring) in saved.items():
        targets = [c for c in backends if c != b] or [b]
        for c in targets:
            ck = checkers[c]
            where = f"{ck.cls.__name__}.restore() of the {b} checkpoint"
            try:
                restored = ck.cls.restore(path)  # type: ignore[attr-defined]
            except Exception as exc:
                raise ck.fail(f"{where} raised {type(exc).__name__}: {exc}") from exc
            ck.same_state(ck.state(restored, where), state, where)
            ck.same_actions(ck.act(restored, obs, mask, explore=False), greedy,
                            f"{where}: greedy actions differ from the saved agent's", exact=True)
            ck.same_actions(ck.act(restored, obs, mask, explore=True), exploring,
                            f"{where}: exploring actions differ from the saved agent's (is the generator or the "
                            f"exploration schedule missing from state_dict(), or the replay from save(include_replay="
                            f"True)?)", exact=True)
            report.passed(f"restore {b}->{c}")


def _check_numpy_parity(ck: _Checker, agent: Any, path: str, state: Mapping[str, np.ndarray], obs: Any, mask: Any,
                        greedy: Any, report: AgentReport) -> None:
    """The checkpoint restored with ``numpy_acting=False`` acts through the framework: same greedy actions."""
    policy = getattr(agent, "numpy_policy", None)
    if not callable(policy) or policy() is None or "numpy_acting" not in inspect.signature(ck.cls).parameters:
        return
    where = f"{ck.cls.__name__}.restore(numpy_acting=False)"
    try:
        framework = ck.cls.restore(path, numpy_acting=False)  # type: ignore[attr-defined]
    except Exception as exc:
        raise ck.fail(f"{where} raised {type(exc).__name__}: {exc}") from exc
    if framework.numpy_policy() is not None:
        raise ck.fail(f"{where} still acts through a numpy copy")
    ck.same_state(ck.state(framework, where), state, where)
    ck.same_actions(ck.act(framework, obs, mask, explore=False), greedy,
                    f"acting through the framework ({where}) and through the numpy copy disagree", exact=False)
    report.passed("numpy parity")


def _check_initial_states(checkers: Mapping[str, _Checker], initial: Mapping[str, dict[str, np.ndarray]],
                          report: AgentReport) -> None:
    """The same seed draws the same initial state in every backend (the weights are drawn in numpy)."""
    (first, ref), *others = initial.items()
    for b, state in others:
        checkers[b].same_state(state, ref, f"the initial state with the same seed in {b} and {first}")
        report.passed("same initial state in every backend")
