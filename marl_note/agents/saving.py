"""Saving and restoring whole agents, backend neutral: ``agent.save(path)`` / ``Cls.restore(path)``.

A checkpoint (see :mod:`marl_note.agents.checkpoint`) holds a JSON manifest and numpy arrays::

    manifest: format, kind ("agent" or "params"), library_version, backend ("torch"/"tf"),
              algorithm (class name), class (module.qualname, informational), config (the
              constructor keyword arguments), space_params (the names below) and one entry
              per name: observation_space, action_space (a space each, or for a class whose
              ``saving_spaces`` says so, e.g. MADDPG's observation_spaces / action_spaces,
              ``{"$spaces": [[agent, space], ...]}``)
    arrays:   agent.state_dict() (weights, optimiser slots, counters, exploration state) and,
              with ``include_replay=True``, the replay contents under ``__replay__.<key>``

The constructor arguments are captured automatically: :class:`Saving` wraps the ``__init__`` of
every subclass and binds the outermost call (the most derived class's own arguments, defaults
applied; see :mod:`marl_note.agents.config_codec`). JSON values are written as they are; tuples,
numpy arrays/scalars and Gymnasium spaces with a tag; exploration policies, noise processes and
replay buffers of this library as ``{"$object": class name, "kwargs": ...}`` (their schedule/rng
state travels in the arrays). Any other object (a user's own policy, a callable) is refused at save
time with a TypeError saying which argument it is: build such objects inside ``__init__`` from
plain arguments, pass them again as ``restore(path, name=obj)``, or save only the weights with
:meth:`Saving.save_param`.

``Cls.restore(path)`` builds the class named in the manifest *for the backend of* ``Cls``, so a
torch checkpoint restores into the TF agent of the same name and vice versa (their state_dict keys
and shapes are identical); :func:`restore` picks the backend from the manifest. Loading never
executes code from the checkpoint (no pickle; classes come from a registry of already imported
classes, never from an import named in the file). Everything that does not fit - another
algorithm, missing arrays, wrong shapes or dtypes, NaN where the agent has numbers, a damaged
or tampered file - raises :class:`~marl_note.agents.checkpoint.CheckpointError` before any
existing agent is modified (see :mod:`marl_note.agents.state_check`), and a manifest whose
config implies far larger networks than its arrays hold is refused before anything is built.
"""
from __future__ import annotations

import importlib
import inspect
import math
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from marl_note.agents.checkpoint import (
    CheckpointError,
    read_checkpoint,
    space_from_json,
    space_to_json,
    write_checkpoint,
)
from marl_note.agents.config_codec import SPACE_PARAMS as _SPACE_PARAMS
from marl_note.agents.config_codec import Unrecorded, capturing_init, decode_config, encode_config
from marl_note.agents.state_check import check_agent_state, check_replay_state, load_checked

__all__ = ["Saving", "restore", "encode_config", "decode_config", "REPLAY_PREFIX"]

REPLAY_PREFIX = "__replay__."
BACKENDS = ("torch", "tf")
_REGISTRY: dict[str, list[type]] = {}
_SMALL_STATE = 1 << 20  # configs implying fewer weights than this are built and then shape-checked


# --------------------------------------------------------------------------- the mixin

