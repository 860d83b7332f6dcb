"""Multi-worker ``tf.distribute`` rank contexts for the trainer.

See :mod:`~marl_note.contrib.distributed.tf.multiworker`.
"""
from marl_note.contrib.distributed.tf.multiworker import init_distributed

__all__ = ["init_distributed"]
