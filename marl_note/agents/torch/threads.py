"""PyTorch's thread pools: the calls behind :mod:`marl_note.agents.threads` (the only module there that touches torch).

Example:
    >>> restore = set_threads(1)
    >>> threads()
    1
    >>> restore()  # back to what it was
"""
from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["set_threads", "threads"]


def threads() -> int:
    """PyTorch's intra-op threads now."""
    return int(torch.get_num_threads())


def set_threads(count: int, interop: bool = False) -> Callable[[], None]:
    """Use ``count`` intra-op threads (and, with ``interop``, as many inter-op threads where PyTorch still
    allows it: only before its first parallel work); returns the function that restores the intra-op count."""
    before = threads()
    if before != count:
        torch.set_num_threads(count)
    if interop:
        try:
            if torch.get_num_interop_threads() != count:
                torch.set_num_interop_threads(count)
        except RuntimeError:  # parallel work has started: the inter-op pool is fixed (and idle for small networks)
            pass
    return (lambda: torch.set_num_threads(before)) if before != count else (lambda: None)
