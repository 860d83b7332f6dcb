"""Conformance checks for an env, shipped as library code (like PettingZoo's ``api_test`` and SB3's ``check_env``).

:func:`check_env` adapts the env as the trainer does (:func:`~marl_note.envs.adapters.adapt`,
:func:`~marl_note.envs.adapters.make_spec`) and plays a few episodes of random legal actions to
their end, checking the canonical contract (docs/ARCHITECTURE.md, "Envs") at every reset and step:

- the observation keys are agents of the env, and exactly the agents that must act next: none
  once the episode is over, at least one before, one at a time in a turn-based env, and in a
  Parallel env every agent asked to act is asked again or reported ended;
- each observation (and final observation) fits its agent's observation space (shape, dtype
  kind, bounds) and is finite;
- action masks: where the env declares them, every acting agent has one, boolean, one entry per
  action, with a legal action; where it declares none, none appear;
- rewards are finite numbers of agents of the env; an agent ends (``terminated`` or
  ``truncated``) at most once and is not asked to act in the step it ends; when the episode is
  over, every agent that acted in it has been reported ended (so its last transition closes);
- seeding: ``reset(seed)`` twice gives the same first observations, and the same actions then
  give the same episode.

A failure raises :class:`EnvCheckError` naming the env, the agent and what is wrong.

Example:
    >>> report = check_env("CartPole-v1")
    >>> report.agents, report.episodes, report.turn_based
    (('agent_0',), 3, False)
    >>> import gymnasium as gym, numpy as np
    >>> class Loose(gym.Env):
    ...     observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    ...     action_space = gym.spaces.Discrete(2)
    ...     def reset(self, seed=None, options=None):
    ...         return np.zeros(3, np.float32), {}
    ...     def step(self, action):
    ...         return np.zeros(3, np.float32), 0.0, True, False, {}
    >>> check_env(Loose)
    Traceback (most recent call last):
    ...
    marl_note.envs.checks.EnvCheckError: check_env(Loose): agent 'agent_0': reset(seed=0) observation has shape \
(3,), but its space is Box(-1.0, 1.0, (2,), float32)
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.envs.adapters import (
    AECAdapter,
    AECEnv,
    GymAdapter,
    ParallelAdapter,
    ParallelEnv,
    StepResult,
    adapt,
    env_factory,
    make_spec,
)
from marl_note.types import EnvSpec

__all__ = ["EnvCheckError", "EnvReport", "check_env"]


class EnvCheckError(AssertionError):
    """An env that breaks the canonical contract; the message names the env, the agent and the problem."""


@dataclass
class EnvReport:
    """What :func:`check_env` played: the env's agents, its turn structure and the episodes' lengths.

    Example:
        >>> EnvReport("tictactoe_v3", ("player_1", "player_2"), True, True, [9]).episodes
        1
    """

    name: str
    agents: tuple[str, ...]
    turn_based: bool
    has_action_mask: bool
    lengths: list[int] = field(default_factory=list)

    @property
    def episodes(self) -> int:
        return len(self.lengths)


def _name(env: Any) -> str:
    base = getattr(env, "unwrapped", env)
    spec_id = getattr(getattr(env, "spec", None), "id", None)
    if spec_id:
        return str(spec_id)
    metadata = getattr(base, "metadata", None)
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        return metadata["name"]
    return type(base).__name__


class _Checker:
    """One adapted env: checks each reset / step result, raising EnvCheckError naming the env and agent."""

    def __init__(self, name: str, adapter: Any, spec: EnvSpec, seed: int):
        self.name, self.adapter, self.spec = name, adapter, spec
        self.rng = np.random.default_rng(seed)
        self.samplers: dict[str, gym.Space] = {}
        for k, a in enumerate(spec.possible_agents):
            space = copy.deepcopy(spec.action_space(a))
            space.seed(seed + k)
            self.samplers[a] = space

    def fail(self, what: str, agent: str | None = None) -> EnvCheckError:
        who = f" agent {agent!r}:" if agent is not None else ""
        return EnvCheckError(f"check_env({self.name}):{who} {what}")

    # -- one result ----------------------------------------------------------------------------------
    def check(self, res: Any, call: str, acting: set[str], ended: set[str]) -> None:
        """``res`` of ``call``; ``acting``: the agents asked to act before it; ``ended``: those ended so far."""
        spec = self.spec
        if not isinstance(res, StepResult):
            raise self.fail(f"{call} returned {type(res).__name__}, not a StepResult")
        for what in ("obs", "masks", "rewards", "terminated", "truncated", "final_obs", "final_masks"):
            unknown = [a for a in getattr(res, what) if a not in spec.possible_agents]
            if unknown:
                raise self.fail(f"{call} gives {what} for {unknown[0]!r}, which is not one of the env's agents "
                                f"{list(spec.possible_agents)}")
        if res.episode_over and res.obs:
            raise self.fail(f"{call} ends the episode but asks {sorted(res.obs)} to act")
        if not res.episode_over and not res.obs:
            raise self.fail(f"{call} asks no agent to act, but the episode is not over")
        if spec.turn_based and len(res.obs) > 1:
            raise self.fail(f"{call} asks {sorted(res.obs)} to act at once in a turn-based env")
        for agent, obs in res.obs.items():
            if agent in ended:
                raise self.fail(f"{call} asks it to act after its episode ended", agent)
            self.check_obs(agent, obs, f"{call} observation")
            self.check_mask(agent, res.masks.get(agent), call)
        stray = [a for a in res.masks if a not in res.obs]
        if stray:
            raise self.fail(f"{call} gives a mask but no observation", stray[0])
        for agent, reward in res.rewards.items():
            if not isinstance(reward, (int, float, np.number)) or not np.isfinite(reward):
                raise self.fail(f"{call} reward is {reward!r}; rewards must be finite numbers", agent)
        self.check_ends(res, call, ended)
        if not spec.turn_based:  # a Parallel env asks every live agent again, or reports it ended
            vanished = sorted(acting - set(res.obs) - set(res.terminated) - set(res.truncated))
            if vanished:
                raise self.fail(f"{call} neither asks it to act again nor reports it terminated or truncated "
                                f"(it vanished from the episode)", vanished[0])

    def check_ends(self, res: StepResult, call: str, ended: set[str]) -> None:
        for agent in set(res.terminated) | set(res.truncated):
            term, trunc = res.terminated.get(agent, False), res.truncated.get(agent, False)
            if not isinstance(term, (bool, np.bool_)) or not isinstance(trunc, (bool, np.bool_)):
                raise self.fail(f"{call} terminated / truncated must be booleans, got {term!r} / {trunc!r}", agent)
            if not (term or trunc):
                continue
            if agent in ended:
                raise self.fail(f"{call} reports its episode ended a second time", agent)
            if agent in res.obs:
                raise self.fail(f"{call} reports it ended and asks it to act in the same step", agent)
            if agent not in res.final_obs:
                raise self.fail(f"{call} reports it ended without its final observation", agent)
            self.check_obs(agent, res.final_obs[agent], f"{call} final observation")
            ended.add(agent)

    def check_obs(self, agent: str, obs: Any, what: str) -> None:
        space = self.spec.observation_space(agent)
        problem = _obs_problem(space, obs)
        if problem is not None:
            raise self.fail(f"{what} {problem}", agent)

    def check_mask(self, agent: str, mask: Any, call: str) -> None:  # (only Discrete spaces have masks: make_spec)
        if not self.spec.has_action_mask:
            if mask is not None:
                raise self.fail(f"{call} gives an action mask, but the env declared none at its first reset (no "
                                f"'action_mask' in its observation space or reset infos)", agent)
            return
        space: Any = self.spec.action_space(agent)
        if mask is None:
            raise self.fail(f"{call} gives no action mask, but the env has masks", agent)
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (int(space.n),):
            raise self.fail(f"{call} action mask is {mask.dtype} {mask.shape}, expected bool ({int(space.n)},) for "
                            f"{space}", agent)
        if not mask.any():
            raise self.fail(f"{call} action mask allows no legal action", agent)

    # -- acting ----------------------------------------------------------------------------------------
    def actions(self, res: StepResult) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for agent in res.obs:
            space: Any = self.spec.action_space(agent)
            mask = res.masks.get(agent)
            if isinstance(space, gym.spaces.Discrete):
                legal = np.flatnonzero(mask) if mask is not None else np.arange(int(space.n))
                out[agent] = int(space.start + self.rng.choice(legal))
            elif isinstance(space, gym.spaces.Box):
                low = np.where(np.isfinite(space.low), space.low, -1.0)
                high = np.where(np.isfinite(space.high), space.high, 1.0)
                out[agent] = self.rng.uniform(low, high).astype(space.dtype)
            else:
                out[agent] = self.samplers[agent].sample()
        return out

    def episode(self, seed: int, max_steps: int, replay: list[dict[str, Any]] | None = None
                ) -> tuple[list[dict[str, Any]], list[StepResult]]:
        """Play one episode from ``reset(seed)`` (with ``replay``'s actions, else random legal ones)."""
        call = f"reset(seed={seed})"
        res = self._call(call, lambda: self.adapter.reset(seed=seed))
        acting: set[str] = set()
        ended: set[str] = set()
        seen: set[str] = set()
        actions_taken: list[dict[str, Any]] = []
        results = [res]
        for t in range(max_steps + 1):
            self.check(res, call, acting, ended)
            seen |= set(res.obs)
            if res.episode_over:
                unended = sorted(seen - ended)
                if unended:
                    raise self.fail(f"the episode ended at step {t} without reporting it terminated or truncated "
                                    f"(its last transition would never close)", unended[0])
                return actions_taken, results
            if replay is not None and t >= len(replay):
                return actions_taken, results
            actions = self.actions(res) if replay is None else replay[t]
            acting = set(res.obs)
            call = f"step {t + 1} (after reset(seed={seed}))"
            res = self._call(call, lambda a=actions: self.adapter.step(a))
            actions_taken.append(actions)
            results.append(res)
        raise self.fail(f"an episode from reset(seed={seed}) did not end within {max_steps} steps of random legal "
                        f"actions (pass max_steps=..., or wrap the env in a time limit)")

    def _call(self, call: str, fn: Any) -> Any:
        try:
            return fn()
        except EnvCheckError:
            raise
        except Exception as exc:
            raise self.fail(f"{call} raised {type(exc).__name__}: {exc}") from exc

    def same_episode(self, seed: int, first: list[StepResult], actions: list[dict[str, Any]], max_steps: int) -> None:
        _, again = self.episode(seed, max_steps, replay=actions)
        for t, (a, b) in enumerate(zip(first, again)):
            what = f"reset(seed={seed})" if t == 0 else f"step {t} after reset(seed={seed}) with the same actions"
            if sorted(a.obs) != sorted(b.obs):
                raise self.fail(f"{what} asks {sorted(b.obs)} to act the second time and {sorted(a.obs)} the first: "
                                f"the same seed must give the same episode")
            for agent in a.obs:
                if not _same(a.obs[agent], b.obs[agent]):
                    raise self.fail(f"{what} gives another observation the second time: the same seed must give the "
                                    f"same episode (is the env's randomness seeded from reset(seed)?)", agent)
            if a.rewards != b.rewards:
                raise self.fail(f"{what} gives rewards {b.rewards} the second time and {a.rewards} the first: the "
                                f"same seed must give the same episode")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def _obs_problem(space: gym.Space, obs: Any) -> str | None:
    """Why ``obs`` does not fit ``space`` (None: it does)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            return f"must be a dict with keys {sorted(space.spaces)}, got {got}"
        for key, sub in space.spaces.items():
            problem = _obs_problem(sub, obs[key])
            if problem is not None:
                return f"[{key!r}] {problem}"
        return None
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple) or len(obs) != len(space.spaces):
            return f"must be a tuple of {len(space.spaces)}, got {type(obs).__name__}"
        for k, sub in enumerate(space.spaces):
            problem = _obs_problem(sub, obs[k])
            if problem is not None:
                return f"[{k}] {problem}"
        return None
    arr = np.asarray(obs)
    if isinstance(space, gym.spaces.Box):
        if arr.shape != space.shape:
            return f"has shape {arr.shape}, but its space is {space}"
        if arr.dtype.kind not in "biuf" or (space.dtype.kind in "iub" and arr.dtype.kind == "f"):
            return f"has dtype {arr.dtype}, which does not fit {space}"
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            return "is not finite (NaN or inf)"
        low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        outside = (arr < low) | (arr > high)
        if outside.any():
            i = tuple(int(j) for j in np.argwhere(outside)[0])
            return f"has {arr[i]} at {i}, outside its space's bounds [{low[i]}, {high[i]}] ({space})"
        return None
    if not space.contains(arr if arr.shape else arr.item()):
        return f"{obs!r} is not in its space {space}"
    return None


def check_env(env: Any, *, episodes: int = 3, seed: int = 0, max_steps: int = 10_000) -> EnvReport:
    """Check ``env`` against the canonical multi-agent contract (module docstring); returns what was played.

    ``env``: a Gymnasium id, an env factory (``tictactoe_v3.env``, ``lambda: gym.make(...)``), a
    PettingZoo env module, or an env instance (Gymnasium, PettingZoo AEC or Parallel). ``episodes``
    of random legal actions are played from ``reset(seed + k)``, each within ``max_steps`` steps; the
    first is replayed to check seeding. An env this function built is closed at the end. A failure
    raises :class:`EnvCheckError`.

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> report = check_env(tictactoe_v3.env, episodes=2)
        >>> report.agents, report.turn_based, report.has_action_mask
        (('player_1', 'player_2'), True, True)
    """
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    instance = isinstance(env, (gym.Env, AECEnv, ParallelEnv, GymAdapter, ParallelAdapter, AECAdapter))
    raw = env if instance else env_factory(env)()
    name = _name(raw.env if isinstance(raw, (GymAdapter, ParallelAdapter, AECAdapter)) else raw)
    try:
        try:
            adapter = adapt(raw)
            spec = make_spec(adapter)
        except (TypeError, ValueError) as exc:
            raise EnvCheckError(f"check_env({name}): {exc}") from exc
        checker = _Checker(name, adapter, spec, seed)
        report = EnvReport(name, spec.possible_agents, spec.turn_based, spec.has_action_mask)
        first: tuple[list[dict[str, Any]], list[StepResult]] | None = None
        for k in range(episodes):
            actions, results = checker.episode(seed + k, max_steps)
            first = first or (actions, results)
            report.lengths.append(len(actions))
        assert first is not None
        checker.same_episode(seed, first[1], first[0], max_steps)
        return report
    finally:
        if not instance:
            raw.close()
