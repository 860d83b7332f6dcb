"""Replay buffer for goal envs: whole episodes in a ring, goals relabelled at sample time."""
from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from marl_note.replay.episodes import EpisodeRing, EpisodeRingBuffer
from marl_note.replay.her import (
    GOAL_KEYS,
    HERSample,
    HindsightRelabeler,
    RewardFn,
    check_goal_space,
    goal_observation,
    goal_observation_space,
)
from marl_note.replay.storage import as_column, check_batch_size
from marl_note.types import Transitions, space_shape_dtype

# transition columns (also what an in-progress episode holds)
_DATA = ("observation", "desired_goal", "next_observation", "next_achieved_goal", "act", "rew", "terminated",
         "truncated")


class HERReplayBuffer(EpisodeRingBuffer):
    """Hindsight experience replay for Dict goal observations.

    ``add`` takes :class:`~marl_note.types.Transitions` whose ``obs``/``next_obs`` are
    dicts with ``observation``, ``achieved_goal`` and ``desired_goal`` batches (the
    ``stream`` field separates interleaved envs/seats). A stream's transitions are held
    until its episode ends (``terminated`` or ``truncated``) and then written as one
    contiguous block, so an episode's later steps are always still stored while its
    earlier ones are. ``sample`` returns flat Transitions with ``obs = [observation, goal]``
    (float32, see :attr:`flat_observation_space`), where the goal of a fraction
    ``k / (k + 1)`` of the items is replaced following ``strategy`` and their reward
    recomputed with ``compute_reward(achieved_goal, goal, {})``. Termination flags are kept
    as stored. Sampling never writes to storage.

    Example:
        >>> from marl_note.envs.goal_envs import BitFlippingEnv
        >>> env = BitFlippingEnv(n_bits=4)
        >>> buf = HERReplayBuffer.from_env(env, capacity=100, strategy="future", k=4, seed=0)
        >>> obs, _ = env.reset(seed=0)
        >>> done = False
        >>> while not done:
        ...     next_obs, rew, term, trunc, _ = env.step(int(env.action_space.sample()))
        ...     one = lambda o: {k: v[None] for k, v in o.items()}
        ...     buf.add(Transitions(obs=one(obs), act=np.array([0]), rew=np.array([rew]), next_obs=one(next_obs),
        ...                         terminated=np.array([term]), truncated=np.array([trunc])))
        ...     obs, done = next_obs, term or trunc
        >>> batch = buf.sample(8)
        >>> batch.obs.shape, batch.obs.dtype, buf.flat_observation_space.shape
        ((8, 8), dtype('float32'), (8,))
    """

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 compute_reward: RewardFn | None, strategy: str = "future", k: int = 4, seed: int | None = None):
        self.observation_space = space = check_goal_space(observation_space)
        self.action_space = action_space
        self.relabeler = HindsightRelabeler(compute_reward, strategy, k)
        self.flat_observation_space = goal_observation_space(space)
        obs_spec = space_shape_dtype(space["observation"])
        goal_spec = space_shape_dtype(space["desired_goal"])
        self._specs = {"observation": obs_spec, "desired_goal": goal_spec, "next_observation": obs_spec,
                       "next_achieved_goal": goal_spec, "act": space_shape_dtype(action_space),
                       "rew": ((), np.dtype(np.float32)), "terminated": ((), np.dtype(bool)),
                       "truncated": ((), np.dtype(bool))}
        self._ring = EpisodeRing(capacity, self._specs, seed, steps=True)  # ep_first, ep_len, step per item

    @classmethod
    def from_env(cls, env: gym.Env, capacity: int, strategy: str = "future", k: int = 4,
                 seed: int | None = None) -> HERReplayBuffer:
        """Spaces and ``compute_reward`` taken from a goal env (ValueError if it has none)."""
        base = getattr(env, "unwrapped", env)
        reward_fn = getattr(base, "compute_reward", None)
        if not callable(reward_fn):
            raise ValueError(f"{type(base).__name__} has no compute_reward(achieved_goal, desired_goal, info); "
                             f"construct HERReplayBuffer with compute_reward=... instead")
        return cls(capacity, env.observation_space, env.action_space, reward_fn, strategy, k, seed)

    @property
    def strategy(self) -> str:
        return self.relabeler.strategy

    @property
    def k(self) -> int:
        return self.relabeler.k

    def __repr__(self) -> str:
        return (f"HERReplayBuffer(len={len(self)}, pending={self.num_pending}, capacity={self.capacity}, "
                f"strategy={self.strategy!r}, k={self.k})")

    def column(self, name: str) -> np.ndarray:
        """Read-only view of a stored column (also ``ep_first``, ``ep_len``, ``step``)."""
        return self._ring.storage.column(name)

    # -- writing ---------------------------------------------------------------------------------
    def _columns(self, t: Transitions) -> dict[str, np.ndarray]:
        if not isinstance(t, Transitions):
            raise ValueError(f"expected a Transitions batch, got {type(t).__name__}")
        for name, keys in (("obs", ("observation", "desired_goal")), ("next_obs", ("observation", "achieved_goal"))):
            value = getattr(t, name)
            if not isinstance(value, Mapping):
                raise ValueError(f"HER transitions need dict {name} with keys {list(GOAL_KEYS)}, "
                                 f"got {type(value).__name__}")
            missing = [k for k in keys if k not in value]
            if missing:
                raise ValueError(f"{name} is missing goal keys {missing}")
        rew = np.asarray(t.rew)
        if rew.ndim != 1:
            raise ValueError(f"rew must be 1-D, got shape {rew.shape}")
        n = rew.shape[0]
        source = {"observation": t.obs["observation"], "desired_goal": t.obs["desired_goal"],
                  "next_observation": t.next_obs["observation"], "next_achieved_goal": t.next_obs["achieved_goal"],
                  "act": t.act, "rew": t.rew, "terminated": t.terminated, "truncated": t.truncated}
        return {name: np.array(as_column(name, source[name], *self._specs[name], n)) for name in _DATA}

    def add(self, transitions: Transitions) -> None:
        """Queue transitions per stream; write each stream's episode when it ends."""
        self._ring.add(self._columns(transitions), transitions.stream)  # validates everything first

    # -- sampling --------------------------------------------------------------------------------
    def sample_relabeled(self, batch_size: int) -> HERSample:
        """Like :meth:`sample` but also reports the goals, which items were relabelled and from where."""
        batch_size = check_batch_size(batch_size)
        if len(self) == 0:
            raise ValueError("cannot sample from an empty buffer (episodes are stored when they end)")
        ring = self._ring
        idx = ring.rng.integers(0, len(self), size=batch_size, dtype=np.int64)
        rows = ring.storage.read(idx)
        first_step = np.maximum(0, ring.added - self.capacity - rows["ep_first"])
        relabel, goal_step = self.relabeler.goal_steps(rows["step"], first_step, rows["ep_len"], ring.rng)
        goal_index = np.where(relabel, (rows["ep_first"] + goal_step) % self.capacity, -1)
        goal = rows["desired_goal"].copy()
        rew = rows["rew"].copy()
        if relabel.any():
            goal[relabel] = ring.storage.read(goal_index[relabel], ["next_achieved_goal"])["next_achieved_goal"]
            rew[relabel] = self.relabeler.rewards(rows["next_achieved_goal"][relabel], goal[relabel])
        transitions = Transitions(
            obs=goal_observation({"observation": rows["observation"]}, goal), act=rows["act"], rew=rew,
            next_obs=goal_observation({"observation": rows["next_observation"]}, goal),
            terminated=rows["terminated"], truncated=rows["truncated"], indices=idx)
        return HERSample(transitions, goal, relabel, goal_index)

    def sample(self, batch_size: int) -> Transitions:
        """``batch_size`` uniformly drawn transitions, goals relabelled; flat ``[observation, goal]`` obs."""
        return self.sample_relabeled(batch_size).transitions
