"""What every command of the command line shares: its error type and ``KEY=VALUE`` arguments.

Example:
    >>> parse_assignments(["hidden_sizes=[64, 64]", "lr=1e-3", "policy=greedy"], "--agent-arg")
    {'hidden_sizes': [64, 64], 'lr': 0.001, 'policy': 'greedy'}
    >>> parse_assignments(["lr"], "--agent-arg")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --agent-arg expects KEY=VALUE, got 'lr'
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["CLIError", "parse_assignments", "setup_errors"]


class CLIError(Exception):
    """A bad command line (or what it names: env, checkpoint, output directory), found before any work.

    ``marl_note.cli.main`` prints it as ``marl_note <command>: error: <message>`` and exits with 2.

    Example:
        >>> str(CLIError("unknown env 'tictactoe'"))
        "unknown env 'tictactoe'"
    """


def parse_assignments(items: Sequence[str] | None, option: str) -> dict[str, Any]:
    """``["key=value", ...]`` as a dict; a value is read as JSON (numbers, lists, true/null) or else kept as text."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise CLIError(f"{option} expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
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
