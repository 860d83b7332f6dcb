"""The trainer, the collector and their helpers (no framework imports)."""
from marl_note._moved import package_getattr
from marl_note.distributed import DistributedContext
from marl_note.trainers.budget import Budget
from marl_note.trainers.callbacks import EarlyStopping, LambdaCallback
from marl_note.trainers.checkpointing import CheckpointManager
from marl_note.trainers.collector import Collector, CollectStats, check_actions
from marl_note.trainers.logging import CSVLogger, TensorBoard
from marl_note.trainers.plot import plot_metric, plot_run
from marl_note.trainers.selfplay import Elo, FrozenAgent, OpponentPool, snapshot
from marl_note.trainers.strength import KeepStrongest, strength, strength_score
from marl_note.trainers.trainer import DecentralizedTrainer
from marl_note.types import NonFiniteError

__all__ = ["Budget", "CheckpointManager", "Collector", "CollectStats", "check_actions", "DecentralizedTrainer",
           "NonFiniteError", "plot_metric", "plot_run", "Elo", "FrozenAgent", "OpponentPool", "snapshot",
           "KeepStrongest", "strength", "strength_score",
           "CSVLogger", "EarlyStopping", "LambdaCallback", "TensorBoard", "DistributedContext"]

__getattr__ = package_getattr(__name__)  # release 0.1.0 names that moved, with a DeprecationWarning
