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
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import traceback
import weakref
from multiprocessing import connection as mp_connection
from multiprocessing import shared_memory as _shm
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from marl_note.envs.adapters import StepResult
from marl_note.envs.vector import AutoResetWorker

__all__ = ["SubprocVectorEnv", "WorkerError"]

_DEFAULT_CONTEXT = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
_POLL_S = 1.0  # how often a waiting parent re-checks that its workers are alive
_START_TIMEOUT_S = 60.0  # least time allowed for starting a worker process and building its envs


class WorkerError(RuntimeError):
    """An exception raised inside a worker process whose original could not be sent back."""


class _Marker:
    """Stands for an observation that travelled through shared memory (pickled by reference)."""

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_IN_SHM_ARRAY = _Marker("_IN_SHM_ARRAY")    # an ndarray: parent returns a copy of the slot
_IN_SHM_SCALAR = _Marker("_IN_SHM_SCALAR")  # a numpy scalar (e.g. np.int64 of a Discrete space)


# ----------------------------------------------------------------------------------------------
# shared-memory layout
# ----------------------------------------------------------------------------------------------

def _slot_spec(space: gym.Space) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of a shared-memory slot for an observation space, or None if it has none.

    The action mask is stripped the way the adapters strip it: ``Dict(observation=..., action_mask=...)``
    becomes its ``observation`` space.
    """
    if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
        rest = [k for k in space.spaces if k != "action_mask"]
        if rest != ["observation"]:
            return None
        space = space.spaces["observation"]
    if isinstance(space, gym.spaces.Box):
        return tuple(int(n) for n in space.shape), np.dtype(space.dtype).str
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(space.dtype).str
    if isinstance(space, (gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return tuple(int(n) for n in space.shape), np.dtype(space.dtype).str
    return None


def _layout(env_specs: list[dict[str, tuple]]) -> tuple[list[dict[str, tuple]], int]:
    """Byte offsets of every (env, agent) obs and final-obs slot in one block.

    Returns ``[{agent: (shape, dtype, obs_offset, final_offset)}] per env`` and the block size.
    """
    layout, offset = [], 0
    for spec in env_specs:
        env_layout = {}
        for agent, (shape, dtype) in spec.items():
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            align = 64  # keep every slot cache-line aligned
            obs_off = offset
            final_off = obs_off + -(-nbytes // align) * align
            offset = final_off + -(-nbytes // align) * align
            env_layout[agent] = (shape, dtype, obs_off, final_off)
        layout.append(env_layout)
    return layout, offset


def _views(buf: Any, layout: list[dict[str, tuple]]) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """numpy views ``[{agent: (obs_slot, final_slot)}]`` into a shared block."""
    out = []
    for env_layout in layout:
        out.append({agent: (np.ndarray(shape, dtype, buf, obs_off), np.ndarray(shape, dtype, buf, final_off))
                    for agent, (shape, dtype, obs_off, final_off) in env_layout.items()})
    return out


def _to_slots(values: dict[str, Any], slots: dict[str, tuple], which: int) -> dict[str, Any]:
    """Write what fits into shared slots; return the dict with markers in their place."""
    out = {}
    for agent, value in values.items():
        slot = slots.get(agent)
        if slot is not None:
            slot = slot[which]
            if isinstance(value, np.ndarray) and value.dtype == slot.dtype and value.shape == slot.shape:
                slot[...] = value
                value = _IN_SHM_ARRAY
            elif isinstance(value, np.generic) and value.dtype == slot.dtype and slot.shape == ():
                slot[...] = value
                value = _IN_SHM_SCALAR
        out[agent] = value
    return out


def _from_slots(values: dict[str, Any], slots: dict[str, tuple], which: int) -> dict[str, Any]:
    """Inverse of :func:`_to_slots` (copies, since the slot is overwritten by the next step)."""
    out = {}
    for agent, value in values.items():
        if value is _IN_SHM_ARRAY:
            value = slots[agent][which].copy()
        elif value is _IN_SHM_SCALAR:
            value = slots[agent][which][()]
        out[agent] = value
    return out


# ----------------------------------------------------------------------------------------------
# worker process
# ----------------------------------------------------------------------------------------------

def _pack_error(env_index: int | None, exc: BaseException) -> tuple:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:  # send the exception itself when it survives pickling, so the parent can re-raise its type
        pickle.loads(pickle.dumps(exc))
    except Exception:
        exc = None
    return "error", (env_index, exc, text)


def _worker_main(conn: Any, parent_conn: Any, payload: Any, env_indices: list[int]) -> None:
    """Body of one worker process: build the envs, then serve requests until "close"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    if parent_conn is not None:  # fork: drop the inherited parent end so a dead parent gives EOF
        parent_conn.close()
    workers: dict[int, AutoResetWorker] = {}
    shm, views, slots, res, results = None, {}, None, None, None
    current = None  # env index being built, for error reports
    try:
        try:
            env_fns = pickle.loads(payload) if isinstance(payload, bytes) else payload
            for i, fn in zip(env_indices, env_fns):
                current = i
                workers[i] = AutoResetWorker(fn)
            specs = []
            for i, w in workers.items():
                current = i
                obs_spaces, _ = w.adapter.raw_spaces()
                spec = {}
                for agent, space in obs_spaces.items():
                    slot = _slot_spec(space)
                    if slot is not None:
                        spec[agent] = slot
                specs.append(spec)
        except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
            conn.send(_pack_error(current, exc))
            return
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
                    views = dict(zip(env_indices, _views(shm.buf, layout)))
                conn.send(("ok", None))
                continue
            results, error = [], None
            for i, a in arg:  # a is a seed for "reset", an actions dict for "step"
                try:
                    res = workers[i].reset(seed=a) if cmd == "reset" else workers[i].step(a)
                except Exception as exc:  # noqa: BLE001
                    if error is None:
                        error = _pack_error(i, exc)
                    continue
                slots = views.get(i)
                if slots:
                    res.obs = _to_slots(res.obs, slots, 0)
                    if res.final_obs:
                        res.final_obs = _to_slots(res.final_obs, slots, 1)
                results.append((i, res))
            if error is not None:
                conn.send(error)
            else:
                try:
                    conn.send(("ok", results))
                except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable info value
                    conn.send(_pack_error(results[0][0] if results else None, exc))
    finally:
        for w in workers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        views = slots = res = results = None  # drop every view into the block before closing it
        if shm is not None:
            try:
                shm.close()
            except BufferError:  # a view survived somewhere; the OS unmaps at exit anyway
                pass
        try:
            conn.send(("closed", None))
        except Exception:  # noqa: BLE001
            pass
        conn.close()


# ----------------------------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------------------------

def _preload_forkserver(ctx: Any) -> None:
    """Have the forkserver import this module (numpy, gymnasium, pettingzoo) once, before it forks.

    Worker processes then start in ~0.1 s instead of re-importing everything (~1 s each). Only takes
    effect if the forkserver is not running yet; existing preload entries are kept.
    """
    from multiprocessing import forkserver
    current = list(getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None) or ["__main__"])
    if __name__ not in current:
        try:
            ctx.set_forkserver_preload(current + [__name__])
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
    each process hosts one :class:`AutoResetWorker` per env of its group. ``reset(seed)`` seeds env
    ``i`` with ``seed + i``; ``step({env_index: actions})`` advances only the listed envs. Results
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
                proc = ctx.Process(target=_worker_main, name=f"SubprocVectorEnv-{p}", daemon=True,
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
                    layout, size = _layout(specs[p])
                    if size:
                        shm = _shm.SharedMemory(create=True, size=size)
                        self._state["shms"].append(shm)
                        name = shm.name
                        views.update(zip(g, _views(shm.buf, layout)))
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
                        res.obs = _from_slots(res.obs, slots, 0)
                        if res.final_obs:
                            res.final_obs = _from_slots(res.final_obs, slots, 1)
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
