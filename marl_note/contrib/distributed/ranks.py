"""Start the ranks of a multi-process run on this machine: :func:`launch`, ``torchrun``'s local twin.

Framework-free. :func:`launch` starts ``world_size`` local processes with the environment
variables ``torchrun`` sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), so a script written for one runs under the other, and watches them: one that
fails ends the run with :class:`RankFailedError`. The rank context the trainer reads,
:class:`~marl_note.distributed.DistributedContext`, is re-exported here.

Example:
    >>> launch(pow, 2, 2, 5)                # two local ranks, each computing pow(2, 5)
    [32, 32]
"""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from marl_note.distributed import Collective, DistributedContext, env_rank_info
from marl_note.envs.main_guard import main_not_reimported

__all__ = ["Collective", "DistributedContext", "RankFailedError", "launch", "free_port", "env_rank_info"]


class RankFailedError(RuntimeError):
    """A rank of a :func:`launch` failed first: ``rank``, ``exitcode`` and its ``traceback`` (text, empty
    for a crash or kill); ``others`` maps each rank that failed after it, within the grace period
    (typically of the lost peer: :class:`~marl_note.distributed.RankLostError`), to its last error line."""

    def __init__(self, rank: int, exitcode: int | None, tb: str = "", others: dict[int, str] | None = None):
        self.rank, self.exitcode, self.traceback = rank, exitcode, tb
        self.others = dict(others or {})
        how = f"exited with code {exitcode}" if exitcode is not None else "failed"
        msg = f"rank {rank} {how}; the other ranks were stopped"
        msg += "".join(f"\n  rank {r} then: {line}" for r, line in sorted(self.others.items()))
        super().__init__(msg + (f"\nrank {rank}'s traceback:\n{tb}" if tb else ""))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the launcher

def _run_rank(payload: bytes, rank: int, world_size: int, env: dict[str, str], conn: Connection) -> None:
    """A child's body: set the rank's environment, run the function, send back its result or traceback."""
    import cloudpickle

    os.environ.update(env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size))
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        result = fn(*args, **kwargs)
        conn.send(("ok", cloudpickle.dumps(result)))
    except BaseException:  # noqa: BLE001 - every failure goes back to the launcher as text
        conn.send(("error", traceback.format_exc()))
        conn.close()
        os._exit(1)
    conn.close()


def launch(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float | None = None,
           master_addr: str = "127.0.0.1", master_port: int | None = None, grace: float = 10.0,
           **kwargs: Any) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in ``world_size`` new local processes (spawned); their results, by rank.

    Each process gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` / ``MASTER_PORT``
    (a free port unless given) and, unless already set, ``OMP_NUM_THREADS=1``, as under
    ``torchrun``; ``fn`` and its arguments travel with cloudpickle (lambdas and closures work).
    ``fn`` typically calls the backend's ``init_distributed()`` first. The launcher watches every
    child: when one fails (an exception, a crash, a kill) the others get ``grace`` seconds to fail
    on their own (a collective with a dead peer raises), then are terminated, and
    :class:`RankFailedError` names the first failed rank, its exit code and traceback, and what the
    others said. ``timeout`` (seconds, None: none) bounds the whole run, raising
    :class:`TimeoutError` after terminating all.
    """
    import cloudpickle

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    for name, value in (("timeout", timeout), ("grace", grace)):
        if value is not None and not value >= 0:
            raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    payload = cloudpickle.dumps((fn, args, kwargs))
    env = {"MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port or free_port(master_addr))}
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    ctx = mp.get_context("spawn")
    procs, conns = [], []
    try:
        for rank in range(world_size):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_run_rank, args=(payload, rank, world_size, env, child),
                            name=f"marl_note-rank{rank}", daemon=False)
            with main_not_reimported():  # fn travels by value: the ranks need not re-run the user's script
                p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        return _watch(procs, conns, None if timeout is None else time.monotonic() + timeout, grace)
    finally:
        _stop_all(procs)
        for c in conns:
            c.close()


def _outcome(conn: Connection, proc: Any, ready: list[Any]) -> tuple[str, Any] | None:
    """``("ok", result bytes)``, ``("error", traceback)``, ``("died", "")``, or None while running."""
    if conn in ready or conn.poll():
        try:
            return conn.recv()
        except EOFError:  # closed without a word: the process died
            return "died", ""
    if proc.sentinel in ready:
        return "died", ""
    return None


def _watch(procs: list[Any], conns: list[Connection], deadline: float | None, grace: float) -> list[Any]:
    import cloudpickle

    results: dict[int, Any] = {}
    failures: dict[int, tuple[int | None, str]] = {}  # in the order they were seen
    pending = dict(enumerate(conns))
    grace_end = 0.0  # set at the first failure
    while pending:
        end = deadline
        if failures:
            end = grace_end if end is None else min(end, grace_end)
        wait_s = None if end is None else max(0.0, end - time.monotonic())
        ready = wait(list(pending.values()) + [procs[r].sentinel for r in pending], timeout=wait_s)
        if not ready:
            if failures:
                break
            raise TimeoutError(f"the distributed run did not finish in time; ranks {sorted(pending)} were still "
                               f"running and were terminated")
        seen = []
        for rank in list(pending):
            outcome = _outcome(pending[rank], procs[rank], ready)
            if outcome is None:
                continue
            del pending[rank]
            kind, body = outcome
            if kind == "ok":
                results[rank] = cloudpickle.loads(body)
                continue
            procs[rank].join(5)
            seen.append((kind == "error", rank, body))
        if seen and not failures:
            grace_end = time.monotonic() + grace
        for _, rank, body in sorted(seen):  # a crash before the errors it caused in its peers
            failures[rank] = (procs[rank].exitcode, body)
    if failures:
        first, (code, tb) = next(iter(failures.items()))
        others = {r: (t.strip().splitlines() or [f"exited with code {c}"])[-1]
                  for r, (c, t) in failures.items() if r != first}
        raise RankFailedError(first, code, tb, others)
    for p in procs:
        p.join(30)
    return [results[r] for r in range(len(procs))]


def _stop_all(procs: list[Any]) -> None:
    """Terminate what is still running (SIGTERM, then SIGKILL after 5 s) and reap every child."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + 5
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)
