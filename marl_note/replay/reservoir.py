"""A reservoir buffer: a bounded, uniform sample of everything ever added (Vitter's algorithm R), numpy only.

NFSP's average policy learns by supervised learning on the agent's own best-response actions; a
reservoir keeps every one of them with equal probability ``capacity / added`` however long the run,
where a ring would keep only the most recent ones (and so only the recent best responses).

Example:
    >>> buf = ReservoirBuffer(3, obs_dim=2, n_actions=4, seed=0)
    >>> for k in range(10):
    ...     buf.add(np.full((1, 2), k), np.array([k % 4]))
    >>> len(buf), buf.added
    (3, 10)
    >>> obs, act, legal = buf.sample(5)
    >>> obs.shape, act.shape, legal.shape
    ((5, 2), (5,), (5, 4))
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.rng import check_rng_array, rng_from_array, rng_to_array
from marl_note.validation import positive_int

__all__ = ["ReservoirBuffer"]

_KEYS = ("obs", "act", "legal", "added", "rng_state")


class ReservoirBuffer:
    """``capacity`` rows of ``(obs [obs_dim] float32, act int64, legal [n_actions] bool)``.

    The first ``capacity`` rows are kept; the ``k``-th row after them (``k`` counted from 1 over all
    rows ever added, ``added``) replaces a uniformly chosen stored row with probability
    ``capacity / k``, so at any time every row added so far is stored with the same probability.
    ``sample(n)`` draws ``n`` stored rows uniformly with replacement. The arrays are allocated up
    front. ``state_dict()`` is numpy arrays only (the stored rows, ``added`` and the generator), for
    checkpoints; ``load_state_dict`` checks a state first and changes nothing when it does not fit.
    """

    def __init__(self, capacity: int, obs_dim: int, n_actions: int, seed: int | None = None):
        self.capacity = positive_int("capacity", capacity, "rows the reservoir keeps")
        self.obs_dim = positive_int("obs_dim", obs_dim, "numbers per observation")
        self.n_actions = positive_int("n_actions", n_actions, "actions")
        self.obs = np.zeros((self.capacity, self.obs_dim), np.float32)
        self.act = np.zeros(self.capacity, np.int64)
        self.legal = np.zeros((self.capacity, self.n_actions), bool)
        self.added = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return min(self.added, self.capacity)

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated arrays."""
        return int(self.obs.nbytes + self.act.nbytes + self.legal.nbytes)

    def add(self, obs: np.ndarray, act: np.ndarray, legal: np.ndarray | None = None) -> None:
        """Offer rows ``obs [B, obs_dim]``, ``act [B]`` (0-based) and ``legal [B, n_actions]`` (None: all legal)."""
        obs = np.asarray(obs, np.float32)
        act = np.asarray(act, np.int64).reshape(-1)
        n = len(act)
        if obs.shape != (n, self.obs_dim):
            raise ValueError(f"obs must have shape ({n}, {self.obs_dim}) for {n} actions, got {obs.shape}")
        if n and (act.min() < 0 or act.max() >= self.n_actions):
            raise ValueError(f"actions must be in [0, {self.n_actions}), got {act.min()}..{act.max()}")
        legal = np.ones((n, self.n_actions), bool) if legal is None else np.asarray(legal, bool)
        if legal.shape != (n, self.n_actions):
            raise ValueError(f"legal must have shape ({n}, {self.n_actions}), got {legal.shape}")
        if not n:
            return
        # row k of this batch is the (added + k + 1)-th row ever: it fills a free slot while there is one,
        # else lands in a uniform draw from [0, its number) and is kept when that draw is a slot
        number = self.added + 1 + np.arange(n)
        free = number <= self.capacity
        slot = np.where(free, number - 1, 0)
        late = ~free
        if late.any():
            slot[late] = self._rng.integers(0, number[late])
        keep = np.flatnonzero(slot < self.capacity)
        # a slot drawn twice in one batch keeps the later row, as one row at a time would
        _, last = np.unique(slot[keep][::-1], return_index=True)
        keep = keep[::-1][last]
        self.obs[slot[keep]], self.act[slot[keep]], self.legal[slot[keep]] = obs[keep], act[keep], legal[keep]
        self.added += n

    def sample(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(obs, act, legal)`` of ``n`` stored rows drawn uniformly with replacement."""
        n = positive_int("n", n, "rows to sample")
        if not len(self):
            raise ValueError("the reservoir is empty: add rows before sampling")
        idx = self._rng.integers(0, len(self), size=n)
        return self.obs[idx], self.act[idx], self.legal[idx]

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored rows (``len(self)`` of them), ``added`` and the generator state."""
        n = len(self)
        return {"obs": self.obs[:n].copy(), "act": self.act[:n].copy(), "legal": self.legal[:n].copy(),
                "added": np.asarray(self.added, np.int64), "rng_state": rng_to_array(self._rng)}

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ValueError naming the problem if :meth:`load_state_dict` would refuse ``state``."""
        missing = [k for k in _KEYS if k not in state]
        if missing:
            raise ValueError(f"reservoir state is missing keys {missing}")
        extra = sorted(set(state) - set(_KEYS))
        if extra:
            raise ValueError(f"reservoir state has unknown keys {extra}")
        added = np.asarray(state["added"])
        if added.shape != () or not np.issubdtype(added.dtype, np.integer) or int(added) < 0:
            raise ValueError(f"reservoir state 'added' must be a non-negative integer, got {added!r}")
        n = min(int(added), self.capacity)
        for key, shape in (("obs", (n, self.obs_dim)), ("act", (n,)), ("legal", (n, self.n_actions))):
            if np.shape(state[key]) != shape:
                raise ValueError(f"reservoir state {key!r} must have shape {shape} (capacity {self.capacity}, "
                                 f"{int(added)} added), got {np.shape(state[key])}")
        act = np.asarray(state["act"])
        if n and (not np.issubdtype(act.dtype, np.integer) or act.min() < 0 or act.max() >= self.n_actions):
            raise ValueError(f"reservoir state 'act' must hold actions in [0, {self.n_actions})")
        check_rng_array(state["rng_state"], "reservoir state 'rng_state'")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (checked first; nothing changes on an error)."""
        self.check_state_dict(state)
        n = min(int(np.asarray(state["added"])), self.capacity)
        self.obs[:n], self.act[:n], self.legal[:n] = state["obs"], state["act"], state["legal"]
        self.added = int(np.asarray(state["added"]))
        rng_from_array(self._rng, state["rng_state"])

    def __repr__(self) -> str:
        return f"ReservoirBuffer(capacity={self.capacity}, len={len(self)}, added={self.added})"
