"""TensorFlow's thread pools: the calls behind :mod:`marl_note.agents.threads` (the only module there that
touches TensorFlow).

TensorFlow fixes its intra-op and inter-op pools when its runtime starts (the first op or variable),
so :func:`set_threads` takes effect only before any TF agent is built; afterwards it changes nothing
and :func:`threads` says what the runtime uses.

Example:
    >>> count = threads()  # what this process's runtime uses (or will use); 0: one per core
    >>> count >= 0
    True
"""
from __future__ import annotations

import tensorflow as tf

__all__ = ["set_threads", "threads"]


def threads() -> int:
    """TensorFlow's intra-op threads as configured: 0 is its default, one per usable core."""
    return int(tf.config.threading.get_intra_op_parallelism_threads())


def set_threads(count: int) -> bool:
    """Use ``count`` intra-op and inter-op threads; False (and nothing changed) once the runtime has started."""
    if tf.config.threading.get_intra_op_parallelism_threads() == count \
            and tf.config.threading.get_inter_op_parallelism_threads() == count:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(count)
        tf.config.threading.set_inter_op_parallelism_threads(count)
    except RuntimeError:  # "cannot be modified after initialization"
        return False
    return True