class Saving:
    """Mixin giving an agent ``save`` / ``restore`` (alias ``load``) / ``save_param`` / ``restore_param``.

    The agent needs ``state_dict()``, ``load_state_dict(state)`` and one attribute per constructor
    argument named in ``saving_spaces`` (default ``("observation_space", "action_space")``), each a
    space or a dict ``{name: space}`` (MADDPG: ``("observation_spaces", "action_spaces")``); these go
    to the manifest rather than the config and are passed back by name on restore; the weights for
    ``save_param`` are the state keys under the agent's networks (``self._nets`` or ``self._params``,
    keyed by network name). The backend is the package
    (``marl_note.agents.torch`` or ``marl_note.agents.tf``) the class or one of its bases lives in.

    Example:
        >>> import os, tempfile, gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> path = agent.save(os.path.join(tempfile.mkdtemp(), "dqn.zip"))
        >>> again = DQN.restore(path)
        >>> again.config["hidden_sizes"], again.updates == agent.updates
        ((8,), True)
        >>> obs = np.random.default_rng(0).normal(size=(5, 3))
        >>> bool((again.act(obs) == agent.act(obs)).all())
        True
    """

    saving_spaces: tuple[str, ...] = _SPACE_PARAMS  # constructor arguments stored as manifest spaces

    if TYPE_CHECKING:  # what the agent provides
        def state_dict(self) -> dict[str, Any]: ...

        def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    nonfinite_state_keys: tuple[str, ...] = ()  # state keys (fnmatch patterns) that may legitimately hold NaN/inf

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _REGISTRY.setdefault(cls.__name__, []).append(cls)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_saving_wrapped", False):
            cls.__init__ = capturing_init(init)  # type: ignore[method-assign]

    # -- configuration -----------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        """The constructor keyword arguments of this agent (outermost ``__init__`` call, defaults applied)."""
        return dict(self.__dict__.get("_saving_config") or {})

    def _manifest(self, kind: str) -> dict[str, Any]:
        cls = type(self)
        backend = backend_of(cls)
        if backend is None:
            raise TypeError(f"{cls.__name__} is not a marl_note.agents.torch or marl_note.agents.tf agent; "
                            f"cannot tell which backend to record in the checkpoint")
        from marl_note import __version__
        return {"kind": kind, "library_version": __version__, "backend": backend, "algorithm": cls.__name__,
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "config": encode_config(self.config, owner=cls.__name__),
                "space_params": list(cls.saving_spaces),
                **{name: _spaces_to_json(getattr(self, name, None), name) for name in cls.saving_spaces}}

    def _optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        """Optimiser name -> shapes of the parameters it updates, in its order (none by default).

        A saved state may hold per-parameter slots ``<name>.<i>.<slot>`` (Adam's ``step``,
        ``exp_avg``, ``exp_avg_sq``) that this agent's ``state_dict()`` lacks before its first
        update; loading checks them against these shapes.
        """
        return {}

    @classmethod
    def min_state_size(cls, config: Mapping[str, Any]) -> int:
        """A lower bound on the weights an agent built from ``config`` holds, computed without building it.

        ``restore`` refuses a checkpoint whose arrays hold fewer numbers than this bound when the
        bound is large, before building anything: a damaged or edited manifest could otherwise
        make it allocate networks of any size. The default reads ``hidden_sizes`` (an MLP from the
        smallest observation to the smallest action width through those layers); a subclass whose
        ``hidden_sizes`` means something else should return 0.

        Example:
            >>> import gymnasium as gym
            >>> Saving.min_state_size({"hidden_sizes": (64, 64), "observation_space": gym.spaces.Box(-1, 1, (4,)),
            ...                        "action_space": gym.spaces.Discrete(2)})
            4608
        """
        return _mlp_weights_lower_bound(config, cls.saving_spaces)

    # -- whole agent -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, include_replay: bool = False) -> str:
        """Write the agent (and with ``include_replay`` its replay contents) to ``path`` atomically.

        ``path`` ending in ``.zip`` gives one zip file, anything else a directory. Returns the
        absolute path. A save writes only the checkpoint's own files: into a missing or empty
        directory, or one holding a previous checkpoint (other files there are kept); any other
        existing path is refused with a CheckpointError before anything is written. A failing
        save leaves an existing checkpoint at ``path`` untouched.
        """
        manifest = self._manifest("agent")  # refuses unrecordable config before anything is written
        arrays = dict(self.state_dict())
        bad = [k for k in arrays if k.startswith(REPLAY_PREFIX)]
        if bad:
            raise ValueError(f"state_dict keys may not start with {REPLAY_PREFIX!r}: {bad[:4]}")
        if include_replay:
            replay = replay_of(self)
            if replay is None:
                raise ValueError(f"{type(self).__name__} has no replay buffer with state_dict() to save "
                                 f"(include_replay=True); on-policy rollouts are cleared at every update")
            arrays.update({REPLAY_PREFIX + k: v for k, v in replay.state_dict().items()})
        return write_checkpoint(path, manifest, arrays)

    @classmethod
    def restore(cls, path: str | os.PathLike, **overrides) -> Saving:
        """A new agent from a checkpoint written by ``save`` (either backend).

        ``overrides`` replace constructor arguments of the recorded config (e.g. ``device="cuda"``,
        or an object that could not be recorded). Raises CheckpointError if the checkpoint holds
        another algorithm or does not fit.
        """
        manifest, arrays = read_checkpoint(path)
        info = _check_manifest(manifest, path, kinds=("agent",))
        target = _resolve(cls, info, path)
        agent = _construct(target, info, overrides, path, arrays)
        _load_fresh(agent, info, arrays, path)
        return agent

    load = restore

    # -- weights only ------------------------------------------------------------------------------
    def param_keys(self, state: Mapping[str, Any] | None = None) -> list[str]:
        """The state_dict keys that are network weights (those under a name in ``self._nets``)."""
        state = self.state_dict() if state is None else state
        nets = tuple(getattr(self, "_nets", None) or getattr(self, "_params", None) or ())
        if not nets:
            raise TypeError(f"{type(self).__name__} lists no networks in self._nets (or self._params); "
                            f"cannot tell weights from the rest of its state")
        return sorted(k for k in state if k.split(".", 1)[0] in nets)

    def save_param(self, path: str | os.PathLike) -> str:
        """Write only the network weights (no optimiser, counters or exploration state)."""
        state = self.state_dict()
        manifest = self._manifest("params")
        return write_checkpoint(path, manifest, {k: state[k] for k in self.param_keys(state)})

    def restore_param(self, path: str | os.PathLike) -> None:
        """Load network weights from a ``save_param`` or ``save`` checkpoint into this agent.

        Everything is checked first (every weight present with this agent's shape, a numeric
        dtype and finite values): on a CheckpointError the agent is unchanged.
        """
        manifest, arrays = read_checkpoint(path)
        info = _check_manifest(manifest, path, kinds=("agent", "params"))
        live = self.state_dict()
        what = (f"{type(self).__name__}.restore_param({os.fspath(path)!r}) "
                f"[weights of a {info['backend']} {info['algorithm']}]")
        state, live = check_agent_state(self, arrays, what, keys=self.param_keys(live), live=live)
        load_checked(self, state, live, what)


