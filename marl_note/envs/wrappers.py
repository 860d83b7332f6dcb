"""Env wrappers for multi-agent setups: an agent-id feature for parameter sharing."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper


def _id_space(space: gym.Space, n: int, agent: str) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise TypeError(f"an agent-id feature can be appended to flat Box observations only; agent {agent!r} "
                        f"has {space}")
    low = np.concatenate([space.low, np.zeros(n, space.dtype)])
    high = np.concatenate([space.high, np.ones(n, space.dtype)])
    return gym.spaces.Box(low, high, dtype=space.dtype)


class _AgentIdMixin:
    env: Any  # the wrapped PettingZoo env (the wrapper base class this mixin is combined with sets it)

    def _setup_ids(self) -> None:
        agents = list(self.env.possible_agents)
        self._onehot = {a: np.eye(len(agents), dtype=np.float32)[i] for i, a in enumerate(agents)}
        self._spaces = {a: _id_space(self.env.observation_space(a), len(agents), a) for a in agents}

    def observation_space(self, agent: str) -> gym.Space:
        return self._spaces[agent]

    def _with_id(self, agent: str, obs: Any) -> np.ndarray:
        space = self._spaces[agent]
        return np.concatenate([np.asarray(obs, space.dtype), self._onehot[agent].astype(space.dtype)])


class AgentIdParallel(_AgentIdMixin, BaseParallelWrapper):
    """Appends a one-hot agent id to every agent's (flat Box) observation of a Parallel env.

    With it one shared-parameter agent can sit in every seat and still tell the seats apart.

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> env = AgentIdParallel(simple_spread_v3.parallel_env())
        >>> obs, _ = env.reset(seed=0)
        >>> obs["agent_1"][-3:].tolist(), env.observation_space("agent_1").shape
        ([0.0, 1.0, 0.0], (21,))
    """

    def __init__(self, env: ParallelEnv):
        super().__init__(env)
        self._setup_ids()

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return {a: self._with_id(a, o) for a, o in obs.items()}, infos

    def step(self, actions):
        obs, rew, term, trunc, infos = self.env.step(actions)
        return {a: self._with_id(a, o) for a, o in obs.items()}, rew, term, trunc, infos


class AgentIdAEC(_AgentIdMixin, BaseWrapper):
    """The turn-based counterpart of :class:`AgentIdParallel` (flat Box observations, no masks).

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> env = AgentIdAEC(simple_spread_v3.env())
        >>> env.reset(seed=0)
        >>> env.observe("agent_0")[-3:].tolist()
        [1.0, 0.0, 0.0]
    """

    def __init__(self, env: AECEnv):
        super().__init__(env)
        self._setup_ids()

    def observe(self, agent):
        return self._with_id(agent, self.env.observe(agent))


def with_agent_id(env_fn: Callable[[], Any]) -> Callable[[], Any]:
    """Wrap a PettingZoo env factory so every observation carries a one-hot agent id.

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> make = with_agent_id(simple_spread_v3.parallel_env)
        >>> make().observation_space("agent_0").shape
        (21,)
    """
    return functools.partial(_make_with_id, env_fn)


def _make_with_id(env_fn: Callable[[], Any]) -> Any:
    env = env_fn()
    if isinstance(env, ParallelEnv):
        return AgentIdParallel(env)
    if isinstance(env, AECEnv):
        return AgentIdAEC(env)
    raise TypeError(f"with_agent_id needs a PettingZoo env factory, got one that makes {type(env).__name__}")
