"""The worker-process side of :class:`~marl_note.envs.subproc.SubprocVectorEnv`.

:func:`worker_main` is the body of one worker process: it builds its envs (one
:class:`~marl_note.envs.vector.AutoResetWorker` each), reports their shared-memory slot specs,
then serves ``shm`` / ``reset`` / ``step`` / ``close`` requests over its pipe (wire protocol in
:mod:`marl_note.envs.subproc`). The parent has the forkserver preload this module, so a worker
starts without re-importing numpy, gymnasium and pettingzoo. Factories arrive serialized with
cloudpickle. Before each env call the worker writes the env's index into ``progress`` (a shared
integer, -1 between calls), so a parent whose wait times out can name the env that is stuck.
"""
from __future__ import annotations

import pickle
import signal
import traceback
from multiprocessing import shared_memory as _shm
from typing import Any

import cloudpickle

import marl_note.envs.shared_memory as shm_slots
from marl_note.envs.vector import AutoResetWorker

__all__ = ["worker_main", "pack_error"]


def pack_error(env_index: int | None, exc: BaseException) -> tuple:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sent: BaseException | None = exc
    try:  # send the exception itself when it survives pickling, so the parent can re-raise its type
        pickle.loads(pickle.dumps(exc))
    except Exception:
        sent = None
    return "error", (env_index, sent, text)


def worker_main(conn: Any, parent_conn: Any, payload: Any, env_indices: list[int], progress: Any,
                state: bool = False) -> None:
    """Body of one worker process: build the envs (reporting their global state with ``state``), then
    serve requests until "close"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    if parent_conn is not None:  # fork: drop the inherited parent end so a dead parent gives EOF
        parent_conn.close()
    workers: dict[int, AutoResetWorker] = {}
    shm: _shm.SharedMemory | None = None
    views: dict[int, Any] = {}  # env index -> its shared-memory slots
    try:
        try:
            specs = _build_envs(payload, env_indices, progress, workers, state)
        except BaseException as exc:  # everything is reported to the parent
            busy = int(progress.value)
            conn.send(pack_error(busy if busy >= 0 else None, exc))
            return
        progress.value = -1
        conn.send(("spaces", specs))
        while True:
            try:
                cmd, arg = conn.recv()
            except (EOFError, OSError):  # parent is gone
                return
            if cmd == "close":
                break
            if cmd == "shm":
                name, layout = arg
                if name is not None:
                    shm = _shm.SharedMemory(name=name)
                    views = dict(zip(env_indices, shm_slots.views(shm.buf, layout)))
                conn.send(("ok", None))
                continue
            _send_answer(conn, *_run_envs(cmd, arg, workers, views, progress))
    finally:
        for w in workers.values():
            try:
                w.close()
            except Exception:  # closing is best effort
                pass
        views.clear()  # drop every view into the block before closing it
        if shm is not None:
            try:
                shm.close()
            except BufferError:  # a view survived somewhere; the OS unmaps at exit anyway
                pass
        try:
            conn.send(("closed", None))
        except Exception:
            pass
        conn.close()


def _build_envs(payload: Any, env_indices: list[int], progress: Any,
                workers: dict[int, AutoResetWorker], state: bool = False) -> list[dict[str, Any]]:
    """Build one AutoResetWorker per env into ``workers`` (filled in place, so the caller closes the
    ones built before a failure) and return each env's shared-memory slot specs, agent -> spec.
    ``progress`` names the env being built or inspected."""
    env_fns = cloudpickle.loads(payload) if isinstance(payload, bytes) else payload
    for i, fn in zip(env_indices, env_fns):
        progress.value = i
        workers[i] = AutoResetWorker(fn, state=state)
    specs = []
    for i, w in workers.items():
        progress.value = i
        obs_spaces, _ = w.adapter.raw_spaces()
        spec = {}
        for agent, space in obs_spaces.items():
            slot = shm_slots.slot_spec(space)
            if slot is not None:
                spec[agent] = slot
        specs.append(spec)
    return specs


def _run_envs(cmd: str, arg: Any, workers: dict[int, AutoResetWorker], views: dict[int, Any],
              progress: Any) -> tuple[list[tuple[int, Any]], tuple | None]:
    """Run one "reset" or "step" request: ``[(env_index, StepResult), ...]`` with the observations
    that fit written into shared-memory slots, and the first failing env's packed error (or None)."""
    results, error = [], None
    for i, a in arg:  # a is a seed for "reset", an actions dict for "step"
        progress.value = i
        try:
            res = workers[i].reset(seed=a) if cmd == "reset" else workers[i].step(a)
        except Exception as exc:
            if error is None:
                error = pack_error(i, exc)
            continue
        slots = views.get(i)
        if slots:
            res.obs = shm_slots.to_slots(res.obs, slots, 0)
            if res.final_obs:
                res.final_obs = shm_slots.to_slots(res.final_obs, slots, 1)
        results.append((i, res))
    progress.value = -1
    return results, error


def _send_answer(conn: Any, results: list[tuple[int, Any]], error: tuple | None) -> None:
    """The error if an env failed, else the results (or why they cannot be sent)."""
    if error is not None:
        conn.send(error)
        return
    try:
        conn.send(("ok", results))
    except Exception as exc:  # e.g. an unpicklable info value
        conn.send(pack_error(results[0][0] if results else None, exc))
