"""Subprocess vector env: envs stepped in parallel in a pool of worker processes.

:class:`SubprocVectorEnv` speaks the same protocol as :class:`~marl_note.envs.vector.SyncVectorEnv`
(``num_envs``, ``reset(seed)``, ``step({env_index: actions})``, ``close()``) but hosts its envs in
``processes`` worker processes, each running several :class:`~marl_note.envs.vector.AutoResetWorker`
objects. A call sends one request to every process concerned before gathering any reply, so the
processes step their shares in parallel.

Factories travel to the workers serialized with cloudpickle (as Gymnasium's async vector env sends
them), so Gymnasium ids, lambdas, closures (every PettingZoo ``parallel_env``) and partials all
work; functions and classes of the user's ``__main__`` are sent by value. Every wait for a worker is
bounded by ``timeout``: a worker that does not answer in time is killed and reaped, the whole pool
is shut down (shared memory unlinked) and :class:`EnvTimeoutError` names the env, the worker pid
and the call. A worker that finds itself re-running a script without the ``__main__`` guard stops,
and the parent raises :class:`~marl_note.envs.main_guard.MissingMainGuardError`.

Wire protocol (parent <-> one worker process, over a ``multiprocessing`` pipe)::

    worker -> ("spaces", [per-env {agent: (shape, dtype)}])  after building its envs
    parent -> ("shm", name | None, layout)                     worker attaches, answers ("ok", None)
    parent -> ("reset", [(env_index, seed), ...])              answers ("ok", [(env_index, result)...])
    parent -> ("step", [(env_index, actions), ...])            same answer
    parent -> ("close", None)                                  worker closes its envs, answers, exits
    worker -> ("error", (env_index, exception | None, traceback_text))   instead of any answer

With shared memory, observations of agents whose (mask-stripped) observation space is a ``Box`` or
``Discrete`` (or ``MultiBinary``/``MultiDiscrete``) are written into preallocated slots (one per env
and agent, for ``obs`` and for ``final_obs``) and replaced in the pickled :class:`StepResult` by a
marker; the parent copies them out of the slot. Anything that does not fit its slot exactly
(dtype/shape) travels through the pipe. With ``state=True`` the workers' envs report their global
state (``StepResult.state``/``final_state``), which travels through the pipe (a few hundred bytes
for the envs that have one).

The slots live in :mod:`marl_note.envs.shared_memory`, the worker-process loop in
:mod:`marl_note.envs.subproc_worker`, the errors in :mod:`marl_note.envs.subproc_errors`, starting
and stopping the worker processes in :mod:`marl_note.envs.subproc_pool`; this module is the parent
side of the protocol.
"""
from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing import connection as mp_connection
from multiprocessing import shared_memory as _shm
from typing import Any

import numpy as np

import marl_note.envs.shared_memory as shm_slots
from marl_note.envs.adapters import StepResult
from marl_note.envs.main_guard import (
    GUARD_ADVICE,
    GUARD_EXIT_CODE,
    WORKER_NAME_PREFIX,
    MissingMainGuardError,
    check_not_reimporting_main,
)
from marl_note.envs.subproc_errors import EnvTimeoutError, Expired, RemoteError, WorkerError, check_timeout
from marl_note.envs.subproc_pool import serialize_factories, shutdown, start_context
from marl_note.envs.subproc_worker import worker_main

__all__ = ["SubprocVectorEnv", "WorkerError", "EnvTimeoutError", "MissingMainGuardError", "DEFAULT_STEP_TIMEOUT"]

_POLL_S = 1.0  # how often a waiting parent re-checks that its workers are alive
_START_TIMEOUT_S = 60.0  # least time allowed for starting a worker process and building its envs
# An env step or reset takes milliseconds (a slow simulator: a second); a minute without an answer
# means the env is stuck, and raising then beats training that silently stops.
DEFAULT_STEP_TIMEOUT = 60.0


