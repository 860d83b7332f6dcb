"""What every command of the command line shares: its error type and ``KEY=VALUE`` arguments.

Example:
    >>> parse_assignments(["hidden_sizes=[64, 64]", "lr=1e-3", "policy=greedy"], "--agent-arg")
    {'hidden_sizes': [64, 64], 'lr': 0.001, 'policy': 'greedy'}
    >>> parse_assignments(["continuous=False", "is_slippery=false", "map_name=8x8", "render_mode=None"], "--env-arg")
    {'continuous': False, 'is_slippery': False, 'map_name': '8x8', 'render_mode': None}
    >>> parse_assignments(["hidden_sizes=[64, 64"], "--agent-arg")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --agent-arg hidden_sizes=[64, 64: the value is no Python literal ...
    >>> parse_assignments(["lr"], "--agent-arg")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --agent-arg expects KEY=VALUE, got 'lr'
"""
from __future__ import annotations

import ast
import contextlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["CLIError", "parse_assignments", "parse_value", "setup_errors"]


class CLIError(Exception):
    """A bad command line (or what it names: env, checkpoint, output directory), found before any work.

    ``marl_note.cli.main`` prints it as ``marl_note <command>: error: <message>`` and exits with 2.

    Example:
        >>> str(CLIError("unknown env 'tictactoe'"))
        "unknown env 'tictactoe'"
    """


# words that stand for themselves in any case: true/false/none (and JSON's null)
_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "null": None}
# a bare word kept as text: letters, digits and _ . - / : + (map_name=8x8, render_mode=rgb_array, CartPole-v1)
_BARE = re.compile(r"[\w.\-/:+]+")


def parse_value(text: str) -> Any:
    """One ``KEY=VALUE`` value: a Python literal (``False``, ``None``, ``3``, ``1e-3``, ``'x'``, ``[64, 64]``,
    ``{'a': 1}``), JSON (``true``, ``null``, ``[true]``), ``true``/``false``/``none`` in any case, or else a
    bare word kept as text (``8x8``, ``rgb_array``); anything else raises ValueError saying why."""
    stripped = text.strip()
    if stripped.lower() in _WORDS:
        return _WORDS[stripped.lower()]
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    if _BARE.fullmatch(stripped):
        return stripped
    raise ValueError("the value is no Python literal (True/False/None, a number, a quoted string, a list, a dict) "
                     "nor a bare word; quote text that has spaces or brackets, e.g. KEY=\"'a b'\"")


def parse_assignments(items: Sequence[str] | None, option: str) -> dict[str, Any]:
    """``["key=value", ...]`` as a dict, each value read by :func:`parse_value`; a value that does not
    parse raises a :class:`CLIError` naming ``option`` and the argument."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise CLIError(f"{option} expects KEY=VALUE, got {item!r}")
        try:
            out[key] = parse_value(text)
        except ValueError as exc:
            raise CLIError(f"{option} {item}: {exc}") from None
    return out


@contextlib.contextmanager
def setup_errors(what: str = "") -> Iterator[None]:
    """Turn the ValueError/TypeError/ImportError a constructor raises while setting up into a CLIError.

    Used only around the set-up of a command (building envs and agents, loading checkpoints), so
    that a bad argument reads as one line (after ``what`` failed, when given); errors raised
    later, while training or playing, keep their traceback.
    """
    try:
        yield
    except CLIError:
        raise
    except (ValueError, TypeError, ImportError, KeyError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise CLIError(f"{what}: {text}" if what else str(text)) from exc
