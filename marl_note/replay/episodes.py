"""Whole episodes in a ring: per-stream queues of unfinished episodes in front of a :class:`RingStorage`.

The buffers that sample within episodes (:class:`~marl_note.replay.HERReplayBuffer`,
:class:`~marl_note.replay.TripletReplayBuffer`) each validate their own columns and sample their
own way; the queues, the whole-episode writes and the state they share live here.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from marl_note.replay.storage import (
    RingStorage,
    Spec,
    as_column,
    check_rng_state_array,
    rng_state_array,
    set_rng_state,
    state_int,
)
from marl_note.types import NumpyState

__all__ = ["EpisodeRing", "EpisodeRingBuffer"]

_INT = np.dtype(np.int64)
_Chunk = dict[str, np.ndarray]


class CheckedState(NamedTuple):
    """A validated :meth:`EpisodeRing.state_dict`, split into its parts (see :meth:`EpisodeRing.load_checked`)."""

    storage: dict[str, np.ndarray]
    rng_state: np.ndarray
    added: int
    stream: np.ndarray
    pending: dict[str, np.ndarray]


class EpisodeRing:
    """A ring of ``capacity`` transitions that receives whole episodes only, and its owner's generator.

    ``add(columns, stream)`` takes validated columns named as in ``specs`` (which must name ``rew``,
    ``terminated`` and ``truncated``) and per-item stream ids (``None``: one stream); a stream's
    items are queued until its episode ends (``terminated`` or ``truncated``) and the episode is
    then written as one contiguous block with per-item bookkeeping columns: ``ep_first`` (global
    index of the episode's first item; item ``g`` lives in slot ``g % capacity``), ``ep_len`` and,
    with ``steps=True``, ``step`` (the item's step within its episode). ``rng`` is the generator the
    owner samples with; it is kept here so that :meth:`state_dict` is the owner's whole state: the
    storage's keys, ``added``, ``rng_state`` and the queues as ``pending_<column>`` and
    ``pending_stream``.

    Example:
        >>> flag = ((), np.dtype(bool))
        >>> ring = EpisodeRing(10, {"rew": ((), np.dtype(np.float32)), "terminated": flag, "truncated": flag})
        >>> ring.add({"rew": np.arange(4, dtype=np.float32), "terminated": np.array([0, 1, 0, 0], bool),
        ...           "truncated": np.zeros(4, bool)}, stream=np.array([0, 0, 1, 0]))
        [(0, 2)]
        >>> len(ring.storage), ring.num_pending, ring.storage.column("ep_len").tolist()
        (2, 2, [2, 2])
    """

    def __init__(self, capacity: int, specs: Mapping[str, Spec], seed: int | None = None, steps: bool = False):
        self.specs = dict(specs)
        book = ("ep_first", "ep_len", "step") if steps else ("ep_first", "ep_len")
        self.storage = RingStorage(capacity, {**self.specs, **{name: ((), _INT) for name in book}})
        self.rng = np.random.default_rng(seed)
        self.added = 0  # items ever written
        self._steps = steps
        self._pending: dict[int, list[_Chunk]] = {}

    @property
    def oldest(self) -> int:
        """Global index of the oldest stored item."""
        return self.added - len(self.storage)

    @property
    def num_pending(self) -> int:
        """Transitions held in episodes that have not ended yet."""
        return sum(len(c["rew"]) for chunks in self._pending.values() for c in chunks)

    # -- writing ---------------------------------------------------------------------------------
    def add(self, columns: Mapping[str, np.ndarray], stream=None) -> list[tuple[int, int]]:
        """Queue ``columns`` per stream, write each episode that ends; its ``(first, length)``, in writing order."""
        n = len(columns["rew"])
        stream = np.zeros(n, np.int64) if stream is None else as_column("stream", stream, (), _INT, n)
        done = columns["terminated"] | columns["truncated"]
        written = []
        for s in np.unique(stream):  # (order between streams does not matter)
            idx = np.flatnonzero(stream == s)
            queue = self._pending.setdefault(int(s), [])
            start = 0
            for end in np.flatnonzero(done[idx]) + 1:
                queue.append({k: v[idx[start:end]] for k, v in columns.items()})
                written.append(self._write_episode(queue))
                queue.clear()
                start = int(end)
            if start < idx.size:
                queue.append({k: v[idx[start:]] for k, v in columns.items()})
        self._pending = {s: q for s, q in self._pending.items() if q}
        return written

    def _write_episode(self, chunks: list[_Chunk]) -> tuple[int, int]:
        episode = {k: np.concatenate([c[k] for c in chunks]) for k in self.specs}
        first, length = self.added, episode["rew"].shape[0]
        episode["ep_first"] = np.full(length, first, np.int64)
        episode["ep_len"] = np.full(length, length, np.int64)
        if self._steps:
            episode["step"] = np.arange(length, dtype=np.int64)
        self.storage.write(episode)
        self.added += length
        return first, length

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        """Stored episodes, in-progress episodes (``pending_*``), counters and generator state; numpy only."""
        state = self.storage.state_dict()
        state["added"] = np.int64(self.added)
        state["rng_state"] = rng_state_array(self.rng)
        chunks = [(s, c) for s, q in self._pending.items() for c in q]
        for name, (shape, dtype) in self.specs.items():
            state["pending_" + name] = (np.concatenate([c[name] for _, c in chunks]) if chunks
                                        else np.zeros((0, *shape), dtype))
        state["pending_stream"] = (np.concatenate([np.full(len(c["rew"]), s, np.int64) for s, c in chunks])
                                   if chunks else np.zeros(0, np.int64))
        return state

    def check_state_dict(self, state: Mapping[str, np.ndarray]) -> CheckedState:
        """``state`` validated and split into its parts; raises ValueError naming the problem, changes nothing."""
        state = dict(state)
        ours = ["added", "rng_state", "pending_stream"] + ["pending_" + n for n in self.specs]
        missing = [k for k in ours if k not in state]
        if missing:
            raise ValueError(f"state_dict is missing keys {missing}")
        extra = {k: state.pop(k) for k in ours}
        rng_state = check_rng_state_array(extra["rng_state"])
        self.storage.check_state_dict(state)
        added, size, ptr = state_int(extra, "added"), state_int(state, "size"), state_int(state, "ptr")
        if added < size or added % self.storage.capacity != ptr:
            raise ValueError(f"state_dict added={added} is inconsistent with size={size}, ptr={ptr}")
        stream = np.asarray(extra["pending_stream"])
        if stream.ndim != 1 or stream.dtype != np.int64:
            raise ValueError(f"state_dict['pending_stream'] must be 1-D int64, got {stream.dtype} {stream.shape}")
        pending = {}
        for name, (shape, dtype) in self.specs.items():
            arr = np.asarray(extra["pending_" + name])
            if arr.shape != (stream.shape[0], *shape) or arr.dtype != dtype:
                raise ValueError(f"state_dict['pending_{name}'] is {arr.dtype} {arr.shape}, "
                                 f"expected {dtype} {(stream.shape[0], *shape)}")
            pending[name] = arr.copy()
        if np.any(pending["terminated"] | pending["truncated"]):
            raise ValueError("state_dict pending transitions must not contain episode ends")
        return CheckedState(state, rng_state, added, stream, pending)

    def load_checked(self, checked: CheckedState) -> None:
        """Restore from the result of :meth:`check_state_dict`."""
        self.storage.load_state_dict(checked.storage)
        self.added = checked.added
        set_rng_state(self.rng, checked.rng_state)
        stream = checked.stream
        self._pending = {int(s): [{k: v[stream == s] for k, v in checked.pending.items()}] for s in np.unique(stream)}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; raises ValueError naming the problem and changes nothing then."""
        self.load_checked(self.check_state_dict(state))


class EpisodeRingBuffer:
    """Base of the buffers kept on an :class:`EpisodeRing` (``self._ring``): size, counts and state are the ring's.

    Subclasses build ``self._ring`` in ``__init__`` and add their own validation and sampling; one
    that checks more on load overrides :meth:`check_state_dict` and :meth:`load_state_dict`.

    Example:
        >>> from marl_note.compat.triplet import TripletReplayBuffer
        >>> issubclass(TripletReplayBuffer, EpisodeRingBuffer)
        True
    """

    _ring: EpisodeRing

    @property
    def capacity(self) -> int:
        return self._ring.storage.capacity

    @property
    def nbytes_estimate(self) -> int:
        """Bytes the ring takes at full size; construction refuses one that exceeds the available memory."""
        return self._ring.storage.nbytes_estimate

    def __len__(self) -> int:
        """Stored transitions (episodes still in progress are not counted)."""
        return len(self._ring.storage)

    @property
    def num_pending(self) -> int:
        """Transitions held in episodes that have not ended yet."""
        return self._ring.num_pending

    def state_dict(self) -> NumpyState:
        """Stored episodes, in-progress episodes (``pending_*``), counters and generator state; numpy only."""
        return self._ring.state_dict()

    def check_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Raise ValueError naming the problem if ``load_state_dict(state)`` would refuse ``state``; changes nothing."""
        self._ring.check_state_dict(state)

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; raises ValueError naming the problem and changes nothing then."""
        self._ring.load_state_dict(state)
