"""numpy's BLAS (OpenBLAS in numpy's wheels): its thread count, and the one product that warms it up.

numpy multiplies matrices through the BLAS it was built with, which starts one thread per core when
numpy is imported. Like the frameworks' intra-op threads (:mod:`marl_note.agents.threads`), those
threads gain nothing on the products of small networks and lose a great deal when the cores are
busy, and ``OMP_NUM_THREADS`` only counts when it is set before numpy is imported: so the count is
changed in the running process with threadpoolctl (the library scikit-learn uses for the same job).

The warm-up. On the shared VM (numpy 2.4.6, OpenBLAS 0.3.31 with its Haswell kernels, an AMD EPYC),
a one-thread ``float32`` product of 256 x 256 by 256 x 256 took 3.6 ms of CPU for as long as the
process ran, until one larger product had run on one thread: from then on 0.95 ms, torch's speed
(the same kernel, ``sgemm_kernel_HASWELL``, no page faults either way; a 256 x 256 ``float64``
product or a 1024 x 1024 ``float32`` one does it, a 224 x 224 one does not). A product at that
size after the thread count changes (:func:`set_blas_threads` runs it) costs about 3 ms once and
made numpy's SAC step at 256-256 2.5x faster (``bench/bench_numpy_step.py``, ``docs/benchmarks.md``).

Example:
    >>> restore = set_blas_threads(1)
    >>> blas_threads() in (1, None)  # None: numpy was built without a BLAS threadpoolctl knows
    True
    >>> restore()  # back to what it was
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["blas_threads", "set_blas_threads", "warm_blas"]

_WARM_SIZE = 256  # the smallest float64 product measured to warm it (224 did not)


def warm_blas() -> None:
    """Run one 256 x 256 ``float64`` matrix product on the calling thread (see the module docstring)."""
    square = np.ones((_WARM_SIZE, _WARM_SIZE))
    square @ square


def _controller() -> Any:
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    return ThreadpoolController().select(user_api="blas")


def blas_threads() -> int | None:
    """The threads numpy's BLAS uses now (the largest count where there are several BLAS libraries);
    None where threadpoolctl finds none."""
    pools = _controller().info()
    return max((int(pool["num_threads"]) for pool in pools), default=None)


def set_blas_threads(count: int) -> Callable[[], None]:
    """Use ``count`` BLAS threads in this process and warm the BLAS up at that count; returns the
    function that restores the previous count."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"BLAS threads must be a positive integer, got {count!r}")
    controller = _controller()
    if not controller.lib_controllers:
        return lambda: None
    if all(lib.num_threads == count for lib in controller.lib_controllers):
        warm_blas()
        return lambda: None
    limits = controller.limit(limits=count)
    warm_blas()
    return limits.restore_original_limits
