"""The algorithms the command line offers: the registry's, AlphaZero's optional part, and plugins.

The command line reads :mod:`marl_note.agents.registry` only. It imports
:mod:`marl_note.contrib.alphazero` (which registers ``"alphazero"``), and :func:`load_plugins`
imports the modules named in the environment variable ``MARL_NOTE_PLUGINS`` (comma-separated
module names, e.g. ``MARL_NOTE_PLUGINS=mypkg.algos``), each of which registers its algorithms
with :func:`marl_note.agents.registry.register` when imported. Only the modules named there are
imported (as ``import NAME`` would, from ``sys.path``); no file or directory is searched.
``main()`` loads them before it builds the parser, so a plugin's algorithm is an ``--algo``
choice like a built-in one.

Example:
    >>> load_plugins({"MARL_NOTE_PLUGINS": "json, marl_note.agents.dqn"})  # modules that register nothing
    ['json', 'marl_note.agents.dqn']
    >>> load_plugins({"MARL_NOTE_PLUGINS": "./my_algo.py"})
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: MARL_NOTE_PLUGINS names modules to import, separated by commas \
(e.g. mypkg.algos), got './my_algo.py'
    >>> algorithm_names()[:2], algorithm("alphazero").actions
    (['dqn', 'ppo'], ('Discrete',))
"""
from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping

import marl_note.contrib.alphazero  # noqa: F401  (registers "alphazero": an optional part the command line offers)
from marl_note.agents import registry
from marl_note.cli.common import CLIError

__all__ = ["PLUGINS_VARIABLE", "algorithm", "algorithm_names", "load_plugins"]

PLUGINS_VARIABLE = "MARL_NOTE_PLUGINS"
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def load_plugins(environ: Mapping[str, str] | None = None) -> list[str]:
    """Import the modules ``MARL_NOTE_PLUGINS`` names (in ``environ``, default ``os.environ``); their names.

    A name that is not a module name, or a module that cannot be imported, is a CLIError naming it.
    """
    text = (os.environ if environ is None else environ).get(PLUGINS_VARIABLE, "")
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not _MODULE.match(name):
            raise CLIError(f"{PLUGINS_VARIABLE} names modules to import, separated by commas (e.g. mypkg.algos), got "
                           f"{name!r}")
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise CLIError(f"{PLUGINS_VARIABLE} names the module {name!r}, which cannot be imported ({exc})") from None
        except registry.RegistryError as exc:
            raise CLIError(f"{PLUGINS_VARIABLE}: the module {name!r} registers an algorithm the registry refuses: "
                           f"{exc}") from None
    return names


def algorithm_names() -> list[str]:
    """The ``--algo`` choices: every registered algorithm (:func:`marl_note.agents.registry.names`)."""
    return registry.names()


def algorithm(name: str) -> registry.Algorithm:
    """The registry entry of ``--algo name``, or a CLIError naming the registered ones."""
    try:
        return registry.get(name)
    except registry.UnknownAlgorithm as exc:
        raise CLIError(f"--algo: {exc}") from None
