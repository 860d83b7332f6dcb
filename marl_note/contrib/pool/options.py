"""The pool trainer's settings, checked once: actor count, weight sync and the shard options.

The shard options keep the original library's names:

- ``window_size``: when a shard has no room for a round's rows, evict its oldest ``window_size``
  undrained rows at once (at least as many as the round needs), or ``window_size(undrained) ->
  rows to evict``. None (default): the actor waits for the learner to drain the shard instead.
- ``clearing_freq`` with ``window_size_``: every ``clearing_freq`` rounds an actor evicts the oldest
  ``window_size_`` undrained rows of its shard (periodic eviction).
- ``random``: an actor writes each round into one of the learner's shards (every actor's) chosen
  with probability proportional to ``1 / (1 + undrained rows)``, which balances the shards.
- ``num_store``: an actor's round is ``num_store`` finished episodes; None (default): a round is
  ``update_freq / actors`` env steps (rounded up).

``backend``: ``"process"`` (default: actor processes on this machine, shared-memory shards) or
``"ray"`` (Ray actors, transitions and weights through Ray's object store; ``address`` is the
cluster to join, None: a local Ray). Ray has no shards, so the eviction and ``random`` options
are refused with it.

``learner_threads``: PyTorch intra-op threads of the learner while the actors run: ``"auto"``
(default) leaves a core to each actor on this machine, ``max(1, usable cores - actors)`` (Ray
with an ``address``: unchanged, the actors run elsewhere); an integer caps them at that; None
leaves them alone. Restored when the run ends (:mod:`marl_note.agents.threads`).

Example:
    >>> PoolOptions(actors=2, sync_every=4, window_size=100).window_size
    100
    >>> PoolOptions(actors=2, backend="ray").address is None
    True
    >>> PoolOptions(actors=2, clearing_freq=5)
    Traceback (most recent call last):
    ...
    ValueError: clearing_freq needs window_size_ (the number of oldest rows to evict every clearing_freq rounds)
"""
from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marl_note.agents.threads import usable_cores

__all__ = ["PoolOptions", "SHARD_OPTIONS"]

SHARD_OPTIONS = ("window_size", "clearing_freq", "window_size_", "random", "num_store", "shard_capacity",
                 "actor_timeout", "backend", "address", "learner_threads")
BACKENDS = ("process", "ray")


