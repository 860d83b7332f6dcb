"""Fused loops for the numpy backend's elementwise passes, compiled with Numba when it is installed.

A numpy expression reads and writes whole arrays: torch's Adam written in numpy is 13 passes over the
moments and weights, about 126 us a step for a 90,000-weight network on one core, where one loop over
the same arrays takes about 37 us. With Numba installed (``pip install 'marl_note[numba]'``) the numpy
backend runs such passes as one compiled loop each; without it, the numpy expressions run. Both do
the same float operations in the same order, so they give the same bits (``tests/agents/
test_numpy_fused.py`` checks it), and a run's results do not depend on whether Numba is there.

Numba is imported, and each loop compiled for its dtype, at the first call that needs it (compiled
in memory: nothing is read from a cache on disk). ``MARL_NOTE_NUMBA=0`` in the environment turns the
compiled loops off.

Example:
    >>> import numpy as np
    >>> p, g = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    >>> m, v = np.zeros(3, np.float32), np.zeros(3, np.float32)
    >>> if not adam_update(p, g, m, v, betas=(0.9, 0.999), eps=1e-8, lr=0.1, step=1):  # no Numba, or turned off
    ...     from marl_note.agents.numpy.layers import Adam
    ...     Adam([p], lr=0.1).step([g])  # the numpy passes: the same numbers
    >>> [round(float(x), 4) for x in p]
    [0.9, 0.9, 0.9]
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ENV_VAR", "available", "adam_update"]

ENV_VAR = "MARL_NOTE_NUMBA"

_state: dict[str, Any] = {}  # "numba": the module or None (looked for once); "adam": the compiled loop


def _wanted() -> bool:
    value = os.environ.get(ENV_VAR, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{ENV_VAR} must be 0 (numpy expressions) or 1 (compiled loops when Numba is "
                         f"installed), got {value!r}")
    return value == "1"


def _numba() -> Any:
    if "numba" not in _state:
        try:
            import numba
            _state["numba"] = numba
        except ImportError:
            _state["numba"] = None
    return _state["numba"]


def available() -> bool:
    """Whether the compiled loops run: Numba is installed and ``MARL_NOTE_NUMBA`` is not ``0``."""
    return _wanted() and _numba() is not None


def _adam_loop(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, one_minus_b1: Any, b2: Any,
               one_minus_b2: Any, bias2_sqrt: Any, eps: Any, step_size: Any) -> None:
    # torch's Adam, operation for operation as Adam.step_flat's numpy passes (the same roundings)
    for i in range(p.shape[0]):
        gi = g[i]
        mi = m[i] + one_minus_b1 * (gi - m[i])  # m.lerp_(g, 1 - b1)
        vi = v[i] * b2 + one_minus_b2 * (gi * gi)  # v.mul_(b2).addcmul_(g, g, 1 - b2)
        m[i] = mi
        v[i] = vi
        p[i] -= mi / (math.sqrt(vi) / bias2_sqrt + eps) * step_size


def _compiled_adam() -> Callable[..., None]:
    if "adam" not in _state:
        # error_model="numpy": a division by zero gives inf as in numpy, and the loop vectorises;
        # no fastmath: every operation rounds as numpy's does
        _state["adam"] = _numba().njit(_adam_loop, nogil=True, error_model="numpy", boundscheck=False)
    return _state["adam"]


def adam_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, betas: tuple[float, float],
                eps: float, lr: float, step: int) -> bool:
    """torch's Adam update of the flat arrays ``p`` (weights), ``m`` and ``v`` (moments) from the gradient
    ``g`` at step ``step`` (1 at the first), in place, as one compiled loop; returns False, having written
    nothing, when the loop cannot run (no Numba, ``MARL_NOTE_NUMBA=0``, or arrays that are not one dtype,
    1-D, contiguous and of one length): the caller then takes the numpy path."""
    dtype = p.dtype
    if dtype not in (np.float32, np.float64) or not available():
        return False
    n = p.shape[0] if p.ndim == 1 else -1
    for a in (p, g, m, v):
        if a.dtype != dtype or a.ndim != 1 or a.shape[0] != n or not a.flags.c_contiguous:
            return False
    if not (p.flags.writeable and m.flags.writeable and v.flags.writeable):
        return False
    b1, b2 = betas
    c = dtype.type
    _compiled_adam()(p, g, m, v, c(1.0 - b1), c(b2), c(1.0 - b2), c(math.sqrt(1.0 - b2 ** step)), c(eps),
                     c(lr / (1.0 - b1 ** step)))
    return True
