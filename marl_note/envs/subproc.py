"""Subprocess vector env: the "pool network" transport of DESIGN.md section 2.

:class:`SubprocVectorEnv` speaks the same protocol as :class:`~marl_note.envs.vector.SyncVectorEnv`
(``num_envs``, ``reset(seed)``, ``step({env_index: actions})``, ``close()``) but hosts its envs in
``processes`` worker processes, each running several :class:`~marl_note.envs.vector.AutoResetWorker`
objects. A call sends one request to every process concerned before gathering any reply, so the
processes step their shares in parallel.

Wire protocol (parent <-> one worker process, over a ``multiprocessing`` pipe)::

    worker -> ("spaces", [per-env {agent: (shape, dtype)}])  after building its envs
    parent -> ("shm", name | None, layout)                     worker attaches, answers ("ok", None)
    parent -> ("reset", [(env_index, seed), ...])              answers ("ok", [(env_index, result)...])
    parent -> ("step", [(env_index, actions), ...])            same answer
    parent -> ("close", None)                                  worker closes its envs, answers, exits
    worker -> ("error", (env_index, exception | None, traceback_text))   instead of any answer

With shared memory, observations of agents whose (mask-stripped) observation space is a ``Box`` or
``Discrete`` (or ``MultiBinary``/``MultiDiscrete``) are written into preallocated slots (one per env and agent, for ``obs`` and for
``final_obs``) and replaced in the pickled :class:`StepResult` by a marker; the parent copies them
out of the slot. Anything that does not fit its slot exactly (dtype/shape) travels through the pipe.

The slots live in :mod:`marl_note.envs.shared_memory`, the worker-process loop in
:mod:`marl_note.envs.subproc_worker`; this module is the parent side.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import weakref
from multiprocessing import connection as mp_connection
from multiprocessing import shared_memory as _shm
from typing import Any, Callable, Sequence

import numpy as np

import marl_note.envs.shared_memory as shm_slots
from marl_note.envs.adapters import StepResult
from marl_note.envs.subproc_worker import worker_main

__all__ = ["SubprocVectorEnv", "WorkerError"]

_DEFAULT_CONTEXT = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
_POLL_S = 1.0  # how often a waiting parent re-checks that its workers are alive
_START_TIMEOUT_S = 60.0  # least time allowed for starting a worker process and building its envs
_WORKER_MODULE = worker_main.__module__  # what a worker process imports (preloaded by the forkserver)


class WorkerError(RuntimeError):
    """An exception raised inside a worker process whose original could not be sent back."""


# ----------------------------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------------------------

def _preload_forkserver(ctx: Any) -> None:
    """Have the forkserver import the worker module (numpy, gymnasium, pettingzoo) once, before it forks.

    Worker processes then start in ~0.1 s instead of re-importing everything (~1 s each). Only takes
    effect if the forkserver is not running yet; existing preload entries are kept.
    """
    from multiprocessing import forkserver
    current = list(getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None) or ["__main__"])
    if _WORKER_MODULE not in current:
        try:
            ctx.set_forkserver_preload(current + [_WORKER_MODULE])
        except Exception:  # noqa: BLE001 - an optimisation only
            pass


def _shutdown(state: dict) -> None:
    """Stop all worker processes and free shared memory (idempotent; also run at exit)."""
    if state.get("done"):
        return
    state["done"] = True
    procs, conns = state["procs"], state["conns"]
    for p, c in zip(procs, conns):
        if p.is_alive() and not state.get("hung"):
            try:
                c.send(("close", None))
            except Exception:  # noqa: BLE001 - broken pipe: terminate below
                pass
    for p, c in zip(procs, conns):
        p.join(timeout=0.0 if state.get("hung") else 2.0)
        if p.is_alive():
            p.terminate()
            p.join(timeout=1.0)
        if p.is_alive():
            p.kill()
            p.join()
        c.close()
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


class SubprocVectorEnv:
    """N envs spread over worker processes; same interface as ``SyncVectorEnv``.

    Envs are split into ``processes`` contiguous groups (default ``min(num_envs, os.cpu_count())``);
    each process hosts one :class:`~marl_note.envs.vector.AutoResetWorker` per env of its group.
    ``reset(seed)`` seeds env ``i`` with ``seed + i``; ``step({env_index: actions})`` advances only the listed envs. Results
    equal those of ``SyncVectorEnv`` for the same factories, seeds and actions.

    Factories are pickled to reach the workers under the default ``"forkserver"``/``"spawn"`` start
    method, so pass module-level functions or ``functools.partial`` objects (``tictactoe_v3.env``,
    ``partial(gym.make, "CartPole-v1")``); lambdas need ``context="fork"``. With ``shared_memory``,
    ``Box``/``Discrete`` observations come back through preallocated shared memory instead of the
    pipe. An exception in a worker is re-raised here with the env index and worker traceback; a
    worker process that dies raises ``RuntimeError``; ``timeout`` (seconds, default none) bounds
    every wait for a ``reset``/``step`` reply (start-up gets at least 60 s) and raises ``TimeoutError``. ``close()`` is idempotent and also runs at interpreter exit.

    Example:
        >>> from functools import partial
        >>> import gymnasium as gym
        >>> venv = SubprocVectorEnv([partial(gym.make, "CartPole-v1")] * 4, processes=2)
        >>> sorted(venv.reset(seed=0))
        [0, 1, 2, 3]
        >>> res = venv.step({0: {"agent_0": 1}, 3: {"agent_0": 0}})
        >>> sorted(res), venv.num_envs
        ([0, 3], 4)
        >>> venv.close()
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], processes: int | None = None,
                 shared_memory: bool = True, context: str | Any | None = None,
                 timeout: float | None = None):
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("a vector env needs at least one env")
        if processes is None:
            processes = os.cpu_count() or 1
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        processes = min(processes, len(env_fns))
        ctx = mp.get_context(context or _DEFAULT_CONTEXT) if context is None or isinstance(context, str) else context
        method = ctx.get_start_method()
        if method == "forkserver":
            _preload_forkserver(ctx)
        self._num_envs = len(env_fns)
        self.timeout = timeout
        self.context = method

        payloads: list[Any]
        groups = [[int(i) for i in g] for g in np.array_split(np.arange(len(env_fns)), processes)]
        if method == "fork":
            payloads = [[env_fns[i] for i in g] for g in groups]
        else:
            payloads = [self._pickle_factories(env_fns, g, method) for g in groups]

        # everything _shutdown needs lives in `state`, so the exit finalizer holds no reference to self
        self._state: dict = {"procs": [], "conns": [], "shms": [], "views": {}, "done": False}
        self._finalizer = weakref.finalize(self, _shutdown, self._state)
        self._where: dict[int, int] = {i: p for p, g in enumerate(groups) for i in g}
        self._groups = groups
        self._broken: str | None = None
        try:
            for p, (g, payload) in enumerate(zip(groups, payloads)):
                parent_conn, child_conn = ctx.Pipe()
                proc = ctx.Process(target=worker_main, name=f"SubprocVectorEnv-{p}", daemon=True,
                                   args=(child_conn, parent_conn if method == "fork" else None, payload, g))
                proc.start()
                child_conn.close()
                self._state["procs"].append(proc)
                self._state["conns"].append(parent_conn)
            # starting processes and building envs may legitimately take longer than one step
            start_timeout = None if timeout is None else max(timeout, _START_TIMEOUT_S)
            specs: list[list[dict]] = [self._recv(p, "spaces", start_timeout) for p in range(processes)]
            views = self._state["views"]
            for p, g in enumerate(groups):
                name, layout = None, None
                if shared_memory:
                    layout, size = shm_slots.layout(specs[p])
                    if size:
                        shm = _shm.SharedMemory(create=True, size=size)
                        self._state["shms"].append(shm)
                        name = shm.name
                        views.update(zip(g, shm_slots.views(shm.buf, layout)))
                self._state["conns"][p].send(("shm", (name, layout)))
            for p in range(processes):
                self._recv(p, "ok", start_timeout)
        except _RemoteError as exc:
            self.close()
            exc.reraise()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _pickle_factories(env_fns: list, group: list[int], method: str) -> bytes:
        try:
            return pickle.dumps([env_fns[i] for i in group])
        except Exception as exc:  # find the culprit for the message
            for i in group:
                try:
                    pickle.dumps(env_fns[i])
                except Exception:  # noqa: BLE001
                    raise TypeError(
                        f"env factory #{i} ({env_fns[i]!r}) cannot be pickled, which the {method!r} start method "
                        f"needs to send it to a worker process ({exc}). Pass a module-level function or a "
                        f"functools.partial (e.g. tictactoe_v3.env, partial(gym.make, 'CartPole-v1')), or "
                        f"context='fork' where fork is available.") from None
            raise

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def processes(self) -> int:
        return len(self._groups)

    # -- requests --------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> dict[int, StepResult]:
        per_proc = [[(i, None if seed is None else seed + i) for i in g] for g in self._groups]
        got = self._call("reset", per_proc)
        return {i: got[i] for i in range(self._num_envs)}

    def step(self, actions: dict[int, dict[str, Any]]) -> dict[int, StepResult]:
        per_proc: list[list] = [[] for _ in self._groups]
        for i, a in actions.items():
            if i not in self._where:
                raise IndexError(f"env index {i} out of range for {self._num_envs} envs")
            per_proc[self._where[i]].append((i, a))
        got = self._call("step", per_proc)
        return {i: got[i] for i in actions}

    def _call(self, cmd: str, per_proc: list[list]) -> dict[int, StepResult]:
        self._check_usable()
        conns = self._state["conns"]
        busy = [p for p, reqs in enumerate(per_proc) if reqs]
        for p in busy:  # send everything first, so processes work in parallel ...
            try:
                conns[p].send((cmd, per_proc[p]))
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self._dead(p)
        out: dict[int, StepResult] = {}
        error = None
        views = self._state["views"]
        try:
            for p in busy:  # ... then gather every reply (even after an error, to keep pipes in step)
                try:
                    results = self._recv(p, "ok")
                except _RemoteError as exc:
                    error = error or exc
                    continue
                for i, res in results:
                    slots = views.get(i)
                    if slots:
                        res.obs = shm_slots.from_slots(res.obs, slots, 0)
                        if res.final_obs:
                            res.final_obs = shm_slots.from_slots(res.final_obs, slots, 1)
                    out[i] = res
        except BaseException as exc:  # e.g. KeyboardInterrupt: unread replies would desynchronise the pipes
            if not self._broken:
                self._broken = f"interrupted while waiting for workers ({type(exc).__name__})"
            raise
        if error is not None:
            error.reraise()
        return out

    def _recv(self, p: int, expect: str, timeout: float | None = -1.0) -> Any:
        """Wait for process ``p``'s reply, watching for its death and for ``timeout``."""
        conn, proc = self._state["conns"][p], self._state["procs"][p]
        timeout = self.timeout if timeout == -1.0 else timeout
        waited = 0.0
        while True:
            step = _POLL_S if timeout is None else min(_POLL_S, timeout - waited)
            ready = mp_connection.wait([conn, proc.sentinel], timeout=max(step, 0.0))
            if conn in ready or conn.poll(0):
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError, ConnectionResetError):
                    self._dead(p)
                break
            if ready or not proc.is_alive():
                self._dead(p)
            waited += step
            if timeout is not None and waited >= timeout:
                self._broken = f"worker process {p} did not answer within {timeout} s"
                self._state["hung"] = True  # close() terminates instead of asking politely
                raise TimeoutError(f"SubprocVectorEnv: {self._broken} (envs {self._groups[p]}); "
                                   f"the vector env is unusable, close() it")
        if kind == "error":
            raise _RemoteError(p, *payload)
        if kind != expect:
            self._broken = f"protocol error: worker process {p} sent {kind!r}, expected {expect!r}"
            raise RuntimeError(f"SubprocVectorEnv: {self._broken}")
        return payload

    def _dead(self, p: int) -> None:
        proc = self._state["procs"][p]
        proc.join(timeout=0.5)
        self._broken = (f"worker process {p} (pid {proc.pid}, envs {self._groups[p]}) died "
                        f"with exit code {proc.exitcode} (its stderr may say why)")
        raise RuntimeError(f"SubprocVectorEnv: {self._broken}; the vector env is unusable, close() it")

    def _check_usable(self) -> None:
        if self._state["done"]:
            raise RuntimeError("SubprocVectorEnv is closed")
        if self._broken:
            raise RuntimeError(f"SubprocVectorEnv is unusable: {self._broken}")

    def close(self) -> None:
        """Close every env and stop the worker processes (safe to call more than once)."""
        self._finalizer()

    def __enter__(self) -> "SubprocVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._state["done"] else f"{self.processes} processes"
        return f"SubprocVectorEnv(num_envs={self._num_envs}, {state}, context={self.context!r})"


class _RemoteError(Exception):
    """Internal: a worker reported an exception; ``reraise`` raises it for the user."""

    def __init__(self, proc: int, env_index: int | None, exc: BaseException | None, text: str):
        super().__init__(text)
        self.proc, self.env_index, self.exc, self.text = proc, env_index, exc, text

    def reraise(self) -> None:
        where = f"env {self.env_index}" if self.env_index is not None else "setup"
        note = f"raised in SubprocVectorEnv worker process {self.proc} ({where}); worker traceback:\n{self.text}"
        if self.exc is not None and not isinstance(self.exc, KeyboardInterrupt):
            exc = self.exc
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(note)
                raise exc
            raise WorkerError(f"{type(exc).__name__}: {exc}\n{note}") from exc
        raise WorkerError(note)
