"""Old import paths and names of release 0.1.0, kept working for one release with a DeprecationWarning.

The restructuring of 0.2 moved the optional parts into :mod:`marl_note.contrib` and the original
library's workflow into :mod:`marl_note.compat`. This module is the one place that knows where
each went, and the one core module that loads an optional part: it does so by name, only when a
program imports an old path (``marl_note.trainers.pool``) or an old name
(``from marl_note.agents.torch import AlphaZero``), and it says where the thing lives now.
Everything here goes in the next release.

- :data:`MODULES`: old module -> new module. :func:`install` puts a finder on ``sys.meta_path``
  (the package's ``__init__`` does it) that answers an old module with the new module object
  itself, so classes keep one identity whichever path imported them.
- :data:`NAMES`: package -> {old name: new module}; a package lists :func:`package_getattr` as its
  module ``__getattr__``.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     import marl_note.trainers.pool as old
    >>> import marl_note.contrib.pool as new
    >>> old is new, "marl_note.contrib.pool" in str(caught[0].message)
    (True, True)
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MODULES", "NAMES", "install", "package_getattr", "actor_pool", "new_name"]

MODULES = {
    "marl_note.trainers.pool": "marl_note.contrib.pool",
    "marl_note.trainers.adaptive": "marl_note.contrib.adaptive",
    "marl_note.trainers.finders": "marl_note.contrib.finders.finders",
    "marl_note.trainers.finder_parts": "marl_note.contrib.finders.parts",
    "marl_note.trainers.finder_results": "marl_note.contrib.finders.results",
    "marl_note.trainers.parallel_finder": "marl_note.contrib.finders.parallel",
    "marl_note.trainers.distributed": "marl_note.contrib.distributed.ranks",
    "marl_note.agents.torch.distributed": "marl_note.contrib.distributed.torch.ddp",
    "marl_note.agents.tf.distributed": "marl_note.contrib.distributed.tf.multiworker",
    "marl_note.agents.alphazero": "marl_note.contrib.alphazero.core",
    "marl_note.agents.mcts": "marl_note.contrib.alphazero.mcts",
    "marl_note.agents.board_games": "marl_note.contrib.board_games",
    "marl_note.agents.torch.alphazero": "marl_note.contrib.alphazero.torch.alphazero",
    "marl_note.agents.tf.alphazero": "marl_note.contrib.alphazero.tf.alphazero",
    "marl_note.agents.workflow": "marl_note.compat.workflow",
    "marl_note.agents.set_options": "marl_note.compat.set_options",
    "marl_note.agents.rebuild": "marl_note.compat.rebuild",
    "marl_note.agents.train_bindings": "marl_note.compat.train_bindings",
    "marl_note.trainers.facade": "marl_note.compat.facade",
    "marl_note.trainers.animate": "marl_note.compat.animate",
    "marl_note.agents.rl_config": "marl_note.compat.rl_config",
    "marl_note.agents.rl": "marl_note.compat.rl",
    "marl_note.agents.torch.rl": "marl_note.compat.torch.rl",
    "marl_note.agents.tf.rl": "marl_note.compat.tf.rl",
    "marl_note.replay.triplet": "marl_note.compat.triplet",
    "marl_note.replay.compact_state": "marl_note.replay.compact",
    "marl_note.agents.torch.compiling": "marl_note.agents.torch.common",
    "marl_note.agents.checkpoints.npz_codec": "marl_note.agents.checkpoints.format",
    "marl_note.agents.alphazero_entry": "marl_note.contrib.alphazero.entry",
    "marl_note.agents.maddpg_config": "marl_note.agents.maddpg",
    "marl_note.agents.knobs": "marl_note.agents.core",
}

NAMES: dict[str, dict[str, str]] = {
    "marl_note.agents": {n: "marl_note.contrib.board_games"
                         for n in ("AlphaBetaPlayer", "PerfectTicTacToePlayer", "WinOrBlockPlayer")},
    "marl_note.agents.torch": {"AlphaZero": "marl_note.contrib.alphazero.torch", "RL": "marl_note.compat.torch"},
    "marl_note.agents.tf": {"AlphaZero": "marl_note.contrib.alphazero.tf", "RL": "marl_note.compat.tf"},
    "marl_note.trainers": {
        "Animation": "marl_note.compat.animate", "animate_agent": "marl_note.compat.animate",
        "visualize_reward": "marl_note.compat.visualize", "visualize_loss": "marl_note.compat.visualize",
        "visualize_reward_loss": "marl_note.compat.visualize",
        "LRFinder": "marl_note.contrib.finders", "OptFinder": "marl_note.contrib.finders",
        "RankFailedError": "marl_note.contrib.distributed", "launch": "marl_note.contrib.distributed",
    },
    "marl_note.replay": {"TripletReplayBuffer": "marl_note.compat.triplet"},
    # the zoo's module re-exported these; training and writing a result live in their own modules
    "marl_note.cli.zoo": {"train_recipe": "marl_note.cli.zoo_run", "prepare": "marl_note.cli.zoo_run",
                          "write_result": "marl_note.cli.zoo_write"},
}


def actor_pool(actors: Any, sync_every: Any, pool: Any) -> Any:
    """``DecentralizedTrainer(actors=N, sync_every=K, pool={...})`` of release 0.1.0, as the source it means now."""
    if actors is None:
        raise ValueError("sync_every= and pool= are options of the actor pool: pass "
                         "source=marl_note.contrib.pool.ActorPool(actors=N, sync_every=..., **pool)")
    warnings.warn("DecentralizedTrainer(actors=N, sync_every=K, pool={...}) moved to DecentralizedTrainer(..., "
                  "source=marl_note.contrib.pool.ActorPool(actors=N, sync_every=K, **pool)); the old arguments go "
                  "in the next release", DeprecationWarning, stacklevel=3)
    module = importlib.import_module("marl_note.contrib.pool")
    return module.ActorPool(actors, sync_every=1 if sync_every is None else sync_every, **dict(pool or {}))


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)


def package_getattr(package: str):
    """A module ``__getattr__`` for ``package`` that finds its moved names (see :data:`NAMES`)."""
    moved = NAMES.get(package, {})

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        _warn(f"{package}.{name}", f"{moved[name]}.{name}")
        return getattr(importlib.import_module(moved[name]), name)

    return __getattr__


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old module path with the new module object (a DeprecationWarning naming it)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return None if new_name(fullname) is None else importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        _warn(spec.name, new)
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set the alias's spec on the real module: give it back its own
        module.__spec__ = self._specs.pop(module.__spec__.name if module.__spec__ else "", module.__spec__)

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}


def new_name(old: str) -> str | None:
    """Where module ``old`` (or a module inside a moved package) lives now; None if it did not move."""
    if old in MODULES:
        return MODULES[old]
    if not old.startswith(("marl_note.trainers.", "marl_note.agents.", "marl_note.replay.")):  # nothing else moved
        return None
    head, _, tail = old.rpartition(".")
    while head:
        if head in MODULES:
            return f"{MODULES[head]}.{tail}"
        head, _, rest = head.rpartition(".")
        tail = f"{rest}.{tail}"
    return None


_FINDER = _Alias()


def install() -> None:
    """Put the old-path finder on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)  # before the path finder, which would load a second copy


def lazy_package(package: str, exports: dict[str, str]):
    """A module ``__getattr__`` for ``package`` whose public names (``exports``: name -> module) load their
    module on first use, and whose moved names (:data:`NAMES`) warn: importing one agent class does not
    import every algorithm.

    Example:
        >>> getattr_ = lazy_package("marl_note.replay", {"SumTree": "marl_note.replay.sum_tree"})
        >>> getattr_("SumTree").__name__
        'SumTree'
    """
    moved = package_getattr(package)

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        return moved(name)

    return __getattr__