def _count(name: str, value: Any, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


def _shm_free_bytes() -> int | None:
    """Free bytes of ``/dev/shm`` (where shared-memory blocks live on Linux), or None where unknown."""
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return None
    return int(st.f_bavail * st.f_frsize)


@dataclass(frozen=True)
class PoolOptions:
    """Actor processes (``actors``), weight publication every ``sync_every`` gradient steps, the
    shard options (module docstring), ``shard_capacity`` rows per (actor, learner) shard and
    ``actor_timeout`` seconds the learner waits on its actors (a round, a shard with room, a stop),
    ``backend`` and ``address`` (process actors or Ray actors, module docstring)."""

    actors: int = 2
    sync_every: int = 1
    window_size: Any = None
    clearing_freq: int | None = None
    window_size_: int | None = None
    random: bool = False
    num_store: int | None = None
    shard_capacity: int = 20_000
    actor_timeout: float = 60.0
    backend: str = "process"
    address: str | None = None
    learner_threads: int | str | None = "auto"

    def __post_init__(self) -> None:
        _count("actors", self.actors, allow_none=False)
        _count("sync_every", self.sync_every, allow_none=False)
        _count("shard_capacity", self.shard_capacity, allow_none=False)
        if not (self.window_size is None or callable(self.window_size)):
            _count("window_size", self.window_size)
        _count("clearing_freq", self.clearing_freq)
        _count("window_size_", self.window_size_)
        _count("num_store", self.num_store)
        if self.clearing_freq is not None and self.window_size_ is None:
            raise ValueError("clearing_freq needs window_size_ (the number of oldest rows to evict every "
                             "clearing_freq rounds)")
        if self.window_size_ is not None and self.clearing_freq is None:
            raise ValueError("window_size_ needs clearing_freq (how many rounds between evictions)")
        if not isinstance(self.random, bool):
            raise ValueError(f"random must be True or False, got {self.random!r}")
        t = self.actor_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"actor_timeout must be a positive number of seconds, got {t!r}")
        n = self.learner_threads
        if n is not None and n != "auto" and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"learner_threads must be 'auto', None or a positive integer, got {n!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {self.backend!r}")
        if self.address is not None and (self.backend != "ray" or not isinstance(self.address, str)):
            raise ValueError(f"address (a Ray cluster address string) needs backend='ray', got address="
                             f"{self.address!r} with backend={self.backend!r}")
        if self.backend == "ray":
            if importlib.util.find_spec("ray") is None:  # found, not imported: only the Ray backend imports it
                raise ImportError('pool backend "ray" needs Ray: pip install "marl_note[ray]"')
            shard_only = [name for name, value in (("window_size", self.window_size),
                                                   ("clearing_freq", self.clearing_freq), ("random", self.random))
                          if value not in (None, False)]
            if shard_only:
                raise ValueError(f"{shard_only} act on shared-memory shards, which backend='ray' does not have "
                                 f"(its transitions go through Ray's object store)")

    def check_shards_fit(self, shard_specs: Sequence[Mapping[str, tuple[tuple[int, ...], Any]]],
                         available: int | None = None) -> None:
        """Refuse shards that cannot fit before they are created: ``actors`` shards of ``shard_capacity``
        rows for each learner, whose columns are ``shard_specs[k]``.

        Compared with the machine's available memory and the free space of ``/dev/shm`` (where the
        shards live), whichever is smaller (``available`` replaces both); raises
        :class:`~marl_note.replay.memory.InsufficientMemoryError` naming ``shard_capacity``.

        Example:
            >>> import numpy as np
            >>> specs = [{"obs": ((84, 84, 3), np.uint8), "next_obs": ((84, 84, 3), np.uint8)}]
            >>> PoolOptions(actors=4, shard_capacity=10**6).check_shards_fit(specs, available=16 * 10**9)
            Traceback (most recent call last):
            ...
            marl_note.replay.memory.InsufficientMemoryError: pool shard_capacity=1000000 rows in each of 4 shards \
(4 actors x 1 learner, 42.3 kB a row) needs 169 GB, ... lower shard_capacity (at most about 94482 rows fit) or use \
fewer actors
        """
        from marl_note.replay import memory

        if self.backend != "process" or not shard_specs:
            return
        row = sum(memory.item_nbytes(specs) for specs in shard_specs)  # one row in each learner's shard
        nbytes = self.actors * self.shard_capacity * row
        where = "of memory is available on this machine"
        room = available
        if room is None:
            room = memory.available_bytes()
            shm = _shm_free_bytes()
            if shm is not None and (room is None or shm < room):
                room, where = shm, "is free in /dev/shm, where the shards live"
        learners = len(shard_specs)
        memory.check_memory(nbytes, f"pool shard_capacity={self.shard_capacity} rows in each of "
                                    f"{self.actors * learners} shards ({self.actors} actors x {learners} learner"
                                    f"{'s' if learners > 1 else ''}, {memory.format_bytes(row / learners)} a row)",
                            f"lower shard_capacity (at most about {int((room or 0) // (self.actors * row))} rows "
                            f"fit) or use fewer actors", available=room, where=where)

    def learner_thread_cap(self) -> int | None:
        """The learner's intra-op thread cap for this run (None: leave the framework's threads alone)."""
        if self.learner_threads is None or (self.learner_threads == "auto" and self.address is not None):
            return None
        if self.learner_threads == "auto":
            return max(1, usable_cores() - self.actors)
        return int(self.learner_threads)

    @classmethod
    def build(cls, actors: Any, sync_every: Any, options: Any) -> PoolOptions:
        """From the trainer's ``actors``, ``sync_every`` and ``pool`` (a dict of shard options)."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(SHARD_OPTIONS))
        if unknown:
            raise ValueError(f"unknown pool options {unknown}; use {list(SHARD_OPTIONS)}")
        return cls(actors=actors, sync_every=sync_every, **options)
