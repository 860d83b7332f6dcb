"""Versioned numpy arrays published by one process and read by others through shared memory.

The learner publishes each learning policy's acting state (its numpy weights, exploration state and
counters) on a :class:`WeightBoard`; the actors read it when its version moved. Writes are guarded
by a sequence number (odd while a write is in progress), so a reader never returns a mix of two
versions: it copies, checks the sequence did not move, and retries otherwise.

Example:
    >>> import numpy as np
    >>> board = WeightBoard.create({"w": np.zeros(3, np.float32), "steps": np.asarray(0)})
    >>> try:
    ...     board.publish({"w": np.ones(3, np.float32), "steps": np.asarray(5)}, version=2)
    ...     got = board.read(newer_than=-1)
    ...     again = board.read(newer_than=2)
    ... finally:
    ...     board.unlink()
    >>> got[1], got[0]["w"].tolist(), int(got[0]["steps"]), again
    (2, [1.0, 1.0, 1.0], 5, None)
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from marl_note.replay.shared import SharedBlock, attach_block, close_block

__all__ = ["WeightBoard"]

_SEQ, _VERSION = 0, 1
_HEADER = 8  # int64 slots


class WeightBoard(SharedBlock):
    """A fixed set of named arrays (their shapes and dtypes are set by :meth:`create`) and a version."""

    def __init__(self, shm: shared_memory.SharedMemory, layout: dict[str, tuple[tuple[int, ...], str, int]]):
        self._shm, self.layout = shm, layout
        self._head = np.ndarray((_HEADER,), np.int64, shm.buf, 0)
        self._arrays = {k: np.ndarray(shape, np.dtype(dt), shm.buf, off) for k, (shape, dt, off) in layout.items()}

    @classmethod
    def create(cls, like: Mapping[str, np.ndarray]) -> WeightBoard:
        """A board for arrays shaped like ``like`` (version -1: nothing published yet)."""
        layout, offset = {}, _HEADER * 8
        for name, value in like.items():
            arr = np.asarray(value)
            layout[name] = (tuple(arr.shape), arr.dtype.str, offset)
            offset += -(-max(arr.nbytes, 1) // 64) * 64
        board = cls(shared_memory.SharedMemory(create=True, size=offset), layout)
        board._head[:] = 0
        board._head[_VERSION] = -1
        return board

    @property
    def handle(self) -> tuple[str, dict[str, tuple[tuple[int, ...], str, int]]]:
        return self._shm.name, self.layout

    @classmethod
    def attach(cls, handle: tuple[str, Any]) -> WeightBoard:
        name, layout = handle
        return cls(attach_block(name), layout)

    @property
    def version(self) -> int:
        return int(self._head[_VERSION])

    def publish(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        """Write every array (same names, shapes and dtypes as at :meth:`create`) as ``version``."""
        if set(arrays) != set(self._arrays):
            raise ValueError(f"published arrays {sorted(arrays)} differ from the board's {sorted(self._arrays)}")
        for name, value in arrays.items():
            if np.shape(value) != self._arrays[name].shape:
                raise ValueError(f"published {name!r} has shape {np.shape(value)}, the board holds "
                                 f"{self._arrays[name].shape}")
        self._head[_SEQ] += 1  # odd: a write is in progress
        for name, value in arrays.items():
            self._arrays[name][...] = value
        self._head[_VERSION] = int(version)
        self._head[_SEQ] += 1

    def read(self, newer_than: int, timeout: float = 5.0) -> tuple[dict[str, np.ndarray], int] | None:
        """``(copies of the arrays, version)`` if the version is not ``newer_than``, else None."""
        deadline = time.monotonic() + timeout
        while True:
            seq = int(self._head[_SEQ])
            version = int(self._head[_VERSION])
            if version == newer_than or version < 0:
                return None
            if seq % 2 == 0:
                out = {k: v.copy() for k, v in self._arrays.items()}
                if int(self._head[_SEQ]) == seq:
                    return out, version
            if time.monotonic() > deadline:
                raise TimeoutError(f"the weight board stayed mid-write for {timeout} s")
            time.sleep(0.0005)

    def close(self) -> None:
        """Release this process's views and mapping (the block lives on until the creator unlinks it)."""
        self._arrays.clear()
        close_block(self)
