"""The replay an off-policy agent builds from its constructor options (numpy only, backend neutral).

The torch and TF agents (DQN, DDPG) share the original library's vocabulary::

    PR=True, alpha=0.6, beta=0.4, initial_TD=1.0    # prioritized replay
    num_steps=n                                      # n-step returns (NStepAccumulator)
    her=dict(strategy="future", k=4), compute_reward=env.compute_reward   # hindsight replay
    replay=<a buffer>                                # or bring your own buffer

:class:`ReplayFeed` turns those options into one buffer (``feed.replay``), an optional
n-step accumulator in front of it and, for goal envs (Dict observations with
``observation``/``achieved_goal``/``desired_goal``), the flattening of observations to
``[observation, desired_goal]`` that the networks consume (``feed.network_space``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import ReplayBuffer
from marl_note.replay.compact import CompactReplayBuffer
from marl_note.replay.her import GOAL_KEYS, check_goal_space, goal_observation, goal_observation_space
from marl_note.replay.nstep import NStepAccumulator
from marl_note.replay.prioritized import PrioritizedReplayBuffer
from marl_note.types import Transitions, space_shape_dtype


def _her_buffer() -> type:
    """:class:`~marl_note.replay.her_buffer.HERReplayBuffer`, loaded when a goal env first needs it."""
    from marl_note.replay.her_buffer import HERReplayBuffer

    return HERReplayBuffer

__all__ = ["ReplayFeed", "check_prioritized_options", "check_num_steps", "is_goal_space", "network_space"]

_HER_KEYS = ("strategy", "k")

#: ``optimize_memory="auto"`` stores each observation once when one observation takes at least this many bytes.
COMPACT_MIN_OBS_BYTES = 1024


def use_compact(optimize_memory: Any, space: gym.Space) -> bool:
    """Whether ``optimize_memory`` (True, False or ``"auto"``) asks for the compact layout over ``space``.

    Example:
        >>> frames, vectors = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8), gym.spaces.Box(-1, 1, (4,))
        >>> use_compact("auto", frames), use_compact("auto", vectors), use_compact(True, vectors)
        (True, False, True)
    """
    if optimize_memory == "auto":
        shape, dtype = space_shape_dtype(space)
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize >= COMPACT_MIN_OBS_BYTES
    if not isinstance(optimize_memory, (bool, np.bool_)):
        raise ValueError(f"optimize_memory must be True, False or 'auto', got {optimize_memory!r}")
    return bool(optimize_memory)


def check_prioritized_options(alpha: Any, beta: Any, initial_TD: Any,
                              td_name: str = "initial_TD") -> tuple[float, float, float]:
    """``(alpha, beta, initial_TD)`` as floats, or a ValueError that says what each one means
    (``td_name``: what the caller calls ``initial_TD``).

    Example:
        >>> check_prioritized_options(0.6, 0.4, 1.0)
        (0.6, 0.4, 1.0)
    """
    def number(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must be a number, got {value!r}")
        return float(value)

    alpha, beta, initial_TD = number("alpha", alpha), number("beta", beta), number(td_name, initial_TD)
    if not (math.isfinite(alpha) and alpha >= 0.0):
        raise ValueError(f"alpha must be a finite number >= 0 (the prioritization exponent: 0 samples "
                         f"uniformly, 1 fully proportionally to |TD|), got {alpha}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must lie in [0, 1] (the importance-sampling exponent, annealed to 1), got {beta}")
    if not (math.isfinite(initial_TD) and initial_TD > 0.0):
        raise ValueError(f"{td_name} must be a positive finite number (the priority of new transitions), "
                         f"got {initial_TD}")
    return alpha, beta, initial_TD


def check_num_steps(num_steps: Any) -> int:
    if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer (n of the n-step return), got {num_steps!r}")
    return int(num_steps)


def is_goal_space(space: gym.Space) -> bool:
    """True for a Dict space with the goal-env keys ``observation``/``achieved_goal``/``desired_goal``."""
    return isinstance(space, gym.spaces.Dict) and all(k in space.spaces for k in GOAL_KEYS)


def network_space(observation_space: gym.Space) -> gym.Space:
    """The space a network consumes: flat ``[observation, desired_goal]`` for goal envs, else unchanged."""
    if isinstance(observation_space, gym.spaces.Dict) and is_goal_space(observation_space):
        return goal_observation_space(observation_space)
    if isinstance(observation_space, gym.spaces.Dict):
        raise ValueError(f"Dict observations are supported for goal envs only (keys {list(GOAL_KEYS)}); "
                         f"got keys {list(observation_space.spaces)}: flatten them with a wrapper")
    return observation_space


def _her_options(her: Any) -> dict[str, Any] | None:
    if her is None or her is False:
        return None
    if her is True:
        return {}
    if not isinstance(her, Mapping):
        raise ValueError(f"her must be None, True or a dict like dict(strategy='future', k=4), got {her!r}")
    unknown = sorted(set(her) - set(_HER_KEYS))
    if unknown:
        raise ValueError(f"unknown her options {unknown}; use {list(_HER_KEYS)}")
    return dict(her)


class ReplayFeed:
    """The buffer an off-policy agent trains from, plus what sits in front of it.

    Exactly one buffer is built: ``replay`` if given, else a :class:`HERReplayBuffer` when
    ``her`` is set, else a :class:`PrioritizedReplayBuffer` when ``PR`` is true, else a
    uniform :class:`ReplayBuffer`. With ``num_steps > 1`` an :class:`NStepAccumulator`
    (gamma = the agent's) turns incoming one-step transitions into n-step ones carrying
    ``discount = gamma**k``. For goal envs without HER, dict observations are flattened to
    ``[observation, desired_goal]`` before storage; with HER they are stored as dicts and
    flattened (after relabelling) at sample time. ``augment(transitions)`` returns more transitions
    (one batch or a list of batches, e.g. the mirror images of board positions) that are stored
    next to every batch that reaches the buffer (after n-step accumulation). Conflicting options
    raise ValueError.

    ``optimize_memory=True`` stores each observation once
    (:class:`~marl_note.replay.compact.CompactReplayBuffer` storage, for the uniform and the
    prioritized buffer, with or without n-step): half the observation memory, and ``buffer_size``
    then counts stored observations (a full buffer holds about ``buffer_size * L / (L + 1)``
    transitions for episodes of ``L`` steps). The default ``"auto"`` does so where observations are
    large (:data:`COMPACT_MIN_OBS_BYTES` or more each: images), where the memory matters; small
    vector observations keep the plain layout. It does not apply to HER (whole episodes, its own layout), to
    a buffer passed as ``replay=``, or with ``augment`` (augmented rows are not a stream's next
    steps), which keep ``obs`` and ``next_obs`` per row.

    Example:
        >>> from marl_note.envs.goal_envs import BitFlippingEnv
        >>> env = BitFlippingEnv(n_bits=3)
        >>> feed = ReplayFeed(env.observation_space, env.action_space, buffer_size=100, gamma=0.9,
        ...                   her=dict(strategy="future", k=4), compute_reward=env.compute_reward, seed=0)
        >>> type(feed.replay).__name__, feed.network_space.shape
        ('HERReplayBuffer', (6,))
        >>> obs, _ = env.reset(seed=0)
        >>> feed.observation({k: v[None] for k, v in obs.items()}).shape
        (1, 6)
        >>> ReplayFeed(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), buffer_size=10, gamma=0.9,
        ...            PR=True, num_steps=3).replay.__class__.__name__
        'PrioritizedReplayBuffer'
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, buffer_size: int, gamma: float,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 num_steps: int = 1, her: Any = None, compute_reward=None, replay=None, seed: int | None = None,
                 augment: Callable[[Transitions], Any] | None = None, optimize_memory: bool | str = "auto"):
        if augment is not None and not callable(augment):
            raise TypeError(f"augment must be a function transitions -> transitions (or a list of them), "
                            f"got {type(augment).__name__}")
        self.augment = augment
        self.alpha, self.beta, self.initial_TD = check_prioritized_options(alpha, beta, initial_TD)
        self.num_steps = check_num_steps(num_steps)
        self.observation_space = observation_space
        self.goal = is_goal_space(observation_space)
        self.network_space = network_space(observation_space)
        her_opts = _her_options(her)
        if replay is not None:
            if PR or her_opts is not None:
                raise ValueError("pass either replay=<buffer> or the options that build one (PR=True, her=...), "
                                 "not both")
            if not callable(getattr(replay, "add", None)) or not callable(getattr(replay, "sample", None)):
                raise TypeError(f"replay must have add(transitions) and sample(batch_size), "
                                f"got {type(replay).__name__}")
            self.her = isinstance(replay, _her_buffer())
        else:
            self.her = her_opts is not None
        if self.her:
            if not self.goal:
                raise ValueError(f"HER needs a goal env: a Dict observation space with keys {list(GOAL_KEYS)}, "
                                 f"got {observation_space!r}")
            if PR:
                raise ValueError("prioritized replay (PR=True) cannot be combined with HER")
            if augment is not None:
                raise ValueError("augment cannot be combined with HER: HER stores whole episodes and relabels "
                                 "them at sample time")
            if self.num_steps > 1:
                raise ValueError("n-step returns (num_steps > 1) cannot be combined with HER: relabelled goals "
                                 "would change the rewards inside the n-step window")
        compact = use_compact(optimize_memory, self.network_space) and augment is None and int(buffer_size) >= 2
        if replay is None:
            if self.her:
                if compute_reward is None:
                    raise ValueError("HER needs a reward function: pass compute_reward=env.unwrapped.compute_reward "
                                     "(or a function compute_reward(achieved_goal, desired_goal, info))")
                check_goal_space(observation_space)
                replay = _her_buffer()(buffer_size, observation_space, action_space, compute_reward,
                                         seed=seed, **(her_opts or {}))
            elif PR:
                replay = PrioritizedReplayBuffer(buffer_size, self.network_space, action_space, alpha=self.alpha,
                                                 beta=self.beta, initial_TD=self.initial_TD, seed=seed,
                                                 optimize_memory=compact)
            elif compact:
                replay = CompactReplayBuffer(buffer_size, self.network_space, action_space, seed=seed)
            else:
                replay = ReplayBuffer(buffer_size, self.network_space, action_space, seed=seed)
        self.replay = replay
        self.nstep = NStepAccumulator(self.num_steps, gamma) if self.num_steps > 1 else None

    @property
    def prioritized(self) -> bool:
        return callable(getattr(self.replay, "update_priorities", None))

    def __len__(self) -> int:
        return len(self.replay)

    # -- observations ----------------------------------------------------------------------------
    def observation(self, obs: Any, name: str = "obs") -> Any:
        """What the network consumes for a batch of observations (goal dicts are flattened)."""
        if not self.goal:
            return obs
        if not isinstance(obs, Mapping):
            raise ValueError(f"{name} must be a dict of batched arrays with keys {list(GOAL_KEYS)} for this goal "
                             f"env, got {type(obs).__name__}")
        missing = [k for k in ("observation", "desired_goal") if k not in obs]
        if missing:
            raise ValueError(f"{name} is missing goal keys {missing}")
        o, g = np.asarray(obs["observation"]), np.asarray(obs["desired_goal"])
        if o.ndim < 2 or g.ndim < 2 or len(o) != len(g):
            raise ValueError(f"{name} goal arrays must be batched (leading batch axis) with equal lengths, got "
                             f"observation {o.shape} and desired_goal {g.shape}")
        return goal_observation({"observation": o.reshape(len(o), -1), "desired_goal": g.reshape(len(g), -1)})

    def flat(self, t: Transitions) -> Transitions:
        """``t`` with goal-dict observations flattened (unchanged for other envs)."""
        if not self.goal:
            return t
        return Transitions(obs=self.observation(t.obs, "transitions.obs"), act=t.act, rew=t.rew,
                           next_obs=self.observation(t.next_obs, "transitions.next_obs"), terminated=t.terminated,
                           truncated=t.truncated, mask=t.mask, next_mask=t.next_mask, stream=t.stream,
                           discount=t.discount)

    # -- storing and sampling --------------------------------------------------------------------
    def add(self, t: Transitions, flat: Transitions | None = None) -> None:
        """Store one-step transitions (through the n-step accumulator when ``num_steps > 1``).

        ``flat`` may pass ``self.flat(t)`` when the caller has already computed it.
        """
        if not self.her:
            t = self.flat(t) if flat is None else flat
        if self.nstep is not None:
            t = self.nstep.add(t)
            if len(t) == 0:
                return
        self.replay.add(t)
        if self.augment is not None:
            for extra in self._augmented(t):
                self.replay.add(extra)

    def _augmented(self, t: Transitions) -> list[Transitions]:
        assert self.augment is not None
        out = self.augment(t)
        batches = list(out) if isinstance(out, (list, tuple)) else [out]
        for b in batches:
            if not isinstance(b, Transitions):
                raise TypeError(f"augment must return Transitions (or a list of them), got {type(b).__name__}")
            for name in ("obs", "next_obs"):
                got, want = np.shape(getattr(b, name))[1:], np.shape(getattr(t, name))[1:]
                if got != want:
                    raise ValueError(f"augment returned {name} rows of shape {got}, the stored ones have {want}")
        return batches

    def sample(self, batch_size: int) -> Transitions:
        return self.replay.sample(batch_size)

    def update_priorities(self, batch: Transitions, td_errors: np.ndarray) -> None:
        """Feed ``|td|`` back for a prioritized buffer (a no-op for the others)."""
        if self.prioritized and batch.indices is not None:
            self.replay.update_priorities(batch.indices, np.abs(np.asarray(td_errors, np.float64)))