class SubprocVectorEnv:
    """N envs spread over worker processes; same interface as ``SyncVectorEnv``.

    Envs are split into ``processes`` contiguous groups (default ``min(num_envs, os.cpu_count())``);
    each process hosts one :class:`~marl_note.envs.vector.AutoResetWorker` per env of its group.
    ``reset(seed)`` seeds env ``i`` with ``seed + i``; ``step({env_index: actions})`` advances only the
    listed envs. Results equal those of ``SyncVectorEnv`` for the same factories, seeds and actions.

    Factories of any form (``tictactoe_v3.env``, ``simple_spread_v3.parallel_env``, lambdas,
    closures, partials) reach the workers through cloudpickle. A script that creates one must keep
    its body under ``if __name__ == "__main__":`` (the default ``"forkserver"``/``"spawn"`` start
    methods import the main script in every worker); without the guard the workers stop and this
    raises :class:`~marl_note.envs.main_guard.MissingMainGuardError`. With ``shared_memory``,
    ``Box``/``Discrete`` observations come back through preallocated shared memory instead of the
    pipe. An exception in a worker is re-raised here with the env index and worker traceback; a
    worker process that dies raises ``RuntimeError``. ``timeout`` (seconds, default 60; None: no
    bound) bounds every wait for a worker's answer (start-up gets at least 60 s): on expiry the stuck
    workers are killed, the pool is closed and :class:`EnvTimeoutError` names the env, worker pid and
    call. ``close()`` is idempotent and also runs at interpreter exit. ``state=True``: results carry
    each env's global state, as in ``SyncVectorEnv``.

    Example:
        >>> import gymnasium as gym
        >>> venv = SubprocVectorEnv([lambda: gym.make("CartPole-v1")] * 4, processes=2)
        >>> sorted(venv.reset(seed=0))
        [0, 1, 2, 3]
        >>> res = venv.step({0: {"agent_0": 1}, 3: {"agent_0": 0}})
        >>> sorted(res), venv.num_envs
        ([0, 3], 4)
        >>> venv.close()
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], processes: int | None = None,
                 shared_memory: bool = True, context: str | Any | None = None,
                 timeout: float | None = DEFAULT_STEP_TIMEOUT, state: bool = False):
        check_not_reimporting_main("SubprocVectorEnv")
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("a vector env needs at least one env")
        if processes is None:
            processes = os.cpu_count() or 1
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        self.timeout = check_timeout("timeout", timeout)
        processes = min(processes, len(env_fns))
        ctx = start_context(context)
        method = ctx.get_start_method()
        self._num_envs = len(env_fns)
        self.context = method
        self.state = bool(state)

        payloads: list[Any]
        groups = [[int(i) for i in g] for g in np.array_split(np.arange(len(env_fns)), processes)]
        if method == "fork":
            payloads = [[env_fns[i] for i in g] for g in groups]
        else:
            payloads = [serialize_factories(env_fns, g) for g in groups]

        # everything shutdown needs lives in `state`, so the exit finalizer holds no reference to self
        self._state: dict = {"procs": [], "conns": [], "shms": [], "views": {}, "done": False, "kill": set(),
                             "progress": []}
        self._finalizer = weakref.finalize(self, shutdown, self._state)
        self._where: dict[int, int] = {i: p for p, g in enumerate(groups) for i in g}
        self._groups = groups
        self._broken: str | None = None
        try:
            for p, (g, payload) in enumerate(zip(groups, payloads)):
                parent_conn, child_conn = ctx.Pipe()
                progress = ctx.RawValue("q", -1)  # the env the worker is busy with, for timeout reports
                proc = ctx.Process(target=worker_main, name=f"{WORKER_NAME_PREFIX}-{p}", daemon=True,
                                   args=(child_conn, parent_conn if method == "fork" else None, payload, g, progress,
                                         self.state))
                proc.start()
                child_conn.close()
                self._state["procs"].append(proc)
                self._state["conns"].append(parent_conn)
                self._state["progress"].append(progress)
            # starting processes and building envs may legitimately take longer than one step
            start_bound = None if self.timeout is None else max(self.timeout, _START_TIMEOUT_S)
            everyone = list(range(processes))
            specs = self._gather(everyone, "spaces", start_bound, "start")
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
            self._gather(everyone, "ok", start_bound, "start")
        except RemoteError as exc:
            self.close()
            exc.reraise()
        except BaseException:
            self.close()
            raise

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def processes(self) -> int:
        return len(self._groups)

    @property
    def closed(self) -> bool:
        """Whether the worker processes are gone (after ``close()``, a timeout or a dead worker)."""
        return self._state["done"]

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
        try:  # ... then gather every reply (even after an error, to keep pipes in step)
            replies = self._gather(busy, "ok", self.timeout, cmd)
        except RemoteError as exc:
            exc.reraise()
        except (EnvTimeoutError, RuntimeError):  # the pool is already closed and marked unusable
            raise
        except BaseException as exc:  # e.g. KeyboardInterrupt: unread replies would desynchronise the pipes
            if not self._broken:
                self._broken = f"interrupted while waiting for workers ({type(exc).__name__})"
            raise
        out: dict[int, StepResult] = {}
        views = self._state["views"]
        for p in busy:
            for i, res in replies[p]:
                slots = views.get(i)
                if slots:
                    res.obs = shm_slots.from_slots(res.obs, slots, 0)
                    if res.final_obs:
                        res.final_obs = shm_slots.from_slots(res.final_obs, slots, 1)
                out[i] = res
        return out

    def _gather(self, procs: list[int], expect: str, bound: float | None, call: str) -> dict[int, Any]:
        """Every process's reply (all gathered, even after a worker reported an error), within ``bound`` s."""
        deadline = None if bound is None else time.monotonic() + bound
        conns = self._state["conns"]
        out, error = {}, None
        for k, p in enumerate(procs):
            try:
                out[p] = self._recv(p, expect, deadline)
            except RemoteError as exc:
                error = error or exc
            except Expired:  # (raised only against a deadline, so bound is not None)
                assert bound is not None
                stuck = [q for q in procs[k:] if q == p or not conns[q].poll(0)]
                self._timed_out(call, stuck, bound)
        if error is not None:
            raise error
        return out

    def _recv(self, p: int, expect: str, deadline: float | None) -> Any:
        """Wait for process ``p``'s reply, watching for its death and for the ``deadline``."""
        conn, proc = self._state["conns"][p], self._state["procs"][p]
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            ready = mp_connection.wait([conn, proc.sentinel], timeout=max(wait, 0.0))
            if conn in ready or conn.poll(0):
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError, ConnectionResetError):
                    kind = None  # the worker is gone; report it outside this handler
                if kind is None:
                    self._dead(p)
                break
            if ready or not proc.is_alive():
                self._dead(p)
            if deadline is not None and time.monotonic() >= deadline:
                raise Expired()
        if kind == "error":
            raise RemoteError(p, *payload)
        if kind != expect:
            self._broken = f"protocol error: worker process {p} sent {kind!r}, expected {expect!r}"
            raise RuntimeError(f"SubprocVectorEnv: {self._broken}")
        return payload

    def _timed_out(self, call: str, stuck: list[int], bound: float) -> None:
        """Kill the ``stuck`` workers, close the pool and raise :class:`EnvTimeoutError`."""
        state = self._state
        parts, envs, pids = [], [], []
        what = "start-up (building the env)" if call == "start" else call
        for q in stuck:
            now = int(state["progress"][q].value)
            idx = [now] if now >= 0 else list(self._groups[q])
            pid = state["procs"][q].pid
            envs += idx
            pids.append(pid)
            where = f"env {idx[0]}" if len(idx) == 1 else f"envs {idx}"
            parts.append(f"{where} did not finish {what} within {bound} s (worker process {q}, pid {pid})")
        self._broken = "; ".join(parts)
        state["kill"].update(stuck)
        self._finalizer()  # kill and reap now, unlink shared memory
        raise EnvTimeoutError(
            f"SubprocVectorEnv: {self._broken}. The bound is the trainer's step_timeout (SubprocVectorEnv's "
            f"timeout); {'the stuck worker was' if len(stuck) == 1 else 'the stuck workers were'} killed and "
            f"the vector env closed. An env that needs longer needs a larger step_timeout (None: no bound)",
            envs, pids, call, bound)

    def _dead(self, p: int) -> None:
        proc = self._state["procs"][p]
        proc.join(timeout=0.5)
        if proc.exitcode == GUARD_EXIT_CODE:
            self._broken = f"worker process {p} (pid {proc.pid}) re-ran the main script, which has no __main__ guard"
            self._finalizer()
            raise MissingMainGuardError(
                f"SubprocVectorEnv: worker process {p} (pid {proc.pid}) stopped because it was running the main "
                f"script again: every worker process imports the script that started it, and this one has "
                f"no `if __name__ == \"__main__\":` guard; {GUARD_ADVICE}")
        self._broken = (f"worker process {p} (pid {proc.pid}, envs {self._groups[p]}) died "
                        f"with exit code {proc.exitcode} (its stderr may say why)")
        self._finalizer()
        raise RuntimeError(f"SubprocVectorEnv: {self._broken}; the vector env is unusable")

    def _check_usable(self) -> None:
        if self._broken:
            raise RuntimeError(f"SubprocVectorEnv is unusable: {self._broken}")
        if self._state["done"]:
            raise RuntimeError("SubprocVectorEnv is closed")

    def close(self) -> None:
        """Close every env and stop the worker processes (safe to call more than once)."""
        self._finalizer()

    def __enter__(self) -> SubprocVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._state["done"] else f"{self.processes} processes"
        return f"SubprocVectorEnv(num_envs={self._num_envs}, {state}, context={self.context!r})"
