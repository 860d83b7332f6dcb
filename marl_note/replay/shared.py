"""A ring of transitions in shared memory: one writer process appends, one reader drains.

:class:`SharedRing` is the per-actor replay shard of the pool trainer
(:mod:`marl_note.contrib.pool`). Rows live in one ``multiprocessing.shared_memory`` block: a
header of absolute counters, then one preallocated column per field. Absolute positions only grow;
row ``p`` sits at slot ``p % capacity``.

- ``done``: rows ``< done`` are fully written (the writer bumps it after copying a batch);
- ``read``: rows ``< read`` have been drained by the reader;
- ``start``: rows ``< start`` were evicted (the writer moves it *before* it overwrites them).

The rows a reader may take are ``[max(read, start), done)``; after copying them it reads ``start``
again and drops any row that was evicted meanwhile, so every row it returns is consistent (never
half old, half new). When a batch does not fit next to the undrained rows, the writer either evicts
the oldest ones (``evict``: a count, or a callable ``undrained -> count``, the original library's
``window_size``) or waits for the reader, up to ``timeout`` seconds. The creator owns the block
and unlinks it (:meth:`unlink`); other processes :meth:`attach` by :attr:`handle`.

Example:
    >>> import numpy as np
    >>> ring = SharedRing.create({"x": ((2,), np.float32), "r": ((), np.float32)}, capacity=4)
    >>> try:
    ...     _ = ring.write({"x": np.ones((3, 2), np.float32), "r": np.arange(3, dtype=np.float32)})
    ...     _ = ring.write({"x": np.zeros((3, 2), np.float32), "r": np.arange(3, dtype=np.float32)}, evict=2)
    ...     n, evicted = len(ring), ring.evicted
    ...     rows = ring.drain()
    ... finally:
    ...     ring.unlink()
    >>> n, evicted, rows["r"].tolist()
    (4, 2, [2.0, 0.0, 1.0, 2.0])
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np


def attach_block(name: str) -> shared_memory.SharedMemory:
    """Map an existing block without registering it with the resource tracker: its creator owns
    (and unlinks) it, and a second registration would be reported as a leak at exit."""
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register


__all__ = ["SharedRing", "RingFullError", "SharedBlock", "attach_block", "close_block"]

_START, _DONE, _READ, _EVICTED, _WRITTEN = range(5)
_HEADER = 8  # int64 slots, the rest reserved
_ALIGN = 64


def close_block(owner: Any) -> None:
    """Drop ``owner``'s header view and close its ``_shm`` mapping (views still held elsewhere keep it)."""
    owner._head = np.zeros_like(owner._head)  # no view into the block survives
    try:
        owner._shm.close()
    except BufferError:
        pass


class SharedBlock:
    """The lifetime of one shared-memory block held in ``self._shm``: ``close`` (this process) and
    ``unlink`` (the owner, idempotent). Subclasses drop their own array views in ``close``."""

    _shm: shared_memory.SharedMemory

    def close(self) -> None:
        close_block(self)

    def unlink(self) -> None:
        """Close and free the block (the owner; idempotent)."""
        self.close()
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


class RingFullError(RuntimeError):
    """The ring stayed full of undrained rows for longer than the writer's ``timeout``."""


Specs = Mapping[str, tuple[tuple[int, ...], Any]]


def _layout(specs: Specs, capacity: int) -> tuple[dict[str, tuple[tuple[int, ...], np.dtype, int]], int]:
    offset, out = _HEADER * 8, {}
    for name, (shape, dtype) in specs.items():
        dt = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        out[name] = (shape, dt, offset)
        nbytes = capacity * int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return out, max(offset, _ALIGN)


