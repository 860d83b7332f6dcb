"""The rank context of a multi-process run: which rank this is, and the backend's collective.

Numpy only (a bottom-layer module, like :mod:`marl_note.types`): the trainer reads a
:class:`DistributedContext`, and the agent backends build one
(:func:`marl_note.contrib.distributed.torch.ddp.init_distributed`) around their own :class:`Collective`:
broadcasting rank 0's decisions, a barrier, and ``prepare(agent)``, which makes an agent's gradient
steps synchronous across ranks. Rank 0 (``is_chief``) is the one that tests and saves.

Example:
    >>> ctx = DistributedContext()          # one process: rank 0 of 1, no communication
    >>> ctx.is_chief, ctx.world_size, ctx.shard_batch(64), ctx.broadcast("stop")
    (True, 1, 64, 'stop')
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Collective", "DistributedContext", "RankLostError", "env_rank_info", "RANK_SEED_STRIDE"]

RANK_SEED_STRIDE = 1_000_003  # rank r's train envs start at seed + r * stride (no overlap for < 1e6 envs)


class RankLostError(RuntimeError):
    """A collective call with the other ranks failed: one of them died, or hung past the timeout."""


@runtime_checkable
class Collective(Protocol):
    """What the trainer needs from a backend's process group (rank 0 is the source of every broadcast)."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` (a small picklable value) on every rank."""

    def barrier(self) -> None:
        """Return once every rank has reached it."""

    def prepare(self, agent: Any) -> None:
        """Copy rank 0's weights into ``agent`` and average its gradients over the ranks from now on."""


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in a multi-process run: ``rank`` of ``world_size`` and the backend's
    :class:`Collective` (None for a single process).

    Rank 0 (``is_chief``) tests, calls the hooks and callbacks, saves checkpoints and plots; every
    rank collects on its own envs into its own replay and takes the same gradient steps.
    ``batch_size`` passed to the trainer is the global batch: each rank samples
    :meth:`shard_batch` of it and the gradients are averaged over the ranks.

    Example:
        >>> class Loopback:  # what a backend supplies; this one has no other rank to talk to
        ...     def broadcast(self, obj, src=0): return obj
        ...     def barrier(self): pass
        ...     def prepare(self, agent): pass
        >>> ctx = DistributedContext(rank=1, world_size=2, collective=Loopback())
        >>> ctx.is_chief, ctx.shard_batch(64), ctx.rank_seed(0)
        (False, 32, 1000003)
        >>> ctx.shard_batch(33)
        Traceback (most recent call last):
        ...
        ValueError: batch_size=33 (the global batch) must be a multiple of world_size=2
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    collective: Collective | None = None

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "local_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size or self.local_rank < 0:
            raise ValueError(f"need 0 <= rank < world_size and local_rank >= 0, got rank={self.rank}, "
                             f"world_size={self.world_size}, local_rank={self.local_rank}")
        if self.world_size > 1 and not isinstance(self.collective, Collective):
            raise TypeError(f"world_size={self.world_size} needs a collective with broadcast, barrier and prepare "
                            f"(e.g. marl_note.contrib.distributed.torch.ddp.init_distributed()), got "
                            f"{type(self.collective).__name__}")

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def shard_batch(self, batch_size: int) -> int:
        """This rank's share of the global ``batch_size`` (it must divide evenly)."""
        if batch_size % self.world_size:
            raise ValueError(f"batch_size={batch_size} (the global batch) must be a multiple of "
                             f"world_size={self.world_size}")
        return batch_size // self.world_size

    def rank_seed(self, seed: int | None) -> int | None:
        """The seed of this rank's train envs: ``seed + rank * RANK_SEED_STRIDE``."""
        return None if seed is None else seed + self.rank * RANK_SEED_STRIDE

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (``obj`` itself in one process)."""
        return obj if self.collective is None or not self.distributed else self.collective.broadcast(obj, 0)

    def barrier(self) -> None:
        if self.collective is not None and self.distributed:
            self.collective.barrier()

    def prepare(self, agent: Any) -> None:
        """Make ``agent``'s updates synchronous (rank 0's weights, averaged gradients); a fresh
        exploration generator on ranks > 0. Nothing in one process."""
        if not self.distributed:
            return
        assert self.collective is not None  # checked in __post_init__
        self.collective.prepare(agent)
        rng = getattr(agent, "rng", None)
        if self.rank and isinstance(rng, np.random.Generator):  # same seed on every rank: decorrelate
            agent.rng = np.random.default_rng([int(rng.integers(0, 2**63 - 1)), self.rank])

    def lockstep(self, go_on: bool, gradient_steps: int) -> bool:
        """Rank 0's decision to go on, on every rank; raises when this rank's gradient steps of the
        last update round differ from rank 0's (the ranks' averaging calls no longer pair up)."""
        if not self.distributed:
            return go_on
        chief_go_on, chief_steps = self.broadcast((bool(go_on), int(gradient_steps)))
        if chief_steps != gradient_steps:
            raise RuntimeError(
                f"rank {self.rank} took {gradient_steps} gradient steps in the last update round, rank 0 took "
                f"{chief_steps}: the ranks are out of lockstep. Every rank's learners must get the same number "
                f"of transitions per chunk (Gymnasium envs and Parallel envs where every agent acts each step "
                f"do; turn-based games may not)")
        return bool(chief_go_on)

    @classmethod
    def from_env(cls, collective: Collective | None = None) -> DistributedContext:
        """The context described by ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (one process where unset)."""
        rank, world_size, local_rank = env_rank_info()
        return cls(rank, world_size, local_rank, collective if world_size > 1 else None)


def env_rank_info() -> tuple[int, int, int]:
    """``(RANK, WORLD_SIZE, LOCAL_RANK)`` from the environment (``(0, 1, 0)`` where unset), checked."""
    try:
        rank = int(os.environ.get("RANK", "0"))
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as err:
        raise ValueError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers: {err}") from None
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= RANK < WORLD_SIZE, got RANK={rank}, WORLD_SIZE={world_size}")
    return rank, world_size, local_rank
