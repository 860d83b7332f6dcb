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

import importlib
import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.checkpoints.config_codec import SPACE_PARAMS, Unrecorded, decode_config
from marl_note.agents.checkpoints.format import CheckpointError, read_checkpoint, space_from_json
from marl_note.agents.checkpoints.state_check import check_agent_state, check_replay_state, load_checked

__all__ = ["restore", "REPLAY_PREFIX", "BACKENDS", "REGISTRY", "backend_of", "replay_of", "check_manifest",
           "resolve_class", "construct", "load_fresh"]

REPLAY_PREFIX = "__replay__."
BACKENDS = ("torch", "tf")
REGISTRY: dict[str, list[type]] = {}  # class name -> every Saving subclass of that name (filled by Saving)
_SMALL_STATE = 1 << 20  # configs implying fewer weights than this are built and then shape-checked


def backend_of(cls: type) -> str | None:
    """``"torch"`` / ``"tf"`` from the first class in the MRO that lives in a backend package."""
    declared = getattr(cls, "_saving_backend", None)
    if declared is not None:
        return declared
    for klass in cls.__mro__:
        for backend in BACKENDS:
            pkg = f"marl_note.agents.{backend}"
            if klass.__module__ == pkg or klass.__module__.startswith(pkg + "."):
                return backend
    return None


def _spaces_from_json(d: Mapping[str, Any]) -> Any:
    if isinstance(d, Mapping) and "$spaces" in d:
        pairs = d["$spaces"]
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                                  for p in pairs):
            raise CheckpointError("$spaces must be a list of [name, space] pairs")
        return {k: space_from_json(v) for k, v in pairs}
    return space_from_json(d)


def replay_of(agent: Any) -> Any:
    replay = getattr(agent, "replay", None)
    if replay is not None and callable(getattr(replay, "state_dict", None)) \
            and callable(getattr(replay, "load_state_dict", None)):
        return replay
    return None


def check_manifest(manifest: Mapping[str, Any], path, kinds: tuple[str, ...]) -> dict[str, Any]:
    where = os.fspath(path)
    kind = manifest.get("kind")
    if kind not in kinds:
        if kind == "params":
            raise CheckpointError(f"{where} holds only weights (save_param); load it with "
                                  f"agent.restore_param(path) into an existing agent")
        raise CheckpointError(f"{where}: manifest kind is {kind!r}, expected one of {list(kinds)}")
    if manifest.get("backend") not in BACKENDS:
        raise CheckpointError(f"{where}: manifest backend is {manifest.get('backend')!r}, expected 'torch' or 'tf'")
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
            info[name] = _spaces_from_json(manifest[name])
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
               arrays: Mapping[str, np.ndarray]) -> Any:
    where = os.fspath(path)
    try:
        kwargs = decode_config(info["config"])
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
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
    unrecorded = {k: v.name for k, v in kwargs.items() if isinstance(v, Unrecorded)}
    if unrecorded:
        k, name = next(iter(unrecorded.items()))
        raise CheckpointError(f"{where}: {target.__name__} was saved with {k}={name}, a function, and checkpoints "
                              f"record functions by name only (no code is stored): pass it again, e.g. "
                              f"restore(path, {', '.join(f'{a}=...' for a in unrecorded)})")
    _check_implied_size(target, kwargs, arrays, where)
    try:
        return target(**kwargs)
    except (TypeError, ValueError, MemoryError) as exc:
        raise CheckpointError(f"{where}: cannot build {target.__name__} from the recorded config "
                              f"({type(exc).__name__}: {exc})") from exc


def _check_implied_size(target: type, kwargs: Mapping[str, Any], arrays: Mapping[str, np.ndarray], where: str) -> None:
    """Refuse a config implying far more weights than the checkpoint stores, before building anything."""
    implied = getattr(target, "min_state_size", None)
    implied = int(implied(kwargs)) if callable(implied) else 0
    stored = sum(int(np.size(v)) for k, v in arrays.items() if not k.startswith(REPLAY_PREFIX))
    if implied > max(stored, _SMALL_STATE):
        raise CheckpointError(f"{where}: the recorded config of {target.__name__} (hidden_sizes="
                              f"{kwargs.get('hidden_sizes')!r}) implies at least {implied:,} weights, but the "
                              f"checkpoint stores {stored:,} numbers in all; refusing to build it "
                              f"(a damaged or edited manifest)")


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


def restore(path: str | os.PathLike, backend: str | None = None, **overrides) -> Any:
    """Restore any agent, building the recorded algorithm for ``backend`` (default: the recorded one).

    Library algorithms are found by importing ``marl_note.agents.<backend>``; a user-defined
    agent class must already be defined (imported) in this process.

    Example:
        >>> import os, tempfile, gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> path = DQN(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), hidden_sizes=(4,)).save(
        ...     os.path.join(tempfile.mkdtemp(), "ck"))
        >>> type(restore(path)).__module__
        'marl_note.agents.torch.dqn'
    """
    manifest, arrays = read_checkpoint(path)
    info = check_manifest(manifest, path, kinds=("agent",))
    backend = info["backend"] if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'torch' or 'tf', got {backend!r}")
    try:
        importlib.import_module(f"marl_note.agents.{backend}")
    except ImportError as exc:
        raise CheckpointError(f"{os.fspath(path)} needs the {backend} backend, which cannot be imported "
                              f"({exc})") from exc
    algorithm = info["algorithm"]
    found = [c for c in REGISTRY.get(algorithm, ()) if backend_of(c) == backend]
    exact = [c for c in found if f"{c.__module__}.{c.__qualname__}" == info.get("class")]
    library = [c for c in found if c.__module__.startswith(f"marl_note.agents.{backend}")]
    choice = exact or library or found
    if not choice:
        raise CheckpointError(f"{os.fspath(path)} holds a {info['backend']} {algorithm}; no {backend} class "
                              f"of that name is defined (import the module that defines it first)")
    agent = construct(choice[-1], info, overrides, path, arrays)
    load_fresh(agent, info, arrays, path)
    return agent