# --------------------------------------------------------------------------- helpers

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


def _spaces_to_json(value: Any, name: str) -> dict[str, Any]:
    """A space as :func:`space_to_json`, or a dict of spaces as ``{"$spaces": [[key, space], ...]}`` (ordered)."""
    if isinstance(value, Mapping):
        return {"$spaces": [[str(k), space_to_json(v)] for k, v in value.items()]}
    if value is None:
        raise TypeError(f"cannot record {name}: the agent has no such attribute (see Saving.saving_spaces)")
    return space_to_json(value)


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


def _check_manifest(manifest: Mapping[str, Any], path, kinds: tuple[str, ...]) -> dict[str, Any]:
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
    names = manifest.get("space_params", list(_SPACE_PARAMS))  # absent in checkpoints of single-space agents
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


def _resolve(cls: type, info: Mapping[str, Any], path) -> type:
    """The class to build: ``cls`` itself when it has the recorded name, else its registered subclass."""
    algorithm, backend = info["algorithm"], backend_of(cls)
    if cls.__name__ == algorithm:
        return cls
    found = [c for c in _REGISTRY.get(algorithm, ()) if issubclass(c, cls) and backend_of(c) == backend]
    exact = [c for c in found if f"{c.__module__}.{c.__qualname__}" == info.get("class")]
    if exact or found:
        return (exact or found)[-1]
    raise CheckpointError(f"{os.fspath(path)} holds a {info['backend']} {algorithm} agent; "
                          f"{cls.__name__}.restore cannot build it (use {algorithm}.restore or "
                          f"marl_note.agents.saving.restore)")


def _construct(target: type, info: Mapping[str, Any], overrides: Mapping[str, Any], path,
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


def _flat_width(space: Any) -> int:
    """Network width of a space's values (one-hot Discrete); 1 where a network may see only a part."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return math.prod(int(d) for d in space.shape)
    return 1


def _mlp_weights_lower_bound(config: Mapping[str, Any], space_params: tuple[str, ...]) -> int:
    hidden = config.get("hidden_sizes")
    if not isinstance(hidden, (list, tuple)) or not all(
            isinstance(h, (int, np.integer)) and not isinstance(h, bool) and h > 0 for h in hidden):
        return 0
    widths: dict[str, list[int]] = {"observation": [], "action": []}
    for name in space_params:
        value = config.get(name)
        spaces = list(value.values()) if isinstance(value, Mapping) else [value]
        for kind in widths:
            if kind in name:
                widths[kind] += [_flat_width(s) for s in spaces if isinstance(s, gym.Space)]
    n_in, n_out = min(widths["observation"] or [1]), min(widths["action"] or [1])
    sizes = [n_in, *(int(h) for h in hidden), n_out]
    return sum(a * b for a, b in zip(sizes, sizes[1:])) + sum(int(h) for h in hidden)


def _load_fresh(agent: Any, info: Mapping[str, Any], arrays: Mapping[str, np.ndarray], path) -> None:
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
    info = _check_manifest(manifest, path, kinds=("agent",))
    backend = info["backend"] if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'torch' or 'tf', got {backend!r}")
    try:
        importlib.import_module(f"marl_note.agents.{backend}")
    except ImportError as exc:
        raise CheckpointError(f"{os.fspath(path)} needs the {backend} backend, which cannot be imported "
                              f"({exc})") from exc
    algorithm = info["algorithm"]
    found = [c for c in _REGISTRY.get(algorithm, ()) if backend_of(c) == backend]
    exact = [c for c in found if f"{c.__module__}.{c.__qualname__}" == info.get("class")]
    library = [c for c in found if c.__module__.startswith(f"marl_note.agents.{backend}")]
    choice = exact or library or found
    if not choice:
        raise CheckpointError(f"{os.fspath(path)} holds a {info['backend']} {algorithm}; no {backend} class "
                              f"of that name is defined (import the module that defines it first)")
    agent = _construct(choice[-1], info, overrides, path, arrays)
    _load_fresh(agent, info, arrays, path)
    return agent
