"""Insert-time n-step accumulation: one-step transitions in, discounted n-step transitions out."""
from __future__ import annotations

from typing import Any

import numpy as np

from marl_note.types import Transitions

_FIRST = ("obs", "act", "mask")  # taken from the window's first step
_LAST = ("next_obs", "next_mask", "terminated", "truncated")  # taken from its last step
_KEPT = (*_FIRST, *_LAST, "rew", "stream")  # what a held-back step keeps


class NStepAccumulator:
    """Turns in-order one-step transitions into n-step ones, per ``stream``.

    For a window of ``k <= n`` steps starting at ``t``: ``rew = sum_i gamma**i * r_{t+i}``,
    ``next_obs``/``next_mask``/``terminated``/``truncated`` come from step ``t+k-1``, and
    ``discount = gamma**k`` (the factor in front of the bootstrap value). Windows are cut
    at episode ends (``terminated`` or ``truncated``), which release every pending
    transition of that stream. A transition whose window is not complete yet is held
    back; :meth:`flush` releases all held transitions with their shorter windows.
    Streams (``stream`` ids; ``None`` = one stream) may interleave arbitrarily.
    Each call works on whole arrays: a batch of transitions costs ``n`` vectorised passes over
    it (one per window step), not Python work per transition.

    Example:
        >>> import numpy as np
        >>> from marl_note.types import Transitions
        >>> acc = NStepAccumulator(n=2, gamma=0.5)
        >>> step = lambda r, done: Transitions(obs=np.array([[r]]), act=np.array([0]), rew=np.array([r]),
        ...                                    next_obs=np.array([[r + 1]]), terminated=np.array([done]),
        ...                                    truncated=np.array([False]))
        >>> len(acc.add(step(1.0, False)))  # held back: window of 2 not complete
        0
        >>> out = acc.add(step(2.0, False))
        >>> out.rew.tolist(), out.next_obs.tolist(), out.discount.tolist()
        ([2.0], [[3.0]], [0.25])
        >>> out = acc.add(step(4.0, True))  # the episode ends: both pending windows are released
        >>> out.rew.tolist(), out.discount.tolist(), out.terminated.tolist()
        ([4.0, 4.0], [0.25, 0.5], [True, True])
    """

    def __init__(self, n: int, gamma: float):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
        self.n = int(n)
        self.gamma = float(gamma)
        self._powers = np.array([self.gamma ** k for k in range(self.n + 1)])  # gamma**k for k = 0..n, float64
        self._held: dict[str, np.ndarray] = {}  # the held-back steps' fields (those present), in arrival order
        self._held_ids = np.zeros(0, np.int64)  # and their stream ids
        self._streams: dict[int, int] = {}  # stream id -> rank of its first appearance (the order flush releases)
        self._template: Transitions | None = None  # an empty batch fixing field shapes/presence

    def __len__(self) -> int:
        """Number of transitions held back."""
        return len(self._held_ids)

    def _check(self, t: Transitions) -> None:
        if not isinstance(t, Transitions):
            raise ValueError(f"expected a Transitions batch, got {type(t).__name__}")
        if t.discount is not None:
            raise ValueError("NStepAccumulator takes one-step transitions; this batch already has a discount")
        rew = np.asarray(t.rew)
        if rew.ndim != 1:
            raise ValueError(f"rew must be 1-D, got shape {rew.shape}")
        for name in ("obs", "act", "next_obs", "terminated", "truncated", "mask", "next_mask", "stream"):
            value = getattr(t, name)
            if value is not None and np.shape(value)[:1] != rew.shape:
                raise ValueError(f"{name} has leading length {np.shape(value)[:1]}, expected {rew.shape[0]} like rew")
        if self._template is not None:
            tpl = self._template
            for name in ("obs", "act", "next_obs", "mask", "next_mask"):
                a, b = getattr(tpl, name), getattr(t, name)
                if (a is None) != (b is None):
                    raise ValueError(f"{name} is {'missing' if b is None else 'present'} in this batch "
                                     f"but was {'present' if b is None else 'missing'} before")
                if a is not None and np.shape(a)[1:] != np.shape(b)[1:]:
                    raise ValueError(f"{name} item shape {np.shape(b)[1:]} differs from earlier {np.shape(a)[1:]}")
            if (tpl.stream is None) != (t.stream is None):
                raise ValueError("stream ids must be given in every batch or in none")

    def add(self, transitions: Transitions) -> Transitions:
        """Feed one-step transitions; return the n-step transitions that became ready (maybe none), in the
        order they became ready: by the arrival of a window's last step, then of its first."""
        self._check(transitions)
        t = transitions
        if self._template is None:  # (Any: None exactly where t has None, which Transitions allows)
            empty: dict[str, Any] = {k: (None if v is None else np.asarray(v)[:0].copy()) for k, v in vars(t).items()}
            self._template = Transitions(**empty)
        new = {k: np.asarray(getattr(t, k)) for k in _KEPT if getattr(t, k) is not None}
        ids = np.zeros(len(t), np.int64) if t.stream is None else np.asarray(t.stream).astype(np.int64)
        for s in dict.fromkeys(ids.tolist()):  # streams seen for the first time, in arrival order
            self._streams.setdefault(s, len(self._streams))
        if len(self._held_ids):  # the held-back steps come first: they arrived first
            new = {k: np.concatenate([self._held[k], v]) for k, v in new.items()}
            ids = np.concatenate([self._held_ids, ids])
        first, last, rew, length, ready = self._windows(new, ids, release_all=False)
        order = np.lexsort((first, last))  # by the arrival of the window's last step, then of its first
        out = self._build(new, first[order], last[order], rew[order], length[order], t.stream is not None)
        held = np.flatnonzero(~ready)  # the tail of each stream, still in arrival order
        self._held = {k: v[held] for k, v in new.items()}
        self._held_ids = ids[held]
        return out

    def flush(self) -> Transitions:
        """Release every held transition with its (shorter) window, and forget all pending state."""
        has_stream = self._template is not None and self._template.stream is not None
        steps, ids = self._held, self._held_ids
        first, last, rew, length, _ = self._windows(steps, ids, release_all=True)
        rank = np.array([self._streams[s] for s in ids.tolist()], np.int64)
        order = np.lexsort((first, rank[first]))  # stream by stream (first seen first), each in arrival order
        out = self._build(steps, first[order], last[order], rew[order], length[order], has_stream)
        self.reset()
        return out

    def reset(self) -> None:
        """Drop all held transitions without releasing them."""
        self._held, self._held_ids = {}, np.zeros(0, np.int64)
        self._streams.clear()

    def _windows(self, steps: dict[str, np.ndarray], ids: np.ndarray, release_all: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The complete windows among those starting at each of ``steps`` (all of them with ``release_all``):
        ``(first, last, rew, length, ready)``. ``first`` and ``last`` index each window's first and last step,
        ``rew`` is its discounted return (float64, added in step order), ``length`` its number of steps;
        ``ready`` says, per step, whether its window is complete (cut by an episode end, or ``n`` steps)."""
        total = len(ids)
        if total == 0:
            none = np.zeros(0, np.int64)
            return none, none, np.zeros(0), none, np.zeros(0, bool)
        done = np.logical_or(steps["terminated"], steps["truncated"])
        step_rew = np.asarray(steps["rew"], np.float64)
        by_stream = np.argsort(ids, kind="stable")  # each stream's steps together, in arrival order
        stream = ids[by_stream]
        start = np.arange(total)  # positions in by_stream order: a window starts at each
        end = start.copy()
        rew, length = np.zeros(total), np.zeros(total, np.int64)
        growing, cut = np.ones(total, bool), np.zeros(total, bool)
        for k in range(self.n):  # the window's (k+1)-th step, where it has one
            at = np.minimum(start + k, total - 1)
            grows = growing & (start + k < total) & (stream[at] == stream)
            step = by_stream[at]
            np.add(rew, self._powers[k] * step_rew[step], out=rew, where=grows)
            length += grows
            np.copyto(end, at, where=grows)
            ends = grows & done[step]
            cut |= ends
            growing = grows & ~ends
        complete = np.ones(total, bool) if release_all else cut | (length == self.n)
        ready = np.empty(total, bool)
        ready[by_stream] = complete
        pick = np.flatnonzero(complete)
        return by_stream[pick], by_stream[end[pick]], rew[pick], length[pick], ready

    def _build(self, steps: dict[str, np.ndarray], first: np.ndarray, last: np.ndarray, rew: np.ndarray,
               length: np.ndarray, has_stream: bool) -> Transitions:
        tpl = self._template
        if tpl is None:  # nothing was ever added: an empty batch of 1-D arrays
            empty = np.zeros(0)
            return Transitions(obs=empty, act=empty, rew=empty.astype(np.float32), next_obs=empty,
                               terminated=np.zeros(0, bool), truncated=np.zeros(0, bool),
                               discount=empty.astype(np.float32))
        fields: dict[str, Any] = {}  # (Any: None exactly where the template has None)
        for name in _FIRST + _LAST + ("stream",):
            ref = getattr(tpl, name)
            if ref is None or (name == "stream" and not has_stream):
                fields[name] = None
            elif len(first):
                fields[name] = steps[name][last if name in _LAST else first].astype(ref.dtype, copy=False)
            else:
                fields[name] = ref.copy()
        fields["rew"] = rew.astype(np.float32)
        fields["discount"] = self._powers[length].astype(np.float32)
        return Transitions(**fields)
