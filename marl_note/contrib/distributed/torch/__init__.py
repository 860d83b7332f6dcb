"""``torch.distributed`` rank contexts for the trainer (:mod:`~marl_note.contrib.distributed.torch.ddp`)."""
from marl_note.contrib.distributed.torch.ddp import (
    TorchCollective,
    average_gradients,
    collective,
    distribute,
    init_distributed,
    shutdown,
)

__all__ = ["TorchCollective", "average_gradients", "collective", "distribute", "init_distributed", "shutdown"]
