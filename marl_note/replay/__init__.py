"""Replay: ring storage, uniform and prioritized samplers, n-step accumulation, HER, rollouts and GAE.

Numpy only; nothing here imports torch or tensorflow.
"""
from typing import TYPE_CHECKING

from marl_note._moved import lazy_package

if TYPE_CHECKING:
    from marl_note.replay.buffer import ReplayBuffer
    from marl_note.replay.compact import CompactReplayBuffer
    from marl_note.replay.feed import ReplayFeed
    from marl_note.replay.her import HERSample, HindsightRelabeler, goal_observation, goal_observation_space
    from marl_note.replay.her_buffer import HERReplayBuffer
    from marl_note.replay.joint import JointReplayBuffer
    from marl_note.replay.memory import InsufficientMemoryError, ReplayMemoryError
    from marl_note.replay.nstep import NStepAccumulator
    from marl_note.replay.prioritized import PrioritizedReplayBuffer
    from marl_note.replay.reservoir import ReservoirBuffer
    from marl_note.replay.rollout import RolloutBuffer, compute_gae
    from marl_note.replay.storage import RingStorage
    from marl_note.replay.sum_tree import SumTree

__all__ = ["ReplayBuffer", "CompactReplayBuffer",
           "PrioritizedReplayBuffer", "SumTree", "NStepAccumulator", "RolloutBuffer", "compute_gae",
           "RingStorage", "HERReplayBuffer", "HindsightRelabeler", "HERSample", "goal_observation",
           "goal_observation_space", "InsufficientMemoryError", "JointReplayBuffer", "ReplayMemoryError", "ReplayFeed",
           "ReservoirBuffer"]

# each name loads its own module on first use; TripletReplayBuffer moved to marl_note.compat.triplet and warns
__getattr__ = lazy_package(__name__, {
    "ReplayBuffer": "marl_note.replay.buffer",
    "CompactReplayBuffer": "marl_note.replay.compact",
    "ReplayFeed": "marl_note.replay.feed",
    "HERSample": "marl_note.replay.her",
    "HindsightRelabeler": "marl_note.replay.her",
    "goal_observation": "marl_note.replay.her",
    "goal_observation_space": "marl_note.replay.her",
    "HERReplayBuffer": "marl_note.replay.her_buffer",
    "JointReplayBuffer": "marl_note.replay.joint",
    "InsufficientMemoryError": "marl_note.replay.memory",
    "ReplayMemoryError": "marl_note.replay.memory",
    "NStepAccumulator": "marl_note.replay.nstep",
    "PrioritizedReplayBuffer": "marl_note.replay.prioritized",
    "ReservoirBuffer": "marl_note.replay.reservoir",
    "RolloutBuffer": "marl_note.replay.rollout",
    "compute_gae": "marl_note.replay.rollout",
    "RingStorage": "marl_note.replay.storage",
    "SumTree": "marl_note.replay.sum_tree",
})
