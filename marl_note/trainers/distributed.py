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

__all__ = ["Collective", "DistributedContext", "RankFailedError", "launch", "free_port", "env_rank_info"]


class RankFailedError(RuntimeError):
    """A rank of a :func:`launch` failed; ``rank``, ``exitcode`` and its ``traceback`` (text, may be empty)."""

    def __init__(self, rank: int, exitcode: int | None, tb: str = ""):
        self.rank, self.exitcode, self.traceback = rank, exitcode, tb
        how = f"exited with code {exitcode}" if exitcode is not None else "failed"
        msg = f"rank {rank} {how}; the other ranks were terminated"
        super().__init__(msg + (f". Its traceback:\n{tb}" if tb else ""))


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
           master_addr: str = "127.0.0.1", master_port: int | None = None, **kwargs: Any) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in ``world_size`` new local processes (spawned); their results, by rank.

    Each process gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` / ``MASTER_PORT``
    (a free port unless given) and, unless already set, ``OMP_NUM_THREADS=1``, as under
    ``torchrun``; ``fn`` and its arguments travel with cloudpickle (lambdas and closures work).
    ``fn`` typically calls the backend's ``init_distributed()`` first. The launcher watches every
    child: when one fails (an exception, a crash, a kill) the others are terminated and
    :class:`RankFailedError` names the first failed rank, its exit code and traceback. ``timeout``
    (seconds, None: none) bounds the whole run, raising :class:`TimeoutError` after terminating all.
    """
    import cloudpickle

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be positive or None, got {timeout!r}")
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
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        return _watch(procs, conns, None if timeout is None else time.monotonic() + timeout)
    finally:
        _stop_all(procs)
        for c in conns:
            c.close()


def _watch(procs: list[Any], conns: list[Connection], deadline: float | None) -> list[Any]:
    import cloudpickle

    results: dict[int, Any] = {}
    pending = dict(enumerate(conns))
    while len(results) < len(procs):
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        if wait_s == 0.0:
            raise TimeoutError(f"the distributed run did not finish in time; ranks {sorted(pending)} were still "
                               f"running and were terminated")
        ready = wait(list(pending.values()) + [procs[r].sentinel for r in pending], timeout=wait_s)
        for rank in list(pending):
            conn, proc = pending[rank], procs[rank]
            if conn in ready:
                try:
                    kind, body = conn.recv()
                except EOFError:  # closed without a word: the process died
                    proc.join(5)
                    raise RankFailedError(rank, proc.exitcode) from None
                if kind == "error":
                    proc.join(5)
                    raise RankFailedError(rank, proc.exitcode, body)
                results[rank] = cloudpickle.loads(body)
                del pending[rank]
            elif proc.sentinel in ready and not conn.poll():
                proc.join(5)
                raise RankFailedError(rank, proc.exitcode)
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
