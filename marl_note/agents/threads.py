"""The learner's share of the cores when actor processes run beside it on the same machine.

PyTorch starts with one intra-op thread per core. In a pool run (``DecentralizedTrainer(actors=N)``)
the actors take cores too, and a learner whose parallel regions wait on a thread that an actor has
descheduled runs its gradient steps much slower: measured here (2 cores, 2 actors, a 64-64 DQN on
CartPole) 1.7 ms per gradient step against 1.1 ms with one thread. :func:`limit_framework_threads`
caps the threads of a framework that is already imported (it never imports one, so the trainer
may call it) and returns the function that restores them.

TensorFlow fixes its thread pools when its runtime starts, before any agent exists, so its
threads cannot be capped here; set ``tf.config.threading.set_intra_op_parallelism_threads`` before
building a TF agent for a pool run.

Example:
    >>> restore = limit_framework_threads(1)
    >>> restore()  # back to what it was (a no-op when no framework was capped)
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["usable_cores", "limit_framework_threads"]


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform reports it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def limit_framework_threads(threads: int) -> Callable[[], None]:
    """Cap PyTorch's intra-op threads at ``threads`` if PyTorch is imported and uses more; returns
    the function that sets them back (call it once the actors have stopped)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):
        return lambda: None
    before = int(torch.get_num_threads())
    if before <= threads:
        return lambda: None
    torch.set_num_threads(threads)
    return lambda: torch.set_num_threads(before)
