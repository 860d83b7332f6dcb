"""The :class:`Saving` mixin, backend neutral: ``agent.save(path)`` / ``Cls.restore(path)``.

A checkpoint (see :mod:`marl_note.agents.checkpoints.format`) holds a JSON manifest and numpy arrays::

    manifest: format, kind ("agent" or "params"), library_version, backend ("torch"/"tf"/"numpy"),
              algorithm (class name), class (module.qualname, informational), config (the
              constructor keyword arguments), space_params (the names below) and one entry
              per name: observation_space, action_space (a space each, or for a class whose
              ``saving_spaces`` says so, e.g. MADDPG's observation_spaces / action_spaces,
              ``{"$spaces": [[agent, space], ...]}``)
    arrays:   agent.state_dict() (weights, optimiser slots, counters, exploration state) and,
              with ``include_replay=True``, the replay contents under ``__replay__.<key>``

The constructor arguments are captured automatically: :class:`Saving` wraps the ``__init__`` of
every subclass and binds the outermost call (the most derived class's own arguments, defaults
applied; see :mod:`marl_note.agents.checkpoints.config_codec`). JSON values are written as they are; tuples,
numpy arrays/scalars and Gymnasium spaces with a tag; exploration policies, noise processes and
replay buffers of this library as ``{"$object": class name, "kwargs": ...}`` (their schedule/rng
state travels in the arrays). Any other object (a user's own policy, a callable) is refused at save
time with a TypeError saying which argument it is: build such objects inside ``__init__`` from
plain arguments, pass them again as ``restore(path, name=obj)``, or save only the weights with
:meth:`Saving.save_param`.

``Cls.restore(path)`` builds the class named in the manifest *for the backend of* ``Cls``, so a
torch checkpoint restores into the TF agent of the same name and vice versa (their state_dict keys
and shapes are identical); :func:`~marl_note.agents.checkpoints.restoring.restore` picks the
backend from the manifest (the steps both share are in :mod:`marl_note.agents.checkpoints.restoring`).
Loading never executes code from the checkpoint (no pickle; classes come from a registry of already
imported classes, never from an import named in the file). Everything that does not fit - another
algorithm, missing arrays, wrong shapes or dtypes, NaN where the agent has numbers, a damaged or
tampered file - raises :class:`~marl_note.agents.checkpoints.format.CheckpointError` before any
existing agent is modified (see :mod:`marl_note.agents.checkpoints.state_check`), and a manifest
whose config implies far larger networks than its arrays hold is refused before anything is built.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from marl_note.agents.checkpoints.config_codec import SPACE_PARAMS, capturing_init, encode_config
from marl_note.agents.checkpoints.format import checkpoint_sizes, space_to_json, write_checkpoint
from marl_note.agents.checkpoints.restoring import (
    REGISTRY,
    REPLAY_PREFIX,
    backend_of,
    check_manifest,
    construct,
    load_fresh,
    read_arrays,
    replay_of,
    resolve_class,
)
from marl_note.agents.checkpoints.state_check import check_agent_state, load_checked

__all__ = ["Saving"]


# --------------------------------------------------------------------------- the mixin

class Saving:
    """Mixin giving an agent ``save`` / ``restore`` / ``save_param`` / ``restore_param`` (the original
    library's ``load`` alias of ``restore`` is in :mod:`marl_note.compat`).

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

    saving_spaces: tuple[str, ...] = SPACE_PARAMS  # constructor arguments stored as manifest spaces
    unsaved_params: tuple[str, ...] = ()  # constructor arguments never recorded (runtime objects)

    if TYPE_CHECKING:  # what the agent provides
        def state_dict(self) -> dict[str, Any]: ...

        def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    nonfinite_state_keys: tuple[str, ...] = ()  # state keys (fnmatch patterns) that may legitimately hold NaN/inf
    optional_state_keys: tuple[str, ...] = ()  # state keys (fnmatch patterns) an older checkpoint may lack

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        REGISTRY.setdefault(cls.__name__, []).append(cls)
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
            raise TypeError(f"{cls.__name__} is not a marl_note.agents.torch, tf or numpy agent; "
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
    def _min_state_size(cls, config: Mapping[str, Any]) -> int:
        """A lower bound on the weights an agent built from ``config`` holds, computed without building it.

        ``restore`` refuses a checkpoint whose arrays hold fewer numbers than this bound when the
        bound is large, before building anything: a damaged or edited manifest could otherwise
        make it allocate networks of any size. The default reads ``hidden_sizes`` (an MLP from the
        smallest observation to the smallest action width through those layers); a subclass whose
        ``hidden_sizes`` means something else should return 0.

        Example:
            >>> import gymnasium as gym
            >>> Saving._min_state_size({"hidden_sizes": (64, 64), "observation_space": gym.spaces.Box(-1, 1, (4,)),
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
        manifest, stored_bytes = checkpoint_sizes(path)
        info = check_manifest(manifest, path, kinds=("agent",))
        target = resolve_class(cls, info, path)
        agent = construct(target, info, overrides, path, stored_bytes)
        load_fresh(agent, info, read_arrays(agent, manifest, path), path)
        return agent

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

    def restore_param(self, path: str | os.PathLike, strict: bool = True) -> None:
        """Load network weights from a ``save_param`` or ``save`` checkpoint into this agent.

        Everything is checked first (every weight present with this agent's shape, a numeric
        dtype and finite values): on a CheckpointError the agent is unchanged. The spaces the
        checkpoint records must also be this agent's (kind, shape, dtype, bounds, ``n``; see
        :mod:`~marl_note.agents.checkpoints.space_check`): weights of an agent that saw
        ``Box(-1, 1, (4,), float32)`` observations are refused by one that sees
        ``Box(0, 255, (4,), uint8)``, although every shape fits. ``strict=False`` loads them anyway
        (the weights must still fit).
        """
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False, got {strict!r}")
        manifest, _ = checkpoint_sizes(path)
        info = check_manifest(manifest, path, kinds=("agent", "params"))
        live = self.state_dict()
        what = (f"{type(self).__name__}.restore_param({os.fspath(path)!r}) "
                f"[weights of a {info['backend']} {info['algorithm']}]")
        if strict:
            from marl_note.agents.checkpoints.space_check import check_agent_spaces  # loading weights only

            check_agent_spaces(self, info, what, info["space_params"],
                               hint="; pass strict=False to load the weights anyway")
        arrays = read_arrays(self, manifest, path, params_only=True)  # each header checked before its data is read
        state, live = check_agent_state(self, arrays, what, keys=self.param_keys(live), live=live)
        load_checked(self, state, live, what)


# --------------------------------------------------------------------------- helpers

def _spaces_to_json(value: Any, name: str) -> dict[str, Any]:
    """A space as :func:`space_to_json`, or a dict of spaces as ``{"$spaces": [[key, space], ...]}`` (ordered)."""
    if isinstance(value, Mapping) and not isinstance(value, gym.spaces.Dict):  # a Dict observation is one space
        return {"$spaces": [[str(k), space_to_json(v)] for k, v in value.items()]}
    if value is None:
        raise TypeError(f"cannot record {name}: the agent has no such attribute (see Saving.saving_spaces)")
    return space_to_json(value)


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
    torso = config.get("torso", "mlp")
    obs = config.get("observation_space")
    if torso not in ("mlp", "auto") or (torso == "auto" and isinstance(obs, gym.spaces.Box) and len(obs.shape) == 3):
        n_in = 1  # a conv (or user) torso may shrink images before the MLP
    sizes = [n_in, *(int(h) for h in hidden), n_out]
    return sum(a * b for a, b in zip(sizes, sizes[1:])) + sum(int(h) for h in hidden)
