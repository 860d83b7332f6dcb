"""Env wrappers for parameter sharing: an agent-id feature for any observation space, and padding.

One shared-parameter agent in every seat needs to tell the seats apart (:func:`with_agent_id`) and,
where seats differ, one observation and one action space for all of them (:func:`pad_seats`, which
uses SuperSuit's ``pad_observations_v0`` / ``pad_action_space_v0``).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper


class AgentIdFeature:
    """How one agent's observation space carries its id, chosen by the kind of space.

    - a flat ``Box`` (vector): a one-hot of the agent's index appended (``n`` more entries);
    - an image-shaped ``Box`` (``HxWxC``, or ``HxW`` which gains a channel axis): one constant plane
      appended as a last channel, holding ``(index + 1) / n`` for float images, that times 255 for
      uint8 ones and ``index + 1`` for other integer planes (board games);
    - a ``Dict``: an ``"agent_id"`` entry (a one-hot ``Box``) beside the others; a board game's
      ``Dict(observation=..., action_mask=...)`` gets the id on its ``observation`` instead, so the
      mask stays the env's;
    - any other space (``Discrete``, ``MultiDiscrete``, ``MultiBinary``, ``Tuple``, other ``Box``
      ranks): ``Dict(obs=<the space>, agent_id=<one-hot>)``.

    Example:
        >>> f = AgentIdFeature(gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), index=1, n=2, agent="a")
        >>> f.space.shape, f(np.zeros((4, 4, 3), np.uint8))[0, 0].tolist()
        ((4, 4, 4), [0, 0, 0, 255])
        >>> AgentIdFeature(gym.spaces.Discrete(3), index=0, n=2, agent="a")(2)["agent_id"].tolist()
        [1.0, 0.0]
    """

    def __init__(self, space: gym.Space, index: int, n: int, agent: str):
        self.onehot = np.eye(n, dtype=np.float32)[index]
        self.index, self.n = index, n
        self.kind, self.space = self._plan(space, n, agent)
        self.inner: AgentIdFeature | None = None
        if self.kind == "masked":
            assert isinstance(space, gym.spaces.Dict)
            self.inner = AgentIdFeature(space["observation"], index, n, agent)
            self.space = gym.spaces.Dict({**space.spaces, "observation": self.inner.space})

    def _plan(self, space: gym.Space, n: int, agent: str) -> tuple[str, gym.Space]:
        onehot = gym.spaces.Box(0.0, 1.0, (n,), np.float32)
        if isinstance(space, gym.spaces.Dict):
            if "agent_id" in space.spaces:
                raise ValueError(f"agent {agent!r} already has an 'agent_id' entry in its Dict observation "
                                 f"(the agent-id wrapper was applied twice?)")
            if set(space.spaces) == {"observation", "action_mask"}:
                return "masked", space
            return "dict", gym.spaces.Dict({**space.spaces, "agent_id": onehot})
        if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
            low = np.concatenate([space.low, np.zeros(n, space.dtype)])
            high = np.concatenate([space.high, np.ones(n, space.dtype)])
            return "vector", gym.spaces.Box(low, high, dtype=space.dtype)
        if isinstance(space, gym.spaces.Box) and len(space.shape) in (2, 3):
            low, high = space.low, space.high
            if low.ndim == 2:
                low, high = low[..., None], high[..., None]
            plane_shape = (*low.shape[:2], 1)
            low = np.concatenate([low, np.zeros(plane_shape, space.dtype)], axis=-1)
            high = np.concatenate([high, np.full(plane_shape, self._plane_value(space.dtype, n - 1), space.dtype)],
                                  axis=-1)
            return "image", gym.spaces.Box(low, high, dtype=space.dtype)
        return "wrap", gym.spaces.Dict({"obs": space, "agent_id": onehot})

    def _plane_value(self, dtype: np.dtype, index: int) -> float | int:
        if dtype == np.uint8:
            return round(255 * (index + 1) / self.n)
        if np.dtype(dtype).kind in "iu":
            return index + 1
        return (index + 1) / self.n

    def __call__(self, obs: Any) -> Any:
        if self.kind == "vector":
            return np.concatenate([np.asarray(obs, self.space.dtype), self.onehot.astype(self.space.dtype)])
        if self.kind == "image":
            dtype = np.dtype(self.space.dtype)
            arr = np.asarray(obs, dtype)
            if arr.ndim == 2:
                arr = arr[..., None]
            plane = np.full((*arr.shape[:2], 1), self._plane_value(dtype, self.index), dtype)
            return np.concatenate([arr, plane], axis=-1)
        if self.kind == "dict":
            return {**obs, "agent_id": self.onehot.copy()}
        if self.kind == "masked":
            assert self.inner is not None
            return {**obs, "observation": self.inner(obs["observation"])}
        return {"obs": obs, "agent_id": self.onehot.copy()}


class _AgentIdMixin:
    env: Any  # the wrapped PettingZoo env (the wrapper base class this mixin is combined with sets it)

    def _setup_ids(self) -> None:
        agents = list(self.env.possible_agents)
        self._features = {a: AgentIdFeature(self.env.observation_space(a), i, len(agents), a)
                          for i, a in enumerate(agents)}

    def observation_space(self, agent: str) -> gym.Space:
        return self._features[agent].space

    def _with_id(self, agent: str, obs: Any) -> Any:
        return self._features[agent](obs)


class AgentIdParallel(_AgentIdMixin, BaseParallelWrapper):
    """Adds the agent's id to every agent's observation of a Parallel env (see :class:`AgentIdFeature`).

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
    """The turn-based counterpart of :class:`AgentIdParallel` (masked board games keep their masks).

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
    """Wrap a PettingZoo env factory so every observation carries the agent's id (any observation space).

    Vectors get a one-hot appended, images a constant plane, Dict observations an ``agent_id``
    entry, other spaces become ``Dict(obs=..., agent_id=...)`` (see :class:`AgentIdFeature`).

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


