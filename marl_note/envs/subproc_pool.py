"""Starting and stopping the worker processes of :class:`~marl_note.envs.subproc.SubprocVectorEnv`.

:func:`start_context` picks the multiprocessing start method (default ``"forkserver"`` where the
platform has it, else ``"spawn"``) and has a forkserver preload the worker module;
:func:`serialize_factories` sends env factories with cloudpickle and names the one that cannot
travel; :func:`shutdown` stops every worker and unlinks the shared memory (idempotent, and run at
interpreter exit). The request/reply protocol with running workers is in
:mod:`marl_note.envs.subproc`.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import cloudpickle

from marl_note.envs.subproc_worker import worker_main

__all__ = ["DEFAULT_CONTEXT", "start_context", "serialize_factories", "shutdown"]

DEFAULT_CONTEXT = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
_WORKER_MODULE = worker_main.__module__  # what a worker process imports (preloaded by the forkserver)


def start_context(context: str | Any | None) -> Any:
    """The multiprocessing context for ``context`` (a start method name, a context, or None: the default).

    A forkserver context is asked to preload the worker module first.

    Example:
        >>> start_context("spawn").get_start_method()
        'spawn'
    """
    # Any: typeshed's BaseContext, which get_context returns, declares no Process (every real context has one)
    ctx: Any = context
    if context is None or isinstance(context, str):
        ctx = mp.get_context(context or DEFAULT_CONTEXT)
    if ctx.get_start_method() == "forkserver":
        _preload_forkserver(ctx)
    return ctx


def _preload_forkserver(ctx: Any) -> None:
    """Have the forkserver import the worker module (numpy, gymnasium, pettingzoo) once, before it forks.

    Worker processes then start in ~0.1 s instead of re-importing everything (~1 s each). Only takes
    effect if the forkserver is not running yet; other existing preload entries are kept.
    Workers do not need the user's ``__main__`` (factories travel by value), so it is left out of
    the preload: a forkserver that imported it would run the body of a script without the
    ``__main__`` guard where nothing reports it.
    """
    from multiprocessing import forkserver
    current = list(getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None) or [])
    wanted = [m for m in current if m != "__main__"] + ([] if _WORKER_MODULE in current else [_WORKER_MODULE])
    if wanted != current:
        try:
            ctx.set_forkserver_preload(wanted)
        except Exception:  # an optimisation only
            pass


def serialize_factories(env_fns: list, group: list[int]) -> bytes:
    """The factories of ``group`` pickled with cloudpickle; TypeError naming the first one that cannot be."""
    try:
        return cloudpickle.dumps([env_fns[i] for i in group])
    except Exception:  # find the culprit for the message
        for i in group:
            try:
                cloudpickle.dumps(env_fns[i])
            except Exception as exc:
                raise TypeError(
                    f"env factory #{i} ({env_fns[i]!r}) cannot be sent to a worker process: cloudpickle "
                    f"failed with {type(exc).__name__}: {exc}. Everything the factory refers to (arguments, "
                    f"closure variables, globals of __main__) travels with it; create objects that cannot "
                    f"be serialized (locks, open files, sockets, env instances) inside the factory") from exc
        raise


def shutdown(state: dict) -> None:
    """Stop all worker processes and free shared memory (idempotent; also run at exit).

    Workers listed in ``state["kill"]`` (stuck ones) are killed at once; the others are asked to
    close and terminated if they have not within 2 s.
    """
    if state.get("done"):
        return
    state["done"] = True
    procs, conns, kill = state["procs"], state["conns"], state["kill"]
    for p, (proc, conn) in enumerate(zip(procs, conns)):
        if p in kill:
            proc.kill()
        elif proc.is_alive():
            try:
                conn.send(("close", None))
            except Exception:  # broken pipe: terminate below
                pass
    deadline = time.monotonic() + 2.0
    for proc, conn in zip(procs, conns):
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=1.0)
        if proc.is_alive():
            proc.kill()
            proc.join()
        conn.close()
    state["views"].clear()
    for shm in state["shms"]:
        try:
            shm.close()
        except BufferError:  # a caller still holds a view; unlinking is what frees the name
            pass
        try:
            shm.unlink()
        except FileNotFoundError:
            pass
    state["shms"].clear()
