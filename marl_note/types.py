"""Numpy-only types shared by every layer of marl_note.

Nothing here imports torch or tensorflow; everything that crosses a seam between
``envs``, ``replay``, ``agents`` and ``trainers`` is one of these types or a plain
numpy array.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import gymnasium as gym
import numpy as np

#: A batch of observations: one array, or one array per key for Dict observation spaces (goal envs).
Obs = np.ndarray | dict[str, np.ndarray]

#: What ``state_dict()`` of a numpy-side object (replay buffers, sum tree) returns: named numpy
#: arrays and numpy scalars, ``np.savez``-able without pickle.
NumpyState = dict[str, np.ndarray | np.generic]


@dataclass(frozen=True)
class EnvSpec:
    """What downstream code needs to know about an environment.

    Observation spaces have the action mask stripped: an agent sees the plain
    observation and, separately, a boolean mask of legal actions. ``state_space`` is the space of
    the env's global state (PettingZoo's ``state()``, e.g. MPE's), None when the env has none.

    Example:
        >>> import gymnasium as gym
        >>> spec = EnvSpec(("agent_0",), {"agent_0": gym.spaces.Box(-1, 1, (4,))},
        ...                {"agent_0": gym.spaces.Discrete(2)}, turn_based=False, has_action_mask=False)
        >>> spec.num_agents, int(spec.action_space("agent_0").n)
        (1, 2)
    """

    possible_agents: tuple[str, ...]
    observation_spaces: Mapping[str, gym.Space]
    action_spaces: Mapping[str, gym.Space]
    turn_based: bool
    has_action_mask: bool
    state_space: gym.Space | None = None

    @property
    def num_agents(self) -> int:
        return len(self.possible_agents)

    def observation_space(self, agent: str) -> gym.Space:
        self._check(agent)
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        self._check(agent)
        return self.action_spaces[agent]

    def seat(self, agent: str) -> int:
        self._check(agent)
        return self.possible_agents.index(agent)

    def _check(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise KeyError(f"unknown agent {agent!r}; the env's agents are {list(self.possible_agents)}")


@dataclass
class Transitions:
    """A batch of one agent's transitions, leading axis = batch.

    ``stream`` identifies the (env, seat) stream a transition came from; within a
    stream transitions arrive in time order, which on-policy learners (GAE) rely on.
    ``mask``/``next_mask`` are boolean legal-action masks at ``obs``/``next_obs``
    (``None`` when the env has no masks).

    Example:
        >>> t = Transitions(obs=np.zeros((2, 3)), act=np.array([0, 1]), rew=np.ones(2, np.float32),
        ...                 next_obs=np.zeros((2, 3)), terminated=np.array([False, True]),
        ...                 truncated=np.zeros(2, bool))
        >>> len(t), t[1:].terminated.tolist()
        (2, [True])
    """

    obs: Obs
    act: np.ndarray
    rew: np.ndarray
    next_obs: Obs
    terminated: np.ndarray
    truncated: np.ndarray
    mask: np.ndarray | None = None
    next_mask: np.ndarray | None = None
    stream: np.ndarray | None = None
    discount: np.ndarray | None = None  # per-item bootstrap discount (gamma**k for n-step); None = agent's gamma
    weights: np.ndarray | None = field(default=None)  # importance weights (prioritized replay)
    indices: np.ndarray | None = field(default=None)  # storage indices of sampled items

    def __len__(self) -> int:
        return int(self.rew.shape[0])

    def __getitem__(self, index) -> Transitions:
        return Transitions(**{f.name: index_obs(getattr(self, f.name), index) for f in fields(self)})

    @property
    def done(self) -> np.ndarray:
        return np.logical_or(self.terminated, self.truncated)

    @staticmethod
    def concatenate(parts: list[Transitions]) -> Transitions:
        if not parts:
            raise ValueError("cannot concatenate an empty list of Transitions")
        out: dict[str, Any] = {}
        for f in fields(Transitions):
            values = [getattr(p, f.name) for p in parts]
            if any(v is None for v in values):
                out[f.name] = None
            elif isinstance(values[0], dict):  # dict observations (goal envs): key-wise
                out[f.name] = {k: np.concatenate([v[k] for v in values], axis=0) for k in values[0]}
            else:
                out[f.name] = np.concatenate(values, axis=0)
        return Transitions(**out)


def stack_obs(items: list) -> Any:
    """Stack per-agent observations into a batch; dict and tuple observations are stacked entry-wise,
    at any depth (a batch of Tuple observations is a tuple of batched arrays).

    Example:
        >>> b = stack_obs([(1, {"x": np.zeros(2)}), (0, {"x": np.ones(2)})])
        >>> b[0].tolist(), b[1]["x"].shape
        ([1, 0], (2, 2))
    """
    if isinstance(items[0], dict):
        return {k: stack_obs([o[k] for o in items]) for k in items[0]}
    if isinstance(items[0], tuple):
        return tuple(stack_obs([o[i] for o in items]) for i in range(len(items[0])))
    if len(items) == 1 and isinstance(items[0], np.ndarray):  # one env: np.stack's result, at a fifth of its cost
        return items[0][None].copy()
    return stack_rows(items)


def stack_rows(items: list) -> np.ndarray:
    """``np.stack(items)``, at a fraction of its cost where the items are arrays of one shape or numpy
    scalars of one type.

    A collection chunk hands its rows over as one batch: tens of thousands of small arrays, where
    ``np.stack``'s per-array views cost more than the copy. Anything else (Python numbers, mixed types,
    0-d arrays, shapes that differ, which ``np.stack`` refuses) goes to ``np.stack``.

    Example:
        >>> stack_rows([np.zeros(2, np.float32), np.ones(2, np.float32)]).tolist()
        [[0.0, 0.0], [1.0, 1.0]]
    """
    first = items[0] if items else None
    if type(first) is np.ndarray and first.ndim:
        if set(map(type, items)) == {np.ndarray} and set(map(attrgetter("shape"), items)) == {first.shape}:
            return np.concatenate(items).reshape(len(items), *first.shape)
    elif isinstance(first, np.generic) and set(map(type, items)) == {type(first)}:  # numpy scalars of one type
        return np.array(items, dtype=first.dtype)
    return np.stack(items)


def obs_batch_size(obs) -> int:
    """Rows in a batch of observations: an array's length, or that of a dict's (or tuple's) first entry.

    Example:
        >>> obs_batch_size({"observation": np.zeros((5, 2)), "desired_goal": np.zeros((5, 2))})
        5
    """
    while isinstance(obs, (dict, tuple)):
        if not obs:
            raise ValueError("an empty dict or tuple is no batch of observations")
        obs = next(iter(obs.values())) if isinstance(obs, dict) else obs[0]
    return len(obs)


def index_obs(obs, index):
    """``obs[index]`` for an array, entry-wise for a (nested) dict or tuple of arrays, None stays None."""
    if obs is None:
        return None
    if isinstance(obs, dict):
        return {k: index_obs(v, index) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(index_obs(v, index) for v in obs)
    return obs[index]


def space_shape_dtype(space: gym.Space) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one sample of ``space`` as stored in numpy arrays."""
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return tuple(space.shape), np.dtype(space.dtype)
    raise TypeError(f"unsupported space {space!r}: marl_note stores Box, Discrete, MultiBinary and "
                    f"MultiDiscrete spaces (flatten Dict/Tuple observations with a wrapper)")


@dataclass
class JointTransitions:
    """One batch of joint per-step data of a Parallel env, for centralised critics (MADDPG).

    Row ``b`` is one env step of one env. Per-agent fields are dicts keyed by agent id over all
    ``possible_agents`` (rows of agents that did not act at that step are zeros, see ``alive``);
    ``rew``/``terminated``/``truncated``/``alive`` are ``[B, num_agents]`` in ``agents`` order.
    ``next_obs`` of an agent whose episode ended at that step is its final observation.
    ``mask``/``next_mask`` (``None`` when the env has no action masks) are dicts over all agents of
    ``[B, n_actions]`` bool legal-action masks at ``obs``/``next_obs``; a row with no mask to give
    (the agent did not act, or is gone at the next step without a final mask) is all True, i.e.
    unconstrained, so a mask row never forbids every action.
    ``state``/``next_state`` (``None`` when the env has no global state, see ``EnvSpec.state_space``)
    are ``[B, *state_shape]``: the env's ``state()`` when the agents acted and after the step (the
    final state of an episode that ended there). A learner that wants a centralised input on an env
    without a state builds it from the joint observation itself.

    Example:
        >>> jt = JointTransitions(("a", "b"), obs={"a": np.zeros((1, 2)), "b": np.zeros((1, 3))},
        ...     act={"a": np.zeros(1, int), "b": np.zeros(1, int)}, rew=np.zeros((1, 2), np.float32),
        ...     next_obs={"a": np.zeros((1, 2)), "b": np.zeros((1, 3))}, terminated=np.zeros((1, 2), bool),
        ...     truncated=np.zeros((1, 2), bool), alive=np.ones((1, 2), bool))
        >>> len(jt), jt.next_obs["b"].shape
        (1, (1, 3))
    """

    agents: tuple[str, ...]
    obs: dict[str, np.ndarray]
    act: dict[str, np.ndarray]
    rew: np.ndarray
    next_obs: dict[str, np.ndarray]
    terminated: np.ndarray
    truncated: np.ndarray
    alive: np.ndarray
    stream: np.ndarray | None = None  # env index of each row
    mask: dict[str, np.ndarray] | None = None  # legal actions at obs, per agent [B, n_actions] bool
    next_mask: dict[str, np.ndarray] | None = None  # legal actions at next_obs
    state: np.ndarray | None = None  # the env's global state at obs, [B, *state_shape]
    next_state: np.ndarray | None = None  # the global state after the step

    def __len__(self) -> int:
        return int(self.rew.shape[0])


class NonFiniteError(ValueError):
    """A NaN or infinite value where only finite numbers make sense, caught where it entered.

    Raised by the collector for a non-finite reward or float observation (naming the env index,
    the agent and the env step), and by the agents' updates for a non-finite loss or gradient norm
    (naming the agent and its update count, before the optimiser step writes any weight).

    Example:
        >>> err = NonFiniteError("env 0, agent 'agent_0': reward is nan")
        >>> isinstance(err, ValueError), str(err)
        (True, "env 0, agent 'agent_0': reward is nan")
    """
