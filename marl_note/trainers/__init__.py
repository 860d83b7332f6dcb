"""The trainer, the collector and their helpers (no framework imports)."""
from marl_note.trainers.animate import Animation, animate_agent
from marl_note.trainers.callbacks import EarlyStopping, LambdaCallback
from marl_note.trainers.checkpointing import CheckpointManager
from marl_note.trainers.collector import Collector, CollectStats, check_actions
from marl_note.trainers.distributed import DistributedContext, RankFailedError, launch
from marl_note.trainers.finders import LRFinder, OptFinder
from marl_note.trainers.logging import CSVLogger, TensorBoard
from marl_note.trainers.plot import plot_metric, plot_run, visualize_loss, visualize_reward, visualize_reward_loss
from marl_note.trainers.selfplay import Elo, FrozenAgent, OpponentPool, snapshot
from marl_note.trainers.strength import KeepStrongest, strength, strength_score
from marl_note.trainers.trainer import DecentralizedTrainer
from marl_note.types import NonFiniteError

__all__ = ["CheckpointManager", "Collector", "CollectStats", "check_actions", "DecentralizedTrainer",
           "NonFiniteError", "plot_metric", "plot_run", "visualize_reward", "visualize_loss", "visualize_reward_loss",
           "animate_agent", "Animation", "Elo", "FrozenAgent", "OpponentPool", "snapshot",
           "KeepStrongest", "strength", "strength_score",
           "CSVLogger", "EarlyStopping", "LambdaCallback", "TensorBoard", "LRFinder", "OptFinder",
           "DistributedContext", "RankFailedError", "launch"]
