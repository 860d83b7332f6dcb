"""The trainer, the collector and their helpers (no framework imports)."""
from marl_note.trainers.checkpointing import CheckpointManager
from marl_note.trainers.collector import Collector, CollectStats, check_actions
from marl_note.trainers.finders import LRFinder, OptFinder
from marl_note.trainers.plot import plot_metric, visualize_reward
from marl_note.trainers.selfplay import Elo, FrozenAgent, OpponentPool, snapshot
from marl_note.trainers.trainer import DecentralizedTrainer
from marl_note.types import NonFiniteError

__all__ = ["CheckpointManager", "Collector", "CollectStats", "check_actions", "DecentralizedTrainer",
           "LRFinder", "NonFiniteError", "OptFinder", "plot_metric", "visualize_reward", "Elo", "FrozenAgent",
           "OpponentPool", "snapshot"]
