"""Replay: ring storage, uniform and prioritized samplers, n-step accumulation, HER, rollouts and GAE.

Numpy only; nothing here imports torch or tensorflow.
"""
from marl_note.replay.buffer import ReplayBuffer
from marl_note.replay.compact import CompactReplayBuffer
from marl_note.replay.feed import ReplayFeed
from marl_note.replay.her import HERSample, HindsightRelabeler, goal_observation, goal_observation_space
from marl_note.replay.her_buffer import HERReplayBuffer
from marl_note.replay.joint import JointReplayBuffer
from marl_note.replay.memory import InsufficientMemoryError, ReplayMemoryError
from marl_note.replay.nstep import NStepAccumulator
from marl_note.replay.prioritized import PrioritizedReplayBuffer
from marl_note.replay.rollout import RolloutBuffer, compute_gae
from marl_note.replay.storage import RingStorage
from marl_note.replay.sum_tree import SumTree
from marl_note.replay.triplet import TripletReplayBuffer

__all__ = ["ReplayBuffer", "CompactReplayBuffer",
           "PrioritizedReplayBuffer", "SumTree", "NStepAccumulator", "RolloutBuffer", "compute_gae",
           "RingStorage", "HERReplayBuffer", "HindsightRelabeler", "HERSample", "goal_observation",
           "goal_observation_space", "InsufficientMemoryError", "JointReplayBuffer", "ReplayMemoryError", "ReplayFeed",
           "TripletReplayBuffer"]
