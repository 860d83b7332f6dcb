"""Preallocated numpy ring arrays, the storage layer every replay buffer composes.

A :class:`RingStorage` knows nothing about transitions or sampling: it holds named
columns of equal length, writes batches at a moving pointer (wrapping around), and
reads rows back by index. Valid rows are always ``0 .. len(storage) - 1``.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import DTypeLike

from marl_note.replay.memory import check_fits, storage_nbytes
from marl_note.rng import rng_from_array, rng_to_array
from marl_note.types import NumpyState

Shape = tuple[int, ...]
Spec = tuple[Shape, np.dtype]  # item shape and dtype of one column


def check_capacity(capacity) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= 0:
        raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
    return int(capacity)


def check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def as_column(name: str, value, shape: Shape, dtype: np.dtype, length: int) -> np.ndarray:
    """``value`` as an array of shape ``(length, *shape)`` in ``dtype``, or a ValueError naming ``name``."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric or boolean, got dtype {arr.dtype}")
    expected = (length, *shape)
    if arr.shape != expected:
        raise ValueError(f"{name} has shape {arr.shape}, expected {expected} "
                         f"(batch of {length}, item shape {shape})")
    if dtype == np.bool_:
        return arr.astype(bool, copy=False)
    return arr.astype(dtype, copy=False)


