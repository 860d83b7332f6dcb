"""Insert-time n-step accumulation: one-step transitions in, discounted n-step transitions out."""
from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from marl_note.types import Transitions

_FIRST = ("obs", "act", "mask")  # taken from the window's first step
_LAST = ("next_obs", "next_mask", "terminated", "truncated")  # taken from its last step


class NStepAccumulator:
    """Turns in-order one-step transitions into n-step ones, per ``stream``.

    For a window of ``k <= n`` steps starting at ``t``: ``rew = sum_i gamma**i * r_{t+i}``,
    ``next_obs``/``next_mask``/``terminated``/``truncated`` come from step ``t+k-1``, and
    ``discount = gamma**k`` (the factor in front of the bootstrap value). Windows are cut
    at episode ends (``terminated`` or ``truncated``), which release every pending
    transition of that stream. A transition whose window is not complete yet is held
    back; :meth:`flush` releases all held transitions with their shorter windows.
    Streams (``stream`` ids; ``None`` = one stream) may interleave arbitrarily.

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
        self._pending: dict[int, deque] = {}
        self._template: Transitions | None = None  # an empty batch fixing field shapes/presence

    def __len__(self) -> int:
        """Number of transitions held back."""
        return sum(len(q) for q in self._pending.values())

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
        """Feed one-step transitions; return the n-step transitions that became ready (maybe none)."""
        self._check(transitions)
        t = transitions
        if self._template is None:  # (Any: None exactly where t has None, which Transitions allows)
            empty: dict[str, Any] = {k: (None if v is None else np.asarray(v)[:0].copy()) for k, v in vars(t).items()}
            self._template = Transitions(**empty)
        arrays = {k: (None if v is None else np.asarray(v)) for k, v in vars(t).items()}
        streams = np.zeros(len(t), np.int64) if t.stream is None else np.asarray(t.stream).astype(np.int64)
        done = np.logical_or(np.asarray(t.terminated), np.asarray(t.truncated))
        ready = []
        for i in range(len(t)):
            row = {k: (None if v is None else v[i].copy()) for k, v in arrays.items()}
            queue = self._pending.setdefault(int(streams[i]), deque())
            queue.append(row)
            if done[i]:
                while queue:
                    ready.append(self._window(queue))
                    queue.popleft()
            elif len(queue) == self.n:
                ready.append(self._window(queue))
                queue.popleft()
        return self._build(ready, has_stream=t.stream is not None)

    def flush(self) -> Transitions:
        """Release every held transition with its (shorter) window, and forget all pending state."""
        ready = []
        for queue in self._pending.values():
            while queue:
                ready.append(self._window(queue))
                queue.popleft()
        self._pending.clear()
        has_stream = self._template is not None and self._template.stream is not None
        return self._build(ready, has_stream=has_stream)

    def reset(self) -> None:
        """Drop all held transitions without releasing them."""
        self._pending.clear()

    def _window(self, queue: deque) -> dict:
        """The n-step transition starting at ``queue[0]`` and ending at ``queue[-1]``."""
        first, last, k = queue[0], queue[-1], len(queue)
        rew = 0.0
        for i, row in enumerate(queue):
            rew += self.gamma ** i * float(row["rew"])
        out = {name: first[name] for name in _FIRST}
        out.update({name: last[name] for name in _LAST})
        out["rew"] = rew
        out["stream"] = first["stream"]
        out["discount"] = self.gamma ** k
        return out

    def _build(self, rows: list[dict], has_stream: bool) -> Transitions:
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
            elif rows:
                fields[name] = np.stack([np.asarray(r[name]) for r in rows]).astype(ref.dtype, copy=False)
            else:
                fields[name] = ref.copy()
        fields["rew"] = np.array([r["rew"] for r in rows], dtype=np.float32)
        fields["discount"] = np.array([r["discount"] for r in rows], dtype=np.float32)
        return Transitions(**fields)
