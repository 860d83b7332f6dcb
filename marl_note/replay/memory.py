"""How much memory a replay buffer's storage takes, checked against the machine before allocating.

Replay storage is preallocated at full size (``capacity`` rows of every column), so a large
``buffer_size`` on image observations can ask for tens of gigabytes. :func:`check_fits` runs when
a storage is created: it raises :class:`ReplayMemoryError` when the estimate exceeds the memory
available on the machine, and warns (once per buffer) above :data:`WARN_FRACTION` of it.
:func:`available_bytes` reads ``MemAvailable`` from ``/proc/meminfo`` (Linux); where that is
unknown the check is skipped. Tests replace ``available_bytes`` on this module to patch it.

:func:`check_memory` is the same check for anything else estimated before it is built (network
weights, AlphaZero's position buffer, the actor pool's shards, a vector of envs): it raises
:class:`InsufficientMemoryError`, of which :class:`ReplayMemoryError` is the replay buffers' kind.

Example:
    >>> import numpy as np
    >>> storage_nbytes(1000, {"obs": ((120, 457, 3), np.dtype(np.uint8)), "rew": ((), np.dtype(np.float32))})
    164524000
    >>> format_bytes(32_905_400_000)
    '32.9 GB'
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

Shape = tuple[int, ...]

WARN_FRACTION = 0.5  # warn when a buffer needs more than this share of the available memory
_MEMINFO = "/proc/meminfo"


class InsufficientMemoryError(MemoryError, ValueError):
    """Something whose estimated size exceeds the machine's available memory (raised before allocating it).

    A :class:`MemoryError` and a :class:`ValueError` (bad input: a size or count is too large).

    Example:
        >>> issubclass(InsufficientMemoryError, MemoryError) and issubclass(InsufficientMemoryError, ValueError)
        True
    """


class ReplayMemoryError(InsufficientMemoryError):
    """A replay buffer whose storage would not fit in the machine's available memory (raised before allocating).

    A :class:`MemoryError` and a :class:`ValueError` (bad input: the capacity is too large).

    Example:
        >>> issubclass(ReplayMemoryError, MemoryError) and issubclass(ReplayMemoryError, ValueError)
        True
    """


def available_bytes() -> int | None:
    """Memory available for new allocations in bytes (``MemAvailable``), or None where unknown."""
    try:
        with open(_MEMINFO, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    value, unit = line.split()[1:3]
                    return int(value) * (1024 if unit.lower() == "kb" else 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def item_nbytes(specs: Mapping[str, tuple[Shape, np.dtype]]) -> int:
    """Bytes one row takes across the columns ``specs`` (name -> item shape, dtype)."""
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in specs.values())


def storage_nbytes(capacity: int, specs: Mapping[str, tuple[Shape, np.dtype]], extra_bytes: int = 0) -> int:
    """Bytes of ``capacity`` rows of the columns ``specs``, plus ``extra_bytes`` kept beside them."""
    return int(capacity) * item_nbytes(specs) + int(extra_bytes)


def format_bytes(n: float) -> str:
    """``n`` bytes in decimal units with three significant digits (``'32.9 GB'``)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def check_memory(nbytes: int, what: str, advice: str, warn: bool = True,
                 error: type[InsufficientMemoryError] = InsufficientMemoryError, available: int | None = None,
                 where: str = "of memory is available on this machine", stacklevel: int = 4) -> None:
    """Raise ``error`` if ``nbytes`` (what ``what`` needs) exceed the available memory; the message ends in ``advice``.

    ``available`` (default: :func:`available_bytes`) is the room to compare with, ``where`` says
    what it is. Warns (a ``UserWarning``) when it fits but takes more than :data:`WARN_FRACTION`
    of it and ``warn`` is true. Does nothing where the available memory is unknown.

    Example:
        >>> check_memory(10**12, "a table of 10**12 bytes", "make it smaller", available=8 * 10**9)
        Traceback (most recent call last):
        ...
        marl_note.replay.memory.InsufficientMemoryError: a table of 10**12 bytes needs 1 TB, but only 8 GB of \
memory is available on this machine; make it smaller
    """
    avail = available_bytes() if available is None else available
    if avail is None or nbytes <= WARN_FRACTION * avail:
        return
    if nbytes > avail:
        raise error(f"{what} needs {format_bytes(nbytes)}, but only {format_bytes(avail)} {where}; {advice}")
    if warn:
        warnings.warn(f"{what} needs {format_bytes(nbytes)}, more than {WARN_FRACTION:.0%} of the "
                      f"{format_bytes(avail)} available on this machine; {advice}", stacklevel=stacklevel)


def check_fits(nbytes: int, capacity: int, warn: bool = True, option: str = "replay buffer_size",
               capacity_means: str = "the buffer's capacity", item: str = "transition") -> None:
    """Raise :class:`ReplayMemoryError` if a storage of ``nbytes`` for ``capacity`` rows cannot fit in memory.

    Warns (a ``UserWarning``) when it fits but takes more than
    :data:`WARN_FRACTION` of the available memory and ``warn`` is true. Does nothing where the
    available memory is unknown. ``option``, ``capacity_means`` and ``item`` name the capacity in
    the message (AlphaZero's position buffer: ``"AlphaZero buffer_size"``, ``"positions kept"``,
    ``"position"``).
    """
    avail = available_bytes()
    if avail is None or nbytes <= WARN_FRACTION * avail:
        return
    per_item = nbytes / max(1, capacity)
    what = (f"{option}={capacity} ({capacity_means}) needs {format_bytes(nbytes)} "
            f"({format_bytes(per_item)} per {item})")
    fits = int(avail // per_item)
    if nbytes > avail:
        raise ReplayMemoryError(f"{what}, but only {format_bytes(avail)} of memory is available on this machine; "
                                f"lower {option.split()[-1]} (at most about {fits} {item}s fit) or store smaller "
                                f"observations")
    if warn:
        warnings.warn(f"{what}, more than {WARN_FRACTION:.0%} of the {format_bytes(avail)} available on this "
                      f"machine; consider a smaller {option.split()[-1]}", stacklevel=4)