def pad_seats(env_fn: Callable[[], Any], observations: bool = True, actions: bool = True) -> Callable[[], Any]:
    """Wrap a PettingZoo env factory so unlike seats share one observation and one action space.

    Uses SuperSuit (``pip install marl_note[supersuit]``): ``pad_observations_v0`` zero-pads every
    observation to the largest shape among the seats (Box and Discrete spaces), and
    ``pad_action_space_v0`` gives every seat the largest action space (SuperSuit maps an action
    beyond a seat's own space back: a Discrete one to action 0, a Box one by dropping the extra entries). Combine with
    :func:`with_agent_id` so one shared agent still tells the seats apart:
    ``with_agent_id(pad_seats(simple_tag_v3.parallel_env))``.

    Example:
        >>> from mpe2 import simple_tag_v3
        >>> env = pad_seats(simple_tag_v3.parallel_env)()
        >>> {env.observation_space(a).shape for a in env.possible_agents}  # adversaries 16, prey 14 before
        {(16,)}
    """
    return functools.partial(_make_padded, env_fn, observations, actions)


def _make_padded(env_fn: Callable[[], Any], observations: bool, actions: bool) -> Any:
    try:
        import supersuit
    except ImportError:
        raise ImportError("pad_seats needs SuperSuit: pip install supersuit (or marl_note[supersuit])") from None
    env = env_fn()
    if not isinstance(env, (ParallelEnv, AECEnv)):
        raise TypeError(f"pad_seats needs a PettingZoo env factory, got one that makes {type(env).__name__}")
    for agent in env.possible_agents:
        for kind, space in (("observation", env.observation_space(agent)), ("action", env.action_space(agent))):
            if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
                raise ValueError(f"pad_seats pads Box and Discrete spaces only (SuperSuit's rule); agent {agent!r} "
                                 f"has the {kind} space {space}")
    if observations:
        env = supersuit.pad_observations_v0(env)
    if actions:
        env = supersuit.pad_action_space_v0(env)
    return env
