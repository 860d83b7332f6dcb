"""How much memory a trainer's envs take at least, checked before any of them is built.

A trainer holds ``num_train_envs + num_test_envs`` envs (and, with ``processes`` or ``actors``,
worker processes that host them). :func:`check_envs_fit` refuses a count whose lower-bound
estimate exceeds the machine's available memory, with an
:class:`~marl_note.replay.memory.InsufficientMemoryError` (the replay buffers' check, see
:mod:`marl_note.replay.memory`), so that ``num_envs=100_000_000`` fails at once instead of
building envs for hours. The estimate is a floor, never a guess from above: every env holds at
least :data:`ENV_BYTES` of Python objects plus one observation of each agent, and every worker
process at least :data:`WORKER_BYTES` of its own pages.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.types import EnvSpec
    >>> spec = EnvSpec(("agent_0",), {"agent_0": gym.spaces.Box(0, 255, (84, 84, 3), "uint8")},
    ...                {"agent_0": gym.spaces.Discrete(4)}, False, False)
    >>> env_nbytes(spec) == ENV_BYTES + 84 * 84 * 3
    True
    >>> check_envs_fit(10**8, 10**8, available=8 * 10**9)
    Traceback (most recent call last):
    ...
    marl_note.replay.memory.InsufficientMemoryError: num_train_envs=100000000 and num_test_envs=100000000: \
holding 200,000,000 envs (at least 4.1 kB each) needs 819 GB, but only 8 GB of memory is available on this machine; \
use fewer envs (at most about 1,953,125 in all)
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.replay.memory import check_memory, format_bytes
from marl_note.types import EnvSpec

__all__ = ["ENV_BYTES", "WORKER_BYTES", "check_envs_fit", "env_nbytes", "workers_of"]

ENV_BYTES = 4096  # at least: CartPole-v1, the smallest env measured, holds about 4 kB of Python objects
WORKER_BYTES = 8 * 2**20  # at least: a worker process's own pages (about 9 MB measured, forkserver workers)


def _space_nbytes(space: Any) -> int:
    """Bytes of one observation of ``space`` (0 where a space has no fixed size)."""
    if isinstance(space, gym.spaces.Dict):
        return sum(_space_nbytes(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(_space_nbytes(s) for s in space.spaces)
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def env_nbytes(spec: EnvSpec | None) -> int:
    """Bytes one env holds at least: :data:`ENV_BYTES` plus one observation per agent (``spec`` None: unknown yet)."""
    if spec is None:
        return ENV_BYTES
    return ENV_BYTES + sum(_space_nbytes(spec.observation_space(a)) for a in spec.possible_agents)


def check_envs_fit(num_train_envs: int, num_test_envs: int, workers: int = 0, spec: EnvSpec | None = None,
                   available: int | None = None, warn: bool = True) -> None:
    """Refuse train and test envs (and ``workers`` worker processes) that cannot fit in the available memory.

    ``spec`` (when known) adds each env's observations to the estimate; ``available`` replaces the
    machine's available memory (tests). Raises
    :class:`~marl_note.replay.memory.InsufficientMemoryError` naming the counts and how many envs
    fit; warns above half of the available memory when ``warn``.
    """
    per_env = env_nbytes(spec)
    total = num_train_envs + num_test_envs
    nbytes = total * per_env + workers * WORKER_BYTES
    room = available
    if room is None:
        from marl_note.replay import memory

        room = memory.available_bytes()
    procs = f" and {workers:,} worker processes (at least {format_bytes(WORKER_BYTES)} each)" if workers else ""
    advice = ("use fewer envs or fewer worker processes (processes, actors)" if workers
              else f"use fewer envs (at most about {int((room or 0) // per_env):,} in all)")
    check_memory(nbytes, f"num_train_envs={num_train_envs} and num_test_envs={num_test_envs}: holding {total:,} "
                         f"envs (at least {format_bytes(per_env)} each){procs}", advice, warn=warn, available=room,
                 stacklevel=4)


def workers_of(num_train_envs: int, num_test_envs: int, processes: int | None, actors: int | None) -> int:
    """Worker processes the trainer starts: ``processes`` per vector of envs (at most one per env), and the actors."""
    hosts = 0 if processes is None else min(processes, num_train_envs) + min(processes, num_test_envs)
    return hosts + (0 if actors is None else int(actors))


