"""Building an agent from a checkpoint: the manifest check, the class to build, and loading its arrays.

:func:`restore` (any agent, backend chosen from the manifest or given) and
:meth:`Saving.restore <marl_note.agents.checkpoints.saving.Saving.restore>` share these steps:
:func:`check_manifest` validates the manifest and decodes its spaces; the class to build comes
from :data:`REGISTRY` (every subclass of ``Saving``, by class name; never an import named in the
file); :func:`construct` builds it from the decoded config after refusing a config that implies
far more weights than the arrays hold; :func:`load_fresh` checks every array (and the replay
contents under :data:`REPLAY_PREFIX`) before loading them.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.checkpoints.config_codec import SPACE_PARAMS, Unrecorded, decode_config
from marl_note.agents.checkpoints.format import CheckpointError, checkpoint_sizes, read_checkpoint
from marl_note.agents.checkpoints.state_check import check_agent_state, check_replay_state, load_checked

__all__ = ["restore", "REPLAY_PREFIX", "BACKENDS", "REGISTRY", "backend_of", "replay_of", "check_manifest",
           "resolve_class", "construct", "load_fresh", "read_arrays", "ArrayLimits", "code_arguments"]

REPLAY_PREFIX = "__replay__."
BACKENDS = ("torch", "tf", "numpy")
REGISTRY: dict[str, list[type]] = {}  # class name -> every Saving subclass of that name (filled by Saving)
CODE_PARAMS = ("torso",)  # constructor arguments whose "module:qualname" strings name code (a user torso)
_SMALL_STATE = 1 << 20  # configs implying fewer weights than this are built and then shape-checked


def backend_of(cls: type) -> str | None:
    """``"torch"`` / ``"tf"`` / ``"numpy"`` from the first class in the MRO that lives in a backend folder of marl_note
    (``marl_note.agents.torch``, ``marl_note.contrib.alphazero.tf``, ...), unless the class declares it."""
    declared = getattr(cls, "_saving_backend", None)
    if declared is not None:
        return declared
    for klass in cls.__mro__:
        parts = klass.__module__.split(".")
        for backend in BACKENDS:
            if parts[0] == "marl_note" and backend in parts[1:]:
                return backend
    return None


def replay_of(agent: Any) -> Any:
    replay = getattr(agent, "replay", None)
    if replay is not None and callable(getattr(replay, "state_dict", None)) \
            and callable(getattr(replay, "load_state_dict", None)):
        return replay
    return None


def check_manifest(manifest: Mapping[str, Any], path, kinds: tuple[str, ...]) -> dict[str, Any]:
    from marl_note.agents.checkpoints.space_check import spaces_from_json  # at load time only
    where = os.fspath(path)
    kind = manifest.get("kind")
    if kind not in kinds:
        if kind == "params":
            raise CheckpointError(f"{where} holds only weights (save_param); load it with "
                                  f"agent.restore_param(path) into an existing agent")
        raise CheckpointError(f"{where}: manifest kind is {kind!r}, expected one of {list(kinds)}")
    if manifest.get("backend") not in BACKENDS:
        raise CheckpointError(f"{where}: manifest backend is {manifest.get('backend')!r}, expected one of "
                              f"{list(BACKENDS)}")
    algorithm = manifest.get("algorithm")
    if not isinstance(algorithm, str) or not algorithm.isidentifier():
        raise CheckpointError(f"{where}: manifest algorithm {algorithm!r} is not a class name")
    if not isinstance(manifest.get("config"), dict):
        raise CheckpointError(f"{where}: manifest config is {type(manifest.get('config')).__name__}, "
                              f"expected an object")
    if not isinstance(manifest.get("library_version"), str):
        raise CheckpointError(f"{where}: manifest has no library_version")
    info = dict(manifest)
    names = manifest.get("space_params", list(SPACE_PARAMS))  # absent in checkpoints of single-space agents
    if not isinstance(names, list) or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise CheckpointError(f"{where}: manifest space_params {names!r} is not a list of argument names")
    info["space_params"] = tuple(names)
    for name in names:
        try:
            info[name] = spaces_from_json(manifest[name])
        except CheckpointError as exc:
            raise CheckpointError(f"{where}: manifest {name}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{where}: manifest {name} is not a valid space description "
                                  f"({type(exc).__name__}: {exc})") from None
    return info


def resolve_class(cls: type, info: Mapping[str, Any], path) -> type:
    """The class to build: ``cls`` itself when it has the recorded name, else its registered subclass."""
    algorithm, backend = info["algorithm"], backend_of(cls)
    if cls.__name__ == algorithm:
        return cls
    found = [c for c in REGISTRY.get(algorithm, ()) if issubclass(c, cls) and backend_of(c) == backend]
    exact = [c for c in found if f"{c.__module__}.{c.__qualname__}" == info.get("class")]
    if exact or found:
        return (exact or found)[-1]
    raise CheckpointError(f"{os.fspath(path)} holds a {info['backend']} {algorithm} agent; "
                          f"{cls.__name__}.restore cannot build it (use {algorithm}.restore or "
                          f"marl_note.agents.checkpoints.restore)")


def construct(target: type, info: Mapping[str, Any], overrides: Mapping[str, Any], path,
              stored_bytes: int) -> Any:
    """``target`` built from the recorded config and ``overrides``; nothing the file names is imported or called.

    ``stored_bytes`` (the arrays' size on disk) bounds the weights the config may imply.
    """
    where = os.fspath(path)
    try:
        kwargs = _renamed(target, decode_config(info["config"]))
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    overrides = _renamed(target, overrides)
    recorded = dict(kwargs)
    params = inspect.signature(target).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown_overrides = [k for k in overrides if k not in params and not takes_any]
    if unknown_overrides:
        raise TypeError(f"{target.__name__} has no constructor arguments {unknown_overrides}")
    if not takes_any:
        unknown = sorted(k for k in kwargs if k not in params)
        if unknown and info["backend"] != backend_of(target):
            warnings.warn(f"restoring a {info['backend']} {info['algorithm']} as {backend_of(target)}: "
                          f"ignoring the recorded arguments {unknown} that {target.__name__} does not take",
                          stacklevel=3)
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        elif unknown:
            raise CheckpointError(f"{where}: recorded config has arguments {unknown} that "
                                  f"{target.__name__}.__init__ does not take (tampered manifest or another version)")
    kwargs.update({k: info[k] for k in info["space_params"] if k in params or takes_any})
    fit_device = getattr(getattr(target, "Networks", None), "restorable_device", None)
    if "device" in kwargs and "device" not in overrides and fit_device is not None:
        kwargs["device"] = fit_device(kwargs["device"], where)  # a GPU checkpoint on a machine without one
    kwargs.update(overrides)
    _check_code_arguments(target, recorded, overrides, where)
    unrecorded = {k: v.name for k, v in kwargs.items() if isinstance(v, Unrecorded)}
    if unrecorded:
        k, name = next(iter(unrecorded.items()))
        raise CheckpointError(f"{where}: {target.__name__} was saved with {k}={name}, a function, and checkpoints "
                              f"record functions by name only (no code is stored): pass it again, e.g. "
                              f"restore(path, {', '.join(f'{a}=...' for a in unrecorded)})")
    _check_implied_size(target, kwargs, stored_bytes, where)
    try:
        return target(**kwargs)
    except (TypeError, ValueError, MemoryError) as exc:
        raise CheckpointError(f"{where}: cannot build {target.__name__} from the recorded config "
                              f"({type(exc).__name__}: {exc})") from exc


def _renamed(target: type, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the deprecated names of ``target.renamed_params`` (``PR``, ``initial_TD``, ...,
    recorded by older releases) mapped silently to the new ones; a recorded None (not given) is dropped."""
    renamed = {old: new for old, new in getattr(target, "renamed_params", {}).items()
               if old not in inspect.signature(target).parameters}
    out = {k: v for k, v in kwargs.items() if k not in renamed}
    out.update({renamed[k]: v for k, v in kwargs.items() if k in renamed and v is not None})
    return out


def _check_implied_size(target: type, kwargs: Mapping[str, Any], stored_bytes: int, where: str) -> None:
    """Refuse a config implying far more weights than the checkpoint stores, before building anything.

    ``stored_bytes`` is what the arrays take on disk (compressed in a zip): real weights do not
    compress below a byte each, so a config implying more weights than that is an edited manifest.
    """
    implied = getattr(target, "_min_state_size", None)
    implied = int(implied(kwargs)) if callable(implied) else 0
    if implied > max(stored_bytes, _SMALL_STATE):
        raise CheckpointError(f"{where}: the recorded config of {target.__name__} (hidden_sizes="
                              f"{kwargs.get('hidden_sizes')!r}) implies at least {implied:,} weights, but the "
                              f"checkpoint stores {stored_bytes:,} bytes in all; refusing to build it "
                              f"(a damaged or edited manifest)")


def _qualified(value: Any) -> str | None:
    """``module:qualname`` of a function or class passed by the caller (None for anything else)."""
    fn = value.func if isinstance(value, functools.partial) else value
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    return f"{module}:{name}" if isinstance(module, str) and isinstance(name, str) else None


def _same_code(recorded: str, given: Any) -> bool:
    """Whether the caller's ``given`` function is the one whose name the checkpoint recorded."""
    if isinstance(given, str):
        return given == recorded or given.replace(":", ".") == recorded
    name = _qualified(given)
    return name is not None and recorded in (name, name.replace(":", "."))


def code_arguments(target: type, recorded: Mapping[str, Any]) -> dict[str, str]:
    """``{argument: recorded name}`` of the recorded config's arguments that name code: functions
    recorded by name (``augment``, ``compute_reward``, ...) and import paths in the arguments the class
    lists in ``code_params`` (a user torso's ``"module:qualname"``)."""
    named = {*CODE_PARAMS, *getattr(target, "code_params", ())}
    out = {k: v.name for k, v in recorded.items() if isinstance(v, Unrecorded)}
    out.update({k: v for k, v in recorded.items() if k in named and isinstance(v, str) and ":" in v})
    return out


def _check_code_arguments(target: type, recorded: Mapping[str, Any], overrides: Mapping[str, Any],
                          where: str) -> None:
    """Every recorded argument that names code must be passed by the caller, and be the same function.

    A checkpoint is data: loading it never imports or calls anything the file names. The caller
    passes the code (``restore(path, torso=BoardConv)``); its qualified name must match the recorded one.
    """
    for name, code in code_arguments(target, recorded).items():
        if name not in overrides and isinstance(recorded[name], Unrecorded):
            continue  # construct's own message: a function recorded by name, to be passed again
        if name not in overrides:
            raise CheckpointError(f"{where}: {target.__name__} was saved with {name}={code!r}, code that a "
                                  f"checkpoint names but never imports or runs; pass it to restore: "
                                  f"restore(path, {name}=<the function {code}>)")
        if not _same_code(code, overrides[name]):
            raise CheckpointError(f"{where}: {target.__name__} was saved with {name}={code!r}, but restore was "
                                  f"given {name}={_qualified(overrides[name]) or overrides[name]!r}; pass the "
                                  f"function the checkpoint was saved with")


class ArrayLimits:
    """What a checkpoint's arrays may hold for ``agent``, checked on each header before its data is read.

    An agent array must be no larger than the live one of that name (an optimiser slot the live
    agent does not have yet: no larger than its largest array); replay contents must have the
    live buffer's item shapes and at most its capacity of rows. ``max_bytes`` bounds the whole
    arrays file. Shapes that are smaller but still wrong are reported by :func:`load_fresh`.
    """

    _SLACK = 1 << 16  # scalars, counters and rng states: never a memory problem

    def __init__(self, agent: Any, params_only: bool = False):
        live = {k: np.asarray(v) for k, v in agent.state_dict().items()}
        self.live = {k: v.size * max(v.dtype.itemsize, 8) for k, v in live.items()}
        self.largest = max(self.live.values(), default=0)
        self.replay: dict[str, np.ndarray] = {}
        self.capacity = 0
        replay = None if params_only else replay_of(agent)
        if replay is not None:
            self.replay = {k: np.asarray(v) for k, v in replay.state_dict().items()}
            rows = [v.shape[0] for v in self.replay.values() if v.ndim >= 1]  # preallocated buffers hold capacity rows
            self.capacity = max([int(self.replay.get("capacity", 0)), *rows])
        row = sum(math.prod(v.shape[1:]) * max(v.dtype.itemsize, 8) for v in self.replay.values() if v.ndim >= 1)
        self.replay_row = 2 * row + 64  # columns a buffer allocates lazily (masks) are no wider than these
        slots = 8 * sum(self.live.values())  # weights, optimiser slots of their shapes, per-env copies
        self.max_bytes = slots + self.capacity * self.replay_row + (len(live) + len(self.replay) + 64) * self._SLACK

    def __call__(self, key: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes <= self._SLACK:
            return
        if key.startswith(REPLAY_PREFIX):
            name = key[len(REPLAY_PREFIX):]
            ref = self.replay.get(name)
            rows = shape[0] if shape else 1
            fits = rows <= self.capacity and (
                tuple(shape[1:]) == ref.shape[1:] if ref is not None and ref.ndim >= 1
                else nbytes <= rows * self.replay_row)
            expected = (f"at most {self.capacity} rows of {ref.shape[1:] if ref is not None and ref.ndim else 'items'}"
                        if self.replay else "no replay contents")
        else:
            limit = self.live.get(key, self.largest)
            fits = nbytes <= limit
            expected = f"at most {limit:,} bytes (the live agent's {key!r})" if key in self.live \
                else f"at most {limit:,} bytes (the agent's largest array)"
        if not fits:
            raise CheckpointError(f"array {key!r} is stored as {dtype} {shape} ({nbytes:,} bytes), but this agent "
                                  f"takes {expected}; refusing to read it")


def read_arrays(agent: Any, manifest: Mapping[str, Any], path, params_only: bool = False) -> dict[str, np.ndarray]:
    """The checkpoint's arrays, each header checked against ``agent`` (:class:`ArrayLimits`) before it is read;
    ``manifest`` is the one the agent was built from (a file changed in between is refused)."""
    limits = ArrayLimits(agent, params_only)
    again, arrays = read_checkpoint(path, check=limits, max_bytes=limits.max_bytes)
    if again != manifest:
        raise CheckpointError(f"{os.fspath(path)} changed while it was read; try again")
    return arrays


def load_fresh(agent: Any, info: Mapping[str, Any], arrays: Mapping[str, np.ndarray], path) -> None:
    where = f"{type(agent).__name__}.restore({os.fspath(path)!r})"
    saved = {k: v for k, v in arrays.items() if not k.startswith(REPLAY_PREFIX)}
    replay_state = {k[len(REPLAY_PREFIX):]: v for k, v in arrays.items() if k.startswith(REPLAY_PREFIX)}
    state, _ = check_agent_state(agent, saved, where)
    replay = replay_of(agent)
    if replay_state:
        if replay is None:
            raise CheckpointError(f"{where}: the checkpoint holds replay contents but {type(agent).__name__} "
                                  f"has no replay buffer")
        check_replay_state(replay, replay_state, where)
    load_checked(agent, state, None, where)
    loaded = agent.state_dict()
    for key in sorted(set(loaded) & set(state)):
        if np.shape(loaded[key]) != np.shape(state[key]):
            raise CheckpointError(f"{where}: array {key!r} has shape {np.shape(state[key])}, "
                                  f"expected {np.shape(loaded[key])}")
    if replay_state:
        load_checked(replay, replay_state, None, f"{where} (replay)")


def _load_registered(backend: str) -> None:
    """Import the ``backend`` class of every algorithm in :mod:`marl_note.agents.registry` that has one
    (a class registers its name with ``Saving`` as it is defined); one that cannot be imported is skipped."""
    from marl_note.agents import registry

    for entry in registry.entries():
        if backend in entry.backends:
            try:
                entry.cls(backend)
            except (ImportError, registry.RegistryError):
                continue


def restore(path: str | os.PathLike, backend: str | None = None, **overrides) -> Any:
    """Restore any agent, building the recorded algorithm for ``backend`` (default: the recorded one).

    Library algorithms are found by importing ``marl_note.agents.<backend>``, then, for a name not
    found there, the ``backend`` classes of the algorithms registered in
    :mod:`marl_note.agents.registry` (a plugin's, registered by dotted path, is imported now); another
    user-defined agent class must already be defined (imported) in this process.

    Example:
        >>> import os, tempfile, gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> path = DQN(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), hidden_sizes=(4,)).save(
        ...     os.path.join(tempfile.mkdtemp(), "ck"))
        >>> type(restore(path)).__module__
        'marl_note.agents.torch.dqn'
    """
    manifest, stored_bytes = checkpoint_sizes(path)
    info = check_manifest(manifest, path, kinds=("agent",))
    backend = info["backend"] if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    try:
        package = importlib.import_module(f"marl_note.agents.{backend}")
        if info["algorithm"] in getattr(package, "__all__", ()):
            getattr(package, info["algorithm"])  # a lazily exported class registers itself as its module loads
    except ImportError as exc:
        raise CheckpointError(f"{os.fspath(path)} needs the {backend} backend, which cannot be imported "
                              f"({exc})") from exc
    algorithm = info["algorithm"]
    if not any(backend_of(c) == backend for c in REGISTRY.get(algorithm, ())):
        _load_registered(backend)
    found = [c for c in REGISTRY.get(algorithm, ()) if backend_of(c) == backend]
    exact = [c for c in found if f"{c.__module__}.{c.__qualname__}" == info.get("class")]
    library = [c for c in found if c.__module__.startswith(f"marl_note.agents.{backend}")]
    choice = exact or library or found
    if not choice:
        raise CheckpointError(f"{os.fspath(path)} holds a {info['backend']} {algorithm}; no {backend} class "
                              f"of that name is defined (import the module that defines it first)")
    agent = construct(choice[-1], info, overrides, path, stored_bytes)
    load_fresh(agent, info, read_arrays(agent, manifest, path), path)
    return agent