class SharedRing(SharedBlock):
    """Fixed columns of ``capacity`` rows in one shared block with write/read/evict counters.

    Build it with :meth:`create` (the owner, which must :meth:`unlink`) or :meth:`attach` (another
    process, which :meth:`close` s). ``write`` is for the one writer, ``drain`` for the one reader;
    several writers must hold a common lock around ``write``.
    """

    def __init__(self, shm: shared_memory.SharedMemory, specs: Specs, capacity: int, owner: bool):
        self._shm, self.capacity, self.owner = shm, int(capacity), owner
        self.specs = {k: (tuple(int(s) for s in v[0]), np.dtype(v[1]).str) for k, v in specs.items()}
        layout, _ = _layout(self.specs, self.capacity)
        buf = shm.buf
        self._head = np.ndarray((_HEADER,), np.int64, buf, 0)
        self._cols = {name: np.ndarray((self.capacity, *shape), dt, buf, off)
                      for name, (shape, dt, off) in layout.items()}

    @classmethod
    def create(cls, specs: Specs, capacity: int) -> SharedRing:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer (rows per shard), got {capacity!r}")
        if not specs:
            raise ValueError("a SharedRing needs at least one column")
        _, size = _layout(specs, int(capacity))
        shm = shared_memory.SharedMemory(create=True, size=size)
        ring = cls(shm, specs, int(capacity), owner=True)
        ring._head[:] = 0
        return ring

    @property
    def handle(self) -> tuple[str, dict[str, tuple[tuple[int, ...], str]], int]:
        """What another process needs to :meth:`attach`: ``(name, specs, capacity)`` (picklable)."""
        return self._shm.name, self.specs, self.capacity

    @classmethod
    def attach(cls, handle: tuple[str, Any, int]) -> SharedRing:
        name, specs, capacity = handle
        return cls(attach_block(name), specs, capacity, owner=False)

    # -- counters ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Rows written and neither drained nor evicted."""
        h = self._head
        return int(h[_DONE] - max(h[_READ], h[_START]))

    @property
    def written(self) -> int:
        """Rows ever written."""
        return int(self._head[_WRITTEN])

    @property
    def evicted(self) -> int:
        """Undrained rows ever evicted (by ``evict`` or :meth:`evict_oldest`)."""
        return int(self._head[_EVICTED])

    # -- writer ----------------------------------------------------------------------------------------
    def evict_oldest(self, n: int) -> int:
        """Drop the oldest ``n`` undrained rows (fewer if there are fewer); returns how many (writer side)."""
        h = self._head
        first = max(int(h[_READ]), int(h[_START]))
        n = max(0, min(int(n), int(h[_DONE]) - first))
        if n:
            h[_EVICTED] += n
            h[_START] = first + n
        return n

    def write(self, cols: Mapping[str, np.ndarray], evict: int | Callable[[int], int] | None = None,
              timeout: float | None = 60.0, alive: Callable[[], bool] | None = None) -> int:
        """Append the rows of ``cols`` (every column, equal lengths); returns the row count.

        Without room next to the undrained rows: ``evict`` (an int, or a callable of the number of
        undrained rows) evicts that many oldest rows (at least as many as the batch needs), else the
        writer waits for the reader, up to ``timeout`` seconds (RingFullError), polling ``alive()``
        (False: stop waiting and return 0).
        """
        missing = sorted(set(self._cols) - set(cols))
        if missing:
            raise ValueError(f"write is missing columns {missing}")
        n = len(next(iter(cols.values())))
        if n > self.capacity:
            raise ValueError(f"a batch of {n} rows does not fit a ring of capacity {self.capacity}: "
                             f"raise the shard capacity")
        if n == 0:
            return 0
        h = self._head
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self) + n > self.capacity:
            if evict is not None:
                want = evict(len(self)) if callable(evict) else evict
                self.evict_oldest(max(int(want), len(self) + n - self.capacity))
                break
            if alive is not None and not alive():
                return 0
            if deadline is not None and time.monotonic() > deadline:
                raise RingFullError(f"the shard stayed full ({self.capacity} undrained rows) for {timeout} s: "
                                    f"the reader is not draining it")
            time.sleep(0.005)
        done = int(h[_DONE])
        # rows at the slots about to be overwritten are evicted (start moves first, then the data)
        if done + n - self.capacity > int(h[_START]):
            h[_START] = done + n - self.capacity
        slots = (done + np.arange(n)) % self.capacity
        for name, col in self._cols.items():
            col[slots] = cols[name]
        h[_WRITTEN] += n
        h[_DONE] = done + n
        return n

    # -- reader ----------------------------------------------------------------------------------------
    def drain(self) -> dict[str, np.ndarray]:
        """Copies of every consistent undrained row, oldest first (columns of equal length)."""
        h = self._head
        done = int(h[_DONE])
        first = max(int(h[_READ]), int(h[_START]))
        slots = (first + np.arange(max(0, done - first))) % self.capacity
        out = {name: col[slots] for name, col in self._cols.items()}
        h[_READ] = done
        lost = int(h[_START]) - first  # evicted (and maybe overwritten) while we copied
        if lost > 0:
            out = {name: col[lost:] for name, col in out.items()}
        return out

    # -- lifetime --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release this process's views and mapping (the block lives on until unlinked)."""
        self._cols.clear()
        close_block(self)