class RingStorage:
    """Named, preallocated numpy columns written as a ring.

    Before allocating, the storage estimates its size (:attr:`nbytes_estimate`: ``capacity`` rows
    of every column plus ``extra_bytes`` its owner keeps beside it, such as a sum tree) and raises
    :class:`~marl_note.replay.memory.ReplayMemoryError` when that exceeds the machine's available
    memory (a warning above half of it); see :mod:`marl_note.replay.memory`.

    Example:
        >>> s = RingStorage(3, {"x": ((2,), np.float32)})
        >>> s.write({"x": np.arange(8, dtype=np.float32).reshape(4, 2)}).tolist()  # 4 rows into 3 slots
        [1, 2, 0]
        >>> len(s), s.read(np.array([0]))["x"].tolist()
        (3, [[6.0, 7.0]])
    """

    def __init__(self, capacity: int, specs: Mapping[str, Spec], extra_bytes: int = 0):
        self.capacity = check_capacity(capacity)
        self.extra_bytes = int(extra_bytes)
        check_fits(storage_nbytes(self.capacity, specs, self.extra_bytes), self.capacity)
        self._arrays: dict[str, np.ndarray] = {}
        for name, (shape, dtype) in specs.items():
            self.allocate(name, shape, dtype, check=False)
        self._ptr = 0
        self._size = 0

    @property
    def nbytes_estimate(self) -> int:
        """Bytes this storage takes at full size: ``capacity`` rows of every column plus ``extra_bytes``."""
        return storage_nbytes(self.capacity, {n: self.spec(n) for n in self._arrays}, self.extra_bytes)

    def __len__(self) -> int:
        return self._size

    @property
    def ptr(self) -> int:
        """Index the next written row goes to."""
        return self._ptr

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._arrays)

    def has(self, name: str) -> bool:
        return name in self._arrays

    def spec(self, name: str) -> Spec:
        arr = self._arrays[name]
        return arr.shape[1:], arr.dtype

    def allocate(self, name: str, shape: Shape, dtype, check: bool = True) -> None:
        """Add a column. Only allowed while the storage is empty (old rows would have no value).

        With ``check`` the new total size is checked against the available memory first
        (raising :class:`~marl_note.replay.memory.ReplayMemoryError`, without a second warning).
        """
        if name in self._arrays:
            raise ValueError(f"column {name!r} already exists")
        if getattr(self, "_size", 0):
            raise ValueError(f"cannot add column {name!r} to a storage that already holds {self._size} rows")
        if check:
            column = storage_nbytes(self.capacity, {name: (tuple(shape), np.dtype(dtype))})
            check_fits(self.nbytes_estimate + column, self.capacity, warn=False)
        self._arrays[name] = np.zeros((self.capacity, *tuple(shape)), dtype=np.dtype(dtype))

    def positions(self, n: int) -> tuple[np.ndarray, int]:
        """Rows a write of ``n`` items would fill, and how many leading items it would drop."""
        dropped = max(0, n - self.capacity)
        kept = n - dropped
        return (self._ptr + dropped + np.arange(kept)) % self.capacity, dropped

    def write(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Write a batch (already validated and cast) and return the row indices it landed in.

        ``columns`` must have exactly this storage's column names. A batch longer
        than the capacity keeps its last ``capacity`` items.
        """
        if set(columns) != set(self._arrays):
            raise ValueError(f"write needs exactly the columns {sorted(self._arrays)}, got {sorted(columns)}")
        lengths = {len(v) for v in columns.values()}
        if len(lengths) != 1:
            raise ValueError(f"columns have different lengths: { {k: len(v) for k, v in columns.items()} }")
        n = lengths.pop()
        idx, dropped = self.positions(n)
        for name, value in columns.items():
            self._arrays[name][idx] = value[dropped:]
        self._ptr = (self._ptr + n) % self.capacity
        self._size = min(self.capacity, self._size + n)
        return idx

    def read(self, indices: np.ndarray, names=None) -> dict[str, np.ndarray]:
        """Copies of the rows at ``indices`` (``take``: fancy indexing's rows at a third of its cost, never
        views into storage)."""
        indices = np.asarray(indices)
        if indices.dtype == np.bool_:  # a mask of rows, as fancy indexing reads one
            indices = np.flatnonzero(indices)
        names = self._arrays if names is None else names
        return {name: self._arrays[name].take(indices, axis=0) for name in names}

    def column(self, name: str) -> np.ndarray:
        """Read-only view of the valid rows of one column."""
        view = self._arrays[name][: self._size]
        view.flags.writeable = False
        return view

    def clear(self) -> None:
        self._ptr = 0
        self._size = 0

    # -- persistence -------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        """Valid rows of every column plus ``ptr``/``size``/``capacity`` as numpy scalars."""
        state: NumpyState = {name: arr[: self._size].copy() for name, arr in self._arrays.items()}
        state["ptr"] = np.int64(self._ptr)
        state["size"] = np.int64(self._size)
        state["capacity"] = np.int64(self.capacity)
        return state

    def check_state_dict(self, state: Mapping[str, np.ndarray],
                         optional: Mapping[str, tuple[Shape | None, DTypeLike]] | None = None
                         ) -> dict[str, Spec]:
        """Validate ``state`` without touching anything; return the optional columns it brings.

        ``optional`` names columns that may be present (allocated lazily); their item
        shape is taken from the state when it is ``None``.
        """
        optional = optional or {}
        required = set(self._arrays) - set(optional)
        allowed = required | set(optional) | {"ptr", "size", "capacity"}
        keys = set(state)
        missing = (required | {"ptr", "size", "capacity"}) - keys
        if missing:
            raise ValueError(f"state_dict is missing keys {sorted(missing)}")
        unknown = keys - allowed
        if unknown:
            raise ValueError(f"state_dict has unknown keys {sorted(unknown)}")
        capacity, size, ptr = (state_int(state, k) for k in ("capacity", "size", "ptr"))
        if capacity != self.capacity:
            raise ValueError(f"state_dict is for capacity {capacity}, this buffer has capacity {self.capacity}")
        if not 0 <= size <= capacity:
            raise ValueError(f"state_dict size {size} is outside [0, {capacity}]")
        if not 0 <= ptr < capacity or (size < capacity and ptr != size):
            raise ValueError(f"state_dict ptr {ptr} is inconsistent with size {size} and capacity {capacity}")
        brought = {}
        for name in keys - {"ptr", "size", "capacity"}:
            arr = np.asarray(state[name])
            if name in optional:
                shape, dtype = optional[name]
                shape = arr.shape[1:] if shape is None else tuple(shape)
                brought[name] = (shape, np.dtype(dtype))
            else:
                shape, dtype = self.spec(name)
            if arr.shape != (size, *shape):
                raise ValueError(f"state_dict[{name!r}] has shape {arr.shape}, expected {(size, *shape)}")
            if arr.dtype != np.dtype(dtype):
                raise ValueError(f"state_dict[{name!r}] has dtype {arr.dtype}, expected {np.dtype(dtype)}")
        return brought

    def load_state_dict(self, state: Mapping[str, np.ndarray],
                        optional: Mapping[str, tuple[Shape | None, DTypeLike]] | None = None) -> None:
        optional = optional or {}
        brought = self.check_state_dict(state, optional)
        for name in [n for n in self._arrays if n in optional]:
            del self._arrays[name]
        self._size = 0
        for name, (shape, dtype) in brought.items():
            self.allocate(name, shape, dtype)
        size = state_int(state, "size")
        for name in self._arrays:
            self._arrays[name][:size] = np.asarray(state[name])
        self._size = size
        self._ptr = state_int(state, "ptr")


def state_int(state: Mapping[str, np.ndarray], key: str) -> int:
    """``state[key]`` as an int: a ValueError naming the key unless it is one integer (a 0-d integer array)."""
    arr = np.asarray(state[key])
    if arr.shape != () or arr.dtype.kind not in "iu":
        raise ValueError(f"state_dict[{key!r}] must be one integer, got {arr.dtype} {arr.shape}")
    return int(arr)


# -- generator state as a numpy array (no pickle) -------------------------------------------------
# Replay buffers save their generator under ``rng_state`` with the low 64-bit word first, as they
# always have; the codec itself is marl_note.rng's.
_LOW_FIRST = [1, 0, 3, 2, 4, 5]


def rng_state_array(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's full state as six uint64 words (saveable with ``np.savez``), low word first."""
    try:
        return rng_to_array(rng)[_LOW_FIRST]
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def check_rng_state_array(arr) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.shape != (6,) or arr.dtype != np.uint64:
        raise ValueError(f"rng state must be a uint64 array of shape (6,), got {arr.dtype} {arr.shape}")
    return arr


def set_rng_state(rng: np.random.Generator, arr) -> None:
    rng_from_array(rng, check_rng_state_array(arr), low_first=True)
