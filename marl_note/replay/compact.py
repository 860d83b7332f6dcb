"""Uniform replay that stores each observation once: a transition's next observation is a later slot.

A plain :class:`~marl_note.replay.buffer.ReplayBuffer` keeps ``obs`` and ``next_obs`` per row, so
every observation of a trajectory is stored twice. :class:`CompactReplayBuffer` keeps one ring of
*slots*, each holding one observation frame; a transition lives in the slot of its ``obs`` and
points (column ``next``) at the slot of its ``next_obs``.

How transitions arrive decides how frames are shared. The collector hands over rows of many
(env, seat) streams interleaved, so "the next slot" is not the next observation of the same
stream. Instead each stream keeps a short queue of its pending next-observation slots: when a
transition of that stream arrives whose ``obs`` equals the frame in the oldest matching pending
slot, it is stored in that slot and only its ``next_obs`` takes a new one. This covers one-step
transitions (``obs`` = the previous row's ``next_obs``) and n-step ones (``obs`` = the ``next_obs``
of the row n steps back, which the queue still holds). An episode end (terminated or truncated)
clears the stream's queue: the final observation stays in its own slot, referenced by the
transitions that end there, and the next episode's first observation takes a fresh slot.
Consecutive rows of a stream with equal ``next_obs`` (the shortened n-step windows at an episode
end) share one slot.

Correctness rests on one invariant: a transition's ``next`` slot was written after its own slot.
Slots are overwritten oldest-first, so when a next-frame slot is overwritten every transition
pointing at it is already gone; a pending slot that was overwritten is detected by its write stamp
and simply not reused.

``capacity`` counts slots (stored observations), so a full buffer holds ``capacity`` minus the
episode ends and open stream tails it keeps frames for: about ``capacity * L / (L + 1)``
transitions for episodes of ``L`` steps, at half the observation memory of the plain buffer.
Indices (from :meth:`add`, in ``batch.indices``, for :meth:`get`) are slot numbers in
``[0, capacity)``; a slot holding only a frame is not a transition.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from marl_note.types import Transitions
    >>> buf = CompactReplayBuffer(10, gym.spaces.Box(0, 9, (1,)), gym.spaces.Discrete(2), seed=0)
    >>> o = np.arange(5, dtype=np.float32)[:, None]  # one episode: 0 -> 1 -> 2 -> 3 -> 4 (terminal)
    >>> buf.add(Transitions(obs=o[:4], act=np.zeros(4, int), rew=np.ones(4), next_obs=o[1:],
    ...                     terminated=np.array([0, 0, 0, 1], bool), truncated=np.zeros(4, bool))).tolist()
    [0, 1, 2, 3]
    >>> len(buf), buf.slots_used  # 4 transitions in 5 frames (a plain buffer stores 8)
    (4, 5)
    >>> batch = buf.get(np.array([3]))
    >>> batch.obs.tolist(), batch.next_obs.tolist(), batch.terminated.tolist()
    ([[3.0]], [[4.0]], [True])
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import OPTIONAL_FIELDS, transition_columns, transition_specs
from marl_note.replay.memory import check_fits, storage_nbytes
from marl_note.replay.storage import (
    Spec,
    check_batch_size,
    check_capacity,
    check_rng_state_array,
    rng_state_array,
    set_rng_state,
    state_int,
)
from marl_note.replay.window import SamplingWindow
from marl_note.types import NumpyState, Transitions

__all__ = ["CompactReplayBuffer", "compact_specs", "check_compact_state"]

MAX_PENDING = 64  # pending next-frame slots kept per stream (n-step needs n)


class CompactReplayBuffer(SamplingWindow):
    """Uniform replay storing each observation once (see the module docstring for the layout).

    Same interface as :class:`~marl_note.replay.buffer.ReplayBuffer` (``add``, ``sample``,
    ``get``, ``column``, ``state_dict``), with ``capacity >= 2`` counting stored observations and
    indices that are slot numbers (``set_window(n)`` samples the newest ``n`` slots). :attr:`last_evicted`
    holds the slots whose transitions the last :meth:`add` overwrote (a prioritized sampler zeroes their
    priorities). Memory is checked before allocating, as for the plain buffer.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.replay import ReplayBuffer
        >>> space = gym.spaces.Box(0, 255, (120, 457, 3), np.uint8)  # pistonball frames
        >>> plain = ReplayBuffer.estimate_nbytes(100_000, space, gym.spaces.Discrete(3))
        >>> compact = CompactReplayBuffer.estimate_nbytes(100_000, space, gym.spaces.Discrete(3))
        >>> round(plain / 1e9, 1), round(compact / 1e9, 1)
        (32.9, 16.5)
    """

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 seed: int | None = None, *, extra_bytes: int = 0):
        self.capacity = check_capacity(capacity)
        if self.capacity < 2:
            raise ValueError(f"a compact buffer needs capacity >= 2 (one slot for obs, one for next_obs), "
                             f"got {capacity}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.extra_bytes = int(extra_bytes)
        self._specs = transition_specs(observation_space, action_space)
        specs = compact_specs(observation_space, action_space)
        check_fits(storage_nbytes(self.capacity, specs, self.extra_bytes), self.capacity)
        self._arrays = {name: np.zeros((self.capacity, *shape), dtype) for name, (shape, dtype) in specs.items()}
        self._arrays["next"][:] = -1
        self._rng = np.random.default_rng(seed)
        self._clear_state()

    def _clear_state(self) -> None:
        self._head = 0  # the slot the next frame goes to
        self._filled = 0  # slots written so far (at most capacity)
        self._written = 0  # frames ever written: the next write stamp
        self._size = 0  # transitions stored
        self._pending: dict[int, deque] = {}  # stream -> (slot, stamp) of frames a later obs may match
        self._last: dict[int, tuple[int, int]] = {}  # stream -> (slot, stamp) of its latest next frame
        self._ended: set[int] = set()  # streams whose latest row ended an episode
        self.last_evicted = np.zeros(0, np.int64)

    @staticmethod
    def estimate_nbytes(capacity: int, observation_space: gym.Space, action_space: gym.Space) -> int:
        """Bytes a buffer of ``capacity`` slots would allocate (optional columns not counted); allocates nothing."""
        return storage_nbytes(check_capacity(capacity), compact_specs(observation_space, action_space))

    @property
    def nbytes_estimate(self) -> int:
        """Bytes of every allocated column at full size, plus ``extra_bytes``."""
        specs = {n: (a.shape[1:], a.dtype) for n, a in self._arrays.items()}
        return storage_nbytes(self.capacity, specs, self.extra_bytes)

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    @property
    def slots_used(self) -> int:
        """Slots holding a frame (transitions plus final and pending observations)."""
        return self._filled

    def __len__(self) -> int:
        return self._size

    def _window_ring(self) -> tuple[int, int, int]:
        return self._head, self._filled, self.capacity

    def __repr__(self) -> str:
        return f"CompactReplayBuffer(len={len(self)}, slots_used={self._filled}, capacity={self.capacity})"

    # -- writing ---------------------------------------------------------------------------------
    def validate(self, transitions: Transitions) -> dict[str, np.ndarray]:
        """Check a batch against this buffer and return its columns; raises ValueError, writes nothing."""
        known = {k: (self._arrays[k].shape[1:], self._arrays[k].dtype) for k in OPTIONAL_FIELDS if k in self._arrays}
        cols = transition_columns(transitions, self._specs, self.action_space, known, extra=("stream",))
        present = {k for k in OPTIONAL_FIELDS if k in cols}
        if present != set(known) and self._filled > 0:
            if set(known) - present:
                raise ValueError(f"this buffer stores {sorted(set(known) - present)} but the batch has none")
            raise ValueError(f"the batch carries {sorted(present - set(known))} but this buffer already holds "
                             f"{len(self)} items without them")
        return cols

    def add(self, transitions: Transitions) -> np.ndarray:
        """Store a batch (rows of interleaved streams in time order per stream); return the slots written."""
        cols = self.validate(transitions)
        if self._filled == 0:
            for name in OPTIONAL_FIELDS:
                if name in cols and name not in self._arrays:
                    column = storage_nbytes(self.capacity, {name: (cols[name].shape[1:], cols[name].dtype)})
                    check_fits(self.nbytes_estimate + column, self.capacity, warn=False)
                    self._arrays[name] = np.zeros((self.capacity, *cols[name].shape[1:]), cols[name].dtype)
                elif name in self._arrays and name not in cols:
                    del self._arrays[name]
        n = len(cols["rew"])
        streams = cols.pop("stream", np.zeros(n, np.int64))
        obs, next_obs = cols.pop("obs"), cols.pop("next_obs")
        done = cols["terminated"] | cols["truncated"]
        hosts = np.empty(n, np.int64)
        evicted: list[int] = []
        frames, nxt, stamp = self._arrays["obs"], self._arrays["next"], self._arrays["stamp"]
        for i in range(n):
            s = int(streams[i])
            if s in self._ended and not (done[i] and self._is_last(s, next_obs[i])):
                self._forget(s)  # the stream's episode is over: nothing of it will match again
            host = self._match(s, obs[i])
            if host is None:
                host = self._new_slot(evicted)
                frames[host] = obs[i]
            last = self._last.get(s)
            if last is not None and last[1] > stamp[host] and self._is_last(s, next_obs[i]):
                after = last[0]  # same next frame as the stream's previous row (n-step windows at an end)
            else:
                after = self._new_slot(evicted)
                frames[after] = next_obs[i]
                self._pending.setdefault(s, deque(maxlen=MAX_PENDING)).append((after, self._written - 1))
                self._last[s] = (after, self._written - 1)
            for name, value in cols.items():
                self._arrays[name][host] = value[i]
            nxt[host] = after
            self._size += 1
            hosts[i] = host
            if done[i]:  # later rows of this window flush (n-step) may still share its frames
                self._ended.add(s)
        self.last_evicted = np.asarray(evicted, np.int64)
        return hosts

    def _is_last(self, stream: int, ob: np.ndarray) -> bool:
        """Whether the stream's latest next frame is still stored and equals ``ob``."""
        last = self._last.get(stream)
        return (last is not None and self._arrays["stamp"][last[0]] == last[1]
                and np.array_equal(self._arrays["obs"][last[0]], ob))

    def _forget(self, stream: int) -> None:
        self._pending.pop(stream, None)
        self._last.pop(stream, None)
        self._ended.discard(stream)

    def _match(self, stream: int, ob: np.ndarray) -> int | None:
        """The pending slot of ``stream`` holding ``ob`` (dropping the queue up to it), or None."""
        queue = self._pending.get(stream)
        if not queue:
            return None
        frames, nxt, stamp = self._arrays["obs"], self._arrays["next"], self._arrays["stamp"]
        full = self._filled == self.capacity
        for j, (slot, st) in enumerate(queue):
            if stamp[slot] != st or nxt[slot] >= 0:
                continue  # overwritten since, or already holds a transition
            if full and slot == self._head:
                continue  # the next frame written would overwrite it
            if np.array_equal(frames[slot], ob):
                for _ in range(j + 1):
                    queue.popleft()
                return slot
        return None

    def _new_slot(self, evicted: list[int]) -> int:
        h = self._head
        if self._filled == self.capacity and self._arrays["next"][h] >= 0:
            self._arrays["next"][h] = -1
            self._size -= 1
            evicted.append(h)
        self._arrays["stamp"][h] = self._written
        self._written += 1
        self._head = (h + 1) % self.capacity
        self._filled = min(self.capacity, self._filled + 1)
        return h

    # -- reading ---------------------------------------------------------------------------------
    def stored_indices(self) -> np.ndarray:
        """Slots holding a transition, in slot order."""
        return np.flatnonzero(self._arrays["next"][: self._filled] >= 0)

    def check_indices(self, indices) -> np.ndarray:
        """``indices`` as int64 if each is a slot holding a transition, else a ValueError."""
        indices = np.asarray(indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise ValueError(f"indices must be a 1-D integer array, got {indices.dtype} {indices.shape}")
        indices = indices.astype(np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise ValueError(f"indices must lie in [0, {self.capacity}) (slots), got range "
                             f"[{indices.min()}, {indices.max()}]")
        if indices.size and not self.holds_transition(indices).all():
            raise ValueError(f"slots {indices[~self.holds_transition(indices)][:5].tolist()} hold no transition")
        return indices

    def holds_transition(self, slots: np.ndarray) -> np.ndarray:
        """Per slot, whether it holds a transition now (not a frame-only or an empty slot)."""
        return self._arrays["next"][np.asarray(slots, np.int64)] >= 0

    def get(self, indices) -> Transitions:
        """The transitions stored in the slots ``indices`` (copies), with ``indices`` set."""
        indices = self.check_indices(indices)
        cols = {name: self._arrays[name][indices] for name in self._arrays if name not in ("next", "stamp")}
        cols["next_obs"] = self._arrays["obs"][self._arrays["next"][indices]]
        return Transitions(**cols, indices=indices)

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Slots of ``batch_size`` transitions drawn uniformly with replacement (rejecting frame-only slots)."""
        batch_size = check_batch_size(batch_size)
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer")
        out = np.empty(0, np.int64)
        nxt = self._arrays["next"]
        while out.size < batch_size:
            draw = self._in_window(self._rng.integers(0, self.window_span, size=batch_size, dtype=np.int64))
            if not np.any(nxt[draw] >= 0) and not np.any(nxt[self.window_positions()] >= 0):
                raise ValueError(f"the sampling window (newest {self.window} slots) holds no transition: widen it")
            out = np.concatenate([out, draw[nxt[draw] >= 0]])
        return out[:batch_size]

    def sample(self, batch_size: int) -> Transitions:
        """``batch_size`` transitions drawn uniformly with replacement."""
        return self.get(self.sample_indices(batch_size))

    def column(self, name: str) -> np.ndarray:
        """One field of the stored transitions, in slot order (a copy; ``next_obs`` is gathered)."""
        idx = self.stored_indices()
        if name == "next_obs":
            return self._arrays["obs"][self._arrays["next"][idx]]
        if name not in self._arrays or name in ("next", "stamp"):
            stored = ["obs", "next_obs", *(n for n in self._arrays if n not in ("obs", "next", "stamp"))]
            raise KeyError(f"this buffer does not store {name!r}; it stores {stored}")
        return self._arrays[name][idx]

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        """Written slots of every column, the ring counters and the per-stream pending slots (numpy only)."""
        state: NumpyState = {name: arr[: self._filled].copy() for name, arr in self._arrays.items()}
        state.update(head=np.int64(self._head), filled=np.int64(self._filled), written=np.int64(self._written),
                     capacity=np.int64(self.capacity), rng_state=rng_state_array(self._rng))
        pend = [(s, slot, st) for s, q in self._pending.items() for slot, st in q]
        last = [(s, slot, st) for s, (slot, st) in self._last.items()]
        state["ended"] = np.array(sorted(self._ended), np.int64)
        for prefix, rows in (("pending", pend), ("last", last)):
            arr = np.asarray(rows, np.int64).reshape(-1, 3)
            for k, key in enumerate(("stream", "slot", "stamp")):
                state[f"{prefix}_{key}"] = arr[:, k].copy()
        return state

    def check_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Raise ValueError naming the problem if ``load_state_dict(state)`` would refuse ``state``; changes nothing."""
        self._checked(state)

    def _checked(self, state: Mapping[str, np.ndarray]) -> dict[str, Spec]:
        return check_compact_state(state, self.observation_space, self.action_space, self.capacity)

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; raises ValueError naming the problem and changes nothing then."""
        specs = self._checked(state)
        filled = state_int(state, "filled")
        for name in [n for n in self._arrays if n in OPTIONAL_FIELDS and n not in specs]:
            del self._arrays[name]
        for name, (shape, dtype) in specs.items():
            if name not in self._arrays:
                self._arrays[name] = np.zeros((self.capacity, *shape), dtype)
            self._arrays[name][:filled] = np.asarray(state[name])
        self._arrays["next"][filled:] = -1
        self._clear_state()
        self._head, self._filled, self._written = (state_int(state, k) for k in ("head", "filled", "written"))
        self._size = int(np.count_nonzero(self._arrays["next"][:filled] >= 0))
        for s, slot, st in zip(*(np.asarray(state[f"pending_{k}"]).tolist() for k in ("stream", "slot", "stamp"))):
            self._pending.setdefault(s, deque(maxlen=MAX_PENDING)).append((slot, st))
        for s, slot, st in zip(*(np.asarray(state[f"last_{k}"]).tolist() for k in ("stream", "slot", "stamp"))):
            self._last[s] = (slot, st)
        self._ended = set(np.asarray(state["ended"]).tolist())
        set_rng_state(self._rng, state["rng_state"])


_SCALARS = ("head", "filled", "written", "capacity")
_PENDING = ("pending_stream", "pending_slot", "pending_stamp", "last_stream", "last_slot", "last_stamp", "ended")


def compact_specs(observation_space: gym.Space, action_space: gym.Space) -> dict[str, Spec]:
    """Per-slot columns: one frame, the transition fields, the ``next`` slot and the write ``stamp``."""
    specs = transition_specs(observation_space, action_space)
    del specs["next_obs"]
    specs["next"] = ((), np.dtype(np.int64))
    specs["stamp"] = ((), np.dtype(np.int64))
    return specs


def check_compact_state(state: Mapping[str, np.ndarray], observation_space: gym.Space, action_space: gym.Space,
                        own_capacity: int) -> dict[str, Spec]:
    """The column specs of ``state`` if a buffer of these spaces and ``own_capacity`` slots can load it;
    else ValueError naming the problem."""
    if "obs" in state and "next_obs" in state:
        raise ValueError("state_dict is a plain ReplayBuffer's (obs and next_obs per row); this buffer stores "
                         "each observation once: load it into a ReplayBuffer (optimize_memory=False)")
    required = set(compact_specs(observation_space, action_space)) | set(_SCALARS) | set(_PENDING)
    required.add("rng_state")
    missing = required - set(state)
    if missing:
        raise ValueError(f"state_dict is missing keys {sorted(missing)}")
    unknown = set(state) - required - set(OPTIONAL_FIELDS)
    if unknown:
        raise ValueError(f"state_dict has unknown keys {sorted(unknown)}")
    check_rng_state_array(state["rng_state"])
    capacity, head, filled, written = (state_int(state, k) for k in ("capacity", "head", "filled", "written"))
    if capacity != own_capacity:
        raise ValueError(f"state_dict is for capacity {capacity}, this buffer has capacity {own_capacity}")
    if not 0 <= filled <= capacity or not 0 <= head < capacity or (filled < capacity and head != filled):
        raise ValueError(f"state_dict head {head} / filled {filled} are inconsistent with capacity {capacity}")
    specs = compact_specs(observation_space, action_space)
    for name in set(state) & set(OPTIONAL_FIELDS):
        arr = np.asarray(state[name])
        if arr.ndim != (1 if name == "discount" else 2):
            raise ValueError(f"state_dict[{name!r}] has shape {arr.shape}")
        specs[name] = ((), np.dtype(np.float32)) if name == "discount" else (arr.shape[1:], np.dtype(bool))
    for name, (shape, dtype) in specs.items():
        arr = np.asarray(state[name])
        if arr.shape != (filled, *shape) or arr.dtype != dtype:
            raise ValueError(f"state_dict[{name!r}] is {arr.dtype} {arr.shape}, "
                             f"expected {dtype} {(filled, *shape)}")
    nxt, stamp = np.asarray(state["next"]), np.asarray(state["stamp"])
    if nxt.size and (nxt.min() < -1 or nxt.max() >= filled):
        raise ValueError(f"state_dict['next'] must hold -1 or a slot in [0, {filled})")
    if np.any(stamp[nxt[nxt >= 0]] <= stamp[nxt >= 0]) or (stamp.size and stamp.max() >= written):
        raise ValueError("state_dict['next'] / ['stamp'] break the write order (a next frame older than its "
                         "transition, or a stamp not yet written)")
    _check_streams(state, filled)
    return specs


def _check_streams(state: Mapping[str, np.ndarray], filled: int) -> None:
    """The per-stream bookkeeping of a saved state: int64 vectors, slots within the written ones."""
    ended = np.asarray(state["ended"])
    if ended.ndim != 1 or ended.dtype != np.int64:
        raise ValueError(f"state_dict['ended'] must be an int64 vector, got {ended.dtype} {ended.shape}")
    for prefix in ("pending", "last"):
        arrs = [np.asarray(state[f"{prefix}_{k}"]) for k in ("stream", "slot", "stamp")]
        if any(a.ndim != 1 or a.dtype != np.int64 or a.shape != arrs[0].shape for a in arrs):
            raise ValueError(f"state_dict {prefix}_* must be int64 vectors of one length")
        if arrs[1].size and (arrs[1].min() < 0 or arrs[1].max() >= max(filled, 1)):
            raise ValueError(f"state_dict {prefix}_slot must lie in [0, {filled})")
