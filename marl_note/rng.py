"""Random-generator state as a numpy array, so checkpoints hold no pickle (one codec for every layer).

A PCG64 ``numpy.random.Generator`` is saved as six uint64 words: the 128-bit state and increment,
each high word first, then ``has_uint32`` and ``uinteger``. Replay buffers of release 0.1.0 wrote
their generator under the key ``rng_state`` with the low word first; :func:`rng_from_array` reads
that order with ``low_first=True``.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> saved = rng_to_array(rng); x = rng.random()
    >>> rng_from_array(rng, saved); rng.random() == x
    True
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["rng_to_array", "rng_from_array", "check_rng_array"]

_MASK64 = (1 << 64) - 1


def rng_to_array(rng: np.random.Generator) -> np.ndarray:
    """The state of a PCG64 generator as a uint64 array of 6 words."""
    st = rng.bit_generator.state
    if st.get("bit_generator") != "PCG64":
        raise TypeError(f"only PCG64 generators can be saved, got {st.get('bit_generator')}")
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s >> 64, s & _MASK64, inc >> 64, inc & _MASK64, st["has_uint32"], st["uinteger"]],
                    dtype=np.uint64)


def check_rng_array(arr: Any, name: str = "rng state") -> np.ndarray:
    """``arr`` as 6 uint64 words, or a ValueError naming ``name``."""
    a = np.asarray(arr)
    if a.shape != (6,) or a.dtype.kind not in "ui":
        raise ValueError(f"{name} must be 6 unsigned 64-bit words, got {a.dtype} {a.shape}")
    return a.astype(np.uint64)


def rng_from_array(rng: np.random.Generator, arr: Any, low_first: bool = False) -> None:
    """Restore a state saved by :func:`rng_to_array` into ``rng`` in place (``low_first``: 0.1.0 replay order)."""
    w = [int(x) for x in check_rng_array(arr)]
    hi_s, lo_s, hi_i, lo_i = (w[1], w[0], w[3], w[2]) if low_first else (w[0], w[1], w[2], w[3])
    rng.bit_generator.state = {"bit_generator": "PCG64",
                               "state": {"state": (hi_s << 64) | lo_s, "inc": (hi_i << 64) | lo_i},
                               "has_uint32": w[4], "uinteger": w[5]}
