"""Hindsight experience replay: goal-dict storage plus a sample-time goal relabeler.

Goal envs observe ``{"observation", "achieved_goal", "desired_goal"}``. The
:class:`HERReplayBuffer` stores those parts separately, one whole episode at a time
(contiguous in the ring), and at sample time :class:`HindsightRelabeler` swaps the
desired goal of some sampled transitions for a goal achieved elsewhere in the same
episode and recomputes their reward with an injected reward function. Agents get plain
:class:`~marl_note.types.Transitions` whose ``obs`` is ``[observation, desired_goal]``
(see :func:`goal_observation`), so they never see dicts. Storage is never modified by
sampling.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from marl_note.types import Transitions

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
STRATEGIES = ("future", "final", "episode")
RewardFn = Callable[[np.ndarray, np.ndarray, dict], np.ndarray]


def check_goal_space(space: gym.Space) -> gym.spaces.Dict:
    """The Dict space itself, or a ValueError saying which goal keys are missing."""
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(f"HER needs a Dict observation space with keys {list(GOAL_KEYS)}, got {space!r}")
    missing = [k for k in GOAL_KEYS if k not in space.spaces]
    if missing:
        raise ValueError(f"goal observation space is missing keys {missing} (has {list(space.spaces)})")
    if space["achieved_goal"].shape != space["desired_goal"].shape:
        raise ValueError(f"achieved_goal {space['achieved_goal'].shape} and desired_goal "
                         f"{space['desired_goal'].shape} must have the same shape")
    return space


def goal_observation_space(space: gym.spaces.Dict) -> gym.spaces.Box:
    """The flat float32 Box of ``[observation, desired_goal]`` that agents consume."""
    space = check_goal_space(space)
    lows, highs = [], []
    for key in ("observation", "desired_goal"):
        sub = space[key]
        if isinstance(sub, gym.spaces.Box):
            lo, hi = sub.low.reshape(-1), sub.high.reshape(-1)
        elif isinstance(sub, gym.spaces.MultiBinary):
            lo, hi = np.zeros(int(np.prod(sub.shape))), np.ones(int(np.prod(sub.shape)))
        else:
            raise ValueError(f"{key} must be a Box or MultiBinary space to flatten, got {sub!r}")
        lows.append(lo)
        highs.append(hi)
    return gym.spaces.Box(np.concatenate(lows).astype(np.float32), np.concatenate(highs).astype(np.float32),
                          dtype=np.float32)


def goal_observation(obs: Mapping[str, np.ndarray], goal: np.ndarray | None = None) -> np.ndarray:
    """``[observation, goal]`` flattened per item, as float32 (``goal`` defaults to ``desired_goal``).

    Works for one observation or a batch (leading axis), so agents can use it when acting.

    Example:
        >>> goal_observation({"observation": np.array([1, 0]), "achieved_goal": np.array([1]),
        ...                   "desired_goal": np.array([0])}).tolist()
        [1.0, 0.0, 0.0]
    """
    missing = [k for k in ("observation", "desired_goal") if k not in obs] if goal is None else \
        [k for k in ("observation",) if k not in obs]
    if missing:
        raise ValueError(f"goal observation is missing keys {missing}")
    o = np.asarray(obs["observation"], dtype=np.float32)
    g = np.asarray(obs["desired_goal"] if goal is None else goal, dtype=np.float32)
    return np.concatenate([o, g], axis=-1)


class HindsightRelabeler:
    """Chooses substitute goals (which step's achieved goal) and recomputes rewards.

    Each transition is relabelled with probability ``k / (k + 1)`` -- the sample-time
    equivalent of storing ``k`` relabelled copies next to the original. The substitute is
    the goal achieved after step ``t'`` of the same episode, with ``t'`` uniform over
    ``[t, last]`` (``future``), equal to ``last`` (``final``) or uniform over the whole
    stored episode (``episode``).

    Example:
        >>> rel = HindsightRelabeler(lambda a, d, info: -(a != d).any(-1).astype(np.float32), "final", k=1)
        >>> relabel, goal_step = rel.goal_steps(np.array([0, 2]), np.array([0, 0]), np.array([5, 5]),
        ...                                     np.random.default_rng(0))
        >>> goal_step[relabel].tolist() == [4] * int(relabel.sum())
        True
    """

    def __init__(self, compute_reward: RewardFn | None, strategy: str = "future", k: int = 4):
        if compute_reward is None or not callable(compute_reward):
            raise ValueError("HER needs a reward function: pass env.unwrapped.compute_reward or a function "
                             "compute_reward(achieved_goal, desired_goal, info) -> rewards")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown HER strategy {strategy!r}; choose one of {list(STRATEGIES)}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        self.compute_reward = compute_reward
        self.strategy = strategy
        self.k = int(k)

    @property
    def relabel_probability(self) -> float:
        return self.k / (self.k + 1)

    def goal_steps(self, step: np.ndarray, first_step: np.ndarray, length: np.ndarray,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Which items to relabel, and for each the episode step whose achieved goal to use.

        ``first_step`` is the earliest step of the episode still stored, ``length`` the
        episode length; ``step`` the sampled transitions' own steps.
        """
        n = int(step.shape[0])
        relabel = rng.random(n) < self.relabel_probability
        last = length - 1
        if self.strategy == "final":
            goal_step = last.copy()
        else:
            low = step if self.strategy == "future" else first_step
            goal_step = low + np.floor(rng.random(n) * (last - low + 1)).astype(np.int64)
            goal_step = np.minimum(goal_step, last)  # guards the (measure-zero) rounding edge
        return relabel, np.where(relabel, goal_step, step)

    def rewards(self, achieved_goal: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """``compute_reward(achieved_goal, goal, {})`` checked to be one float per item."""
        r = np.asarray(self.compute_reward(achieved_goal, goal, {}), dtype=np.float32)
        if r.shape != (achieved_goal.shape[0],):
            raise ValueError(f"compute_reward returned shape {r.shape} for a batch of {achieved_goal.shape[0]}; "
                             f"it must be vectorized over the leading axis")
        return r


@dataclass
class HERSample:
    """A relabelled batch plus what was substituted (for inspection and tests).

    Example (see :class:`~marl_note.replay.HERReplayBuffer` for filling a buffer):
        >>> from marl_note.types import Transitions
        >>> t = Transitions(np.zeros((1, 2)), np.zeros(1, int), np.zeros(1), np.zeros((1, 2)),
        ...                 np.zeros(1, bool), np.zeros(1, bool))
        >>> s = HERSample(t, goal=np.ones((1, 1)), relabeled=np.array([True]), goal_index=np.array([3]))
        >>> bool(s.relabeled[0]), len(s.transitions)
        (True, 1)
    """

    transitions: Transitions
    goal: np.ndarray  # the desired goal each item was given (original or substitute)
    relabeled: np.ndarray  # bool, which items got a substitute goal
    goal_index: np.ndarray  # storage index whose next_achieved_goal became the goal (-1: original goal)
