"""Adapters from Gymnasium, PettingZoo Parallel and PettingZoo AEC envs to one contract.

The contract (docs/ARCHITECTURE.md, "Envs") is shaped like PettingZoo's Parallel API: ``reset`` and
``step`` return a :class:`StepResult` whose ``obs`` keys are exactly the agents that must act
next. Rewards are reported per agent as everything it received since the previous call; for
turn-based (AEC) envs that is PettingZoo's ``last()`` reward, reported when the agent is next
selected, so a move that the opponent's reply turns into a loss still reaches the mover.
Agents whose episode ended in a call appear in ``terminated``/``truncated`` with their final
observation in ``final_obs``. Dead-agent ``None`` steps of AEC envs are consumed here.

Global state: a PettingZoo env with ``state_space`` and ``state()`` (MPE's, for instance) has it in
its spec (``EnvSpec.state_space``). An adapter built with ``state=True`` puts ``env.state()`` in
every result (``StepResult.state``: the state at ``obs``; ``final_state``: the state when the
episode ended), for centralised critics; with ``state=False`` (the default) ``state()`` is never
called, so a learner that does not use it pays nothing.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.types import EnvSpec

try:  # pettingzoo is a core dependency, but keep the import error readable
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils import wrappers as _pz_wrappers
except ImportError:  # pragma: no cover
    AECEnv = ParallelEnv = ()
    _pz_wrappers = None

# PettingZoo's own AEC wrappers that neither override ``last()`` nor keep their own ``terminations``,
# ``truncations``, ``infos`` or ``_cumulative_rewards``: under a chain of only these, ``last()`` is
# exactly ``observe(agent)`` through the chain plus those dicts of the unwrapped env
_PLAIN_AEC_WRAPPERS: tuple[type, ...] = () if _pz_wrappers is None else tuple(
    getattr(_pz_wrappers, name) for name in ("OrderEnforcingWrapper", "AssertOutOfBoundsWrapper",
                                             "TerminateIllegalWrapper", "ClipOutOfBoundsWrapper",
                                             "CaptureStdoutWrapper") if hasattr(_pz_wrappers, name))

GYM_AGENT = "agent_0"


def unknown_agent(env: Any, did: str, agent: Any, possible_agents: tuple) -> ValueError:
    """The error for an agent that ``env`` brought up (``did``: "returned an observation for", ...) but
    does not list in its ``possible_agents``; the collector would otherwise fail on it with a bare
    ``KeyError``.

    Example:
        >>> print(unknown_agent("race_v0", "returned an observation for", "c", ("a", "b")))  # doctest: +ELLIPSIS
        env 'race_v0' returned an observation for agent 'c', which is not in its possible_agents ['a', 'b']. ...
    """
    return ValueError(f"env {str(env)!r} {did} agent {agent!r}, which is not in its possible_agents "
                      f"{list(possible_agents)}. An env must list every agent it can ever have in possible_agents.")


@dataclass
class StepResult:
    """What one ``reset``/``step`` of an adapted env returns (see module docstring).

    Example:
        >>> res = StepResult(obs={"player_2": np.zeros(3)}, masks={}, rewards={"player_1": 1.0})
        >>> list(res.obs), res.episode_over
        (['player_2'], False)
    """

    obs: dict[str, Any]
    masks: dict[str, np.ndarray]
    rewards: dict[str, float] = field(default_factory=dict)
    terminated: dict[str, bool] = field(default_factory=dict)
    truncated: dict[str, bool] = field(default_factory=dict)
    final_obs: dict[str, Any] = field(default_factory=dict)
    final_masks: dict[str, np.ndarray] = field(default_factory=dict)
    episode_over: bool = False
    infos: dict[str, dict] = field(default_factory=dict)
    state: np.ndarray | None = None  # the env's global state at ``obs`` (adapters built with state=True)
    final_state: np.ndarray | None = None  # the global state at the end of a finished episode


def strip_action_mask_space(space: gym.Space) -> tuple[gym.Space, bool]:
    """Observation space without its action mask, and whether it carried one.

    ``Dict(observation=..., action_mask=...)`` becomes its ``observation`` space; any other
    ``Dict`` with an ``action_mask`` becomes the ``Dict`` of its other entries.
    """
    if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
        rest = {k: v for k, v in space.spaces.items() if k != "action_mask"}
        if set(rest) == {"observation"}:
            return rest["observation"], True
        return gym.spaces.Dict(rest), True
    return space, False


_strip_space = strip_action_mask_space


def _split(raw: Any, info: dict | None) -> tuple[Any, np.ndarray | None]:
    """Split a raw observation into (observation, bool mask or None)."""
    if isinstance(raw, dict) and "action_mask" in raw:
        mask = np.asarray(raw["action_mask"], dtype=bool)
        if len(raw) == 2 and "observation" in raw:
            return raw["observation"], mask
        return {k: v for k, v in raw.items() if k != "action_mask"}, mask
    if info and "action_mask" in info:
        return raw, np.asarray(info["action_mask"], dtype=bool)
    return raw, None


def env_state_space(env: Any) -> gym.Space | None:
    """The global-state space of a PettingZoo env (``env.state_space``), or None when it has none.

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> env_state_space(simple_spread_v3.parallel_env()).shape, env_state_space(object())
        ((54,), None)
    """
    try:
        space = env.state_space
    except (AttributeError, NotImplementedError):  # wrappers forward attributes through __getattr__
        return None
    return space if isinstance(space, gym.spaces.Space) else None


def _state_of(env: Any) -> np.ndarray:
    return np.asarray(env.state())


class GymAdapter:
    """A single-agent ``gymnasium.Env`` as the one-seat case of the contract.

    Example:
        >>> import gymnasium as gym
        >>> env = GymAdapter(gym.make("CartPole-v1"))
        >>> list(env.reset(seed=0).obs)
        ['agent_0']
    """

    turn_based = False
    state_space = None  # a Gymnasium env has no global state beside its one observation

    def __init__(self, env: gym.Env, agent_id: str = GYM_AGENT):
        self.env = env
        self.agent = agent_id
        self.possible_agents = (agent_id,)

    def raw_spaces(self) -> tuple[dict, dict]:
        return {self.agent: self.env.observation_space}, {self.agent: self.env.action_space}

    def reset(self, seed: int | None = None) -> StepResult:
        raw, info = self.env.reset(seed=seed)
        obs, mask = _split(raw, info)
        return StepResult({self.agent: obs}, {} if mask is None else {self.agent: mask}, infos={self.agent: info})

    def step(self, actions: dict[str, Any]) -> StepResult:
        raw, reward, terminated, truncated, info = self.env.step(actions[self.agent])
        obs, mask = _split(raw, info)
        a = self.agent
        if terminated or truncated:
            return StepResult({}, {}, {a: float(reward)}, {a: bool(terminated)},
                              {a: bool(truncated) and not terminated}, {a: obs}, {} if mask is None else {a: mask},
                              True, {a: info})
        return StepResult({a: obs}, {} if mask is None else {a: mask}, {a: float(reward)}, infos={a: info})

    def close(self) -> None:
        self.env.close()


class ParallelAdapter:
    """A ``pettingzoo.ParallelEnv``: every live agent acts each step.

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> env = ParallelAdapter(simple_spread_v3.parallel_env())
        >>> sorted(env.reset(seed=0).obs)
        ['agent_0', 'agent_1', 'agent_2']
    """

    turn_based = False

    def __init__(self, env: Any, state: bool = False):
        self.env = env
        self.possible_agents = tuple(env.possible_agents)
        self._known = frozenset(self.possible_agents)
        self.state_space = env_state_space(env)
        self.with_state = bool(state) and self.state_space is not None

    def raw_spaces(self) -> tuple[dict, dict]:
        return ({a: self.env.observation_space(a) for a in self.possible_agents},
                {a: self.env.action_space(a) for a in self.possible_agents})

    def reset(self, seed: int | None = None) -> StepResult:
        raw, infos = self.env.reset(seed=seed)
        res = StepResult({}, {}, infos=infos or {})
        for a in self.env.agents:
            if a not in self._known:
                raise unknown_agent(self.env, "started an episode with", a, self.possible_agents)
            res.obs[a], mask = _split(raw[a], (infos or {}).get(a))
            if mask is not None:
                res.masks[a] = mask
        if self.with_state:
            res.state = _state_of(self.env)
        return res

    def step(self, actions: dict[str, Any]) -> StepResult:
        raw, rewards, terms, truncs, infos = self.env.step(actions)
        known = self._known
        res = StepResult({}, {}, {a: float(r) for a, r in rewards.items()}, infos=infos or {})
        live = set(self.env.agents)
        for a, ob in raw.items():
            if a not in known:
                raise unknown_agent(self.env, "returned an observation for", a, self.possible_agents)
            o, mask = _split(ob, (infos or {}).get(a))
            if terms.get(a, False) or truncs.get(a, False) or a not in live:
                res.terminated[a] = bool(terms.get(a, False))
                res.truncated[a] = not res.terminated[a]
                res.final_obs[a] = o
                if mask is not None:
                    res.final_masks[a] = mask
            else:
                res.obs[a] = o
                if mask is not None:
                    res.masks[a] = mask
        if not res.rewards.keys() <= known:
            raise unknown_agent(self.env, "returned a reward for", min(res.rewards.keys() - known, key=str),
                                self.possible_agents)
        res.episode_over = not live
        if self.with_state:
            if res.episode_over:
                res.final_state = _state_of(self.env)
            else:
                res.state = _state_of(self.env)
        return res

    def close(self) -> None:
        self.env.close()


class AECAdapter:
    """A turn-based ``pettingzoo.AECEnv``: only ``agent_selection`` acts.

    Rewards follow PettingZoo's ``last()``: what an agent received since its own previous action,
    reported when it is next selected (to act, or dead at the end).

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> env = AECAdapter(tictactoe_v3.env())
        >>> list(env.reset(seed=0).obs), list(env.step({"player_1": 4}).obs)
        (['player_1'], ['player_2'])
    """

    turn_based = True

    def __init__(self, env: Any, state: bool = False):
        self.env = env
        self.state_space = env_state_space(env)
        self.with_state = bool(state) and self.state_space is not None
        # bookkeeping attributes are read from the unwrapped env: each PettingZoo wrapper layer
        # forwards them through a Python __getattr__, which dominated the step cost
        self._base = getattr(env, "unwrapped", env)
        self.possible_agents = tuple(env.possible_agents)
        self._known = frozenset(self.possible_agents)
        self._direct_last = plain_aec_chain(env, self._base)

    def raw_spaces(self) -> tuple[dict, dict]:
        return ({a: self.env.observation_space(a) for a in self.possible_agents},
                {a: self.env.action_space(a) for a in self.possible_agents})

    def reset(self, seed: int | None = None) -> StepResult:
        self.env.reset(seed=seed)
        return self._advance(StepResult({}, {}))

    def step(self, actions: dict[str, Any]) -> StepResult:
        env = self.env
        agent = self._base.agent_selection
        if len(actions) != 1 or agent not in actions:
            raise ValueError(f"turn-based env expects exactly one action, for {agent!r}; "
                             f"got actions for {list(actions)}")
        env.step(actions[agent])
        return self._advance(StepResult({}, {}))

    def _advance(self, res: StepResult) -> StepResult:
        """Consume dead agents until a live agent must act or the episode is over."""
        env, base, direct = self.env, self._base, self._direct_last
        while base.agents:
            agent = base.agent_selection
            if agent not in self._known:
                raise unknown_agent(env, "selected (agent_selection)", agent, self.possible_agents)
            if direct and agent is not None:  # what last() returns, without its wrapper-chain lookups
                raw = env.observe(agent)
                reward, term = base._cumulative_rewards[agent], base.terminations[agent]
                trunc, info = base.truncations[agent], base.infos[agent]
            else:
                raw, reward, term, trunc, info = env.last()
            obs, mask = _split(raw, info)
            if reward:
                res.rewards[agent] = res.rewards.get(agent, 0.0) + float(reward)
            if term or trunc:
                res.terminated[agent] = bool(term)
                res.truncated[agent] = not term
                res.final_obs[agent] = obs
                if mask is not None:
                    res.final_masks[agent] = mask
                env.step(None)
                continue
            res.obs[agent] = obs
            if mask is not None:
                res.masks[agent] = mask
            res.infos[agent] = info
            if self.with_state:
                res.state = _state_of(env)
            return res
        res.episode_over = True
        if self.with_state:
            res.final_state = _state_of(env)
        return res

    def close(self) -> None:
        self.env.close()


_SHADOWED = {"last", "terminations", "truncations", "infos", "_cumulative_rewards"}


def plain_aec_chain(env: Any, base: Any) -> bool:
    """Whether ``env`` is ``base`` under only PettingZoo's plain wrappers (see ``_PLAIN_AEC_WRAPPERS``),
    so that its ``last()`` may be read from ``base``'s dicts (each wrapper layer forwards every
    attribute through a Python ``__getattr__``, which made ``last()`` half of a tic-tac-toe step).

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> env = tictactoe_v3.env()
        >>> plain_aec_chain(env, env.unwrapped)
        True
    """
    if getattr(type(env), "last", None) is not AECEnv.last or "last" in vars(env):
        return False
    layer = env
    while type(layer) in _PLAIN_AEC_WRAPPERS and not _SHADOWED & set(vars(layer)):
        layer = layer.env
    return layer is base


Adapter = GymAdapter | ParallelAdapter | AECAdapter


def adapt(env: Any, state: bool = False) -> Adapter:
    """Wrap an env instance in the adapter for its API, or raise a TypeError naming the problem.

    ``state=True``: the results carry the env's global state, where it has one (module docstring).
    """
    if isinstance(env, (GymAdapter, ParallelAdapter, AECAdapter)):
        return env
    if isinstance(env, AECEnv):
        return AECAdapter(env, state=state)
    if isinstance(env, ParallelEnv):
        return ParallelAdapter(env, state=state)
    if isinstance(env, gym.Env):
        return GymAdapter(env)
    raise TypeError(f"unsupported env {type(env).__name__!r}: expected a gymnasium.Env, a pettingzoo.AECEnv or a "
                    f"pettingzoo.ParallelEnv (or a factory / Gymnasium id that makes one)")


def env_factory(env: Any) -> Callable[[], Any]:
    """Normalise what a user passes as ``env`` into a zero-argument factory.

    Accepts a Gymnasium id (``"CartPole-v1"``), a callable returning an env (``tictactoe_v3.env``,
    ``lambda: gym.make(...)``), or a PettingZoo env module (``tictactoe_v3``).
    """
    if isinstance(env, str):
        try:
            gym.spec(env)
        except Exception as exc:  # gymnasium raises its own NameNotFound/VersionNotFound errors
            raise ValueError(f"unknown Gymnasium env id {env!r}: {exc}") from None
        return functools.partial(gym.make, env)
    if hasattr(env, "env") and callable(env.env) and type(env).__name__ == "module":
        return env.env
    if isinstance(env, (gym.Env, AECEnv, ParallelEnv)):
        raise TypeError("pass an env factory (e.g. tictactoe_v3.env or lambda: gym.make(...)) or a Gymnasium id, "
                        "not an env instance: the trainer builds one env per vector slot")
    if callable(env):
        return env
    raise TypeError(f"unsupported env {env!r}: expected a Gymnasium id string, an env factory or a PettingZoo module")


def make_spec(adapter: Adapter) -> EnvSpec:
    """Build the :class:`EnvSpec` of an adapted env (resets it once to look for info masks)."""
    raw_obs, act = adapter.raw_spaces()
    obs_spaces, has_mask = {}, False
    for a, space in raw_obs.items():
        obs_spaces[a], m = _strip_space(space)
        has_mask = has_mask or m
    if not has_mask:
        first = adapter.reset(seed=None)
        has_mask = bool(first.masks)
    for a, space in act.items():
        if has_mask and not isinstance(space, gym.spaces.Discrete):
            raise TypeError(f"agent {a!r} has an action mask but a {type(space).__name__} action space; "
                            f"masks are supported for Discrete actions")
    return EnvSpec(adapter.possible_agents, obs_spaces, act, adapter.turn_based, has_mask,
                   state_space=adapter.state_space)
