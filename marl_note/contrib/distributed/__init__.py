"""Multi-process training: :func:`launch` (local ranks, ``torchrun``'s twin) and the backends' rank contexts.

The trainer knows only ranks (:class:`~marl_note.distributed.DistributedContext`, core); the
contexts that make gradient steps synchronous are built by
:func:`marl_note.contrib.distributed.torch.init_distributed` (``torch.distributed``, DDP, gloo on the
CPU) and :func:`marl_note.contrib.distributed.tf.init_distributed` (``tf.distribute``).
"""
from marl_note.contrib.distributed.ranks import RankFailedError, free_port, launch
from marl_note.distributed import DistributedContext

__all__ = ["DistributedContext", "RankFailedError", "free_port", "launch"]
