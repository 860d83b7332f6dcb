"""``train --wrapper NAME[:KEY=VALUE,...]``: SuperSuit wrappers around the env, named on the command line.

Pixel envs (butterfly's cooperative_pong, pistonball, CarRacing) are usually trained on smaller,
grey, stacked frames; a zoo recipe can list SuperSuit wrappers, and ``--wrapper`` (repeatable,
applied in the order given, after a recipe's own) does the same from the command line::

    --wrapper color_reduction_v0:mode=B --wrapper resize_v1:x_size=84,y_size=84 --wrapper frame_stack_v1:stack_size=4

Only the SuperSuit wrappers of :data:`SUPERSUIT_WRAPPERS` are taken, looked up by name in that
table (never an arbitrary import), with the options each one accepts. Values are Python literals
(numbers, ``True``/``False``/``None`` or ``true``/``false``/``none``, quoted strings, lists and
tuples); a bare word (``mode=B``, ``dtype=float32``) is a string. Anything else is refused with
the reason, before any env is built. The result is the recipe form of a wrapper,
``{"name": "supersuit.<wrapper>", **options}``, which the run record keeps, so that ``evaluate``
and ``play`` wrap the env as it was trained.

Example:
    >>> parse_wrapper("resize_v1:x_size=84,y_size=84")
    {'name': 'supersuit.resize_v1', 'x_size': 84, 'y_size': 84}
    >>> parse_wrapper("reshape_v0:shape=(84, 84, 1)")
    {'name': 'supersuit.reshape_v0', 'shape': (84, 84, 1)}
    >>> parse_wrapper("os.system:command=ls")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --wrapper 'os.system:command=ls': unknown wrapper 'os.system'; ...
"""
from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from typing import Any

from marl_note.cli.common import CLIError

__all__ = ["SUPERSUIT_WRAPPERS", "check_supersuit_wrapper", "parse_wrapper", "parse_wrappers"]

# SuperSuit's public wrappers whose options are plain values: name -> (required options, optional options).
# Left out: the lambda wrappers (they take functions) and the vector-env conversions (not an env's wrapper).
SUPERSUIT_WRAPPERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "color_reduction_v0": ((), ("mode",)),
    "resize_v1": (("x_size", "y_size"), ("linear_interp",)),
    "dtype_v0": (("dtype",), ()),
    "flatten_v0": ((), ()),
    "normalize_obs_v0": ((), ("env_min", "env_max")),
    "reshape_v0": (("shape",), ()),
    "frame_stack_v1": ((), ("stack_size", "stack_dim")),
    "frame_stack_v2": ((), ("stack_size", "stack_dim")),
    "max_observation_v0": (("memory",), ()),
    "delay_observations_v0": (("delay",), ()),
    "frame_skip_v0": (("num_frames",), ()),
    "sticky_actions_v0": (("repeat_action_probability",), ()),
    "clip_reward_v0": ((), ("lower_bound", "upper_bound")),
    "clip_actions_v0": ((), ()),
    "scale_actions_v0": (("scale",), ()),
    "black_death_v3": ((), ()),
    "agent_indicator_v0": ((), ("type_only",)),
    "pad_observations_v0": ((), ()),
    "pad_action_space_v0": ((), ()),
    "nan_noop_v0": (("no_op_action",), ()),
    "nan_random_v0": ((), ()),
    "nan_zeros_v0": ((), ()),
}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NAMED = {"true": True, "false": False, "none": None}
_SPLIT = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_]*\s*=)")  # a comma that starts the next KEY=


def check_supersuit_wrapper(name: str, options: Sequence[str], what: str) -> None:
    """A ValueError unless ``name`` is a wrapper of :data:`SUPERSUIT_WRAPPERS` and ``options`` fit it."""
    if name not in SUPERSUIT_WRAPPERS:
        close = difflib.get_close_matches(name, list(SUPERSUIT_WRAPPERS), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(f"{what}: unknown wrapper {name!r}; {hint}SuperSuit wrappers taken here: "
                         f"{', '.join(SUPERSUIT_WRAPPERS)}")
    required, optional = SUPERSUIT_WRAPPERS[name]
    unknown = [k for k in options if k not in required + optional]
    if unknown:
        takes = ", ".join(required + optional) or "no options"
        raise ValueError(f"{what}: {name} has no option {unknown[0]!r}; it takes {takes}")
    missing = [k for k in required if k not in options]
    if missing:
        raise ValueError(f"{what}: {name} needs {', '.join(f'{k}=...' for k in missing)}")


def _value(text: str, key: str, item: str) -> Any:
    text = text.strip()
    if text.lower() in _NAMED:
        return _NAMED[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        if _WORD.fullmatch(text):
            return text  # a bare word: mode=B, dtype=float32
    raise CLIError(f"--wrapper {item!r}: the value of {key} ({text!r}) is not a literal (a number, True/False/None, "
                   f"a quoted string, a list or tuple) nor a plain word")


def parse_wrapper(item: str) -> dict[str, Any]:
    """One ``--wrapper`` value, ``NAME`` or ``NAME:KEY=VALUE[,KEY=VALUE...]``, as a recipe's wrapper entry."""
    name, sep, rest = item.partition(":")
    name = name.strip().removeprefix("supersuit.")
    options: dict[str, Any] = {}
    if sep and rest.strip():
        for part in _SPLIT.split(rest):
            key, eq, text = part.partition("=")
            key = key.strip()
            if not eq or not key.isidentifier():
                raise CLIError(f"--wrapper {item!r}: expected NAME:KEY=VALUE[,KEY=VALUE...], got {part.strip()!r}")
            if key in options:
                raise CLIError(f"--wrapper {item!r}: {key} is given twice")
            options[key] = _value(text, key, item)
    try:
        check_supersuit_wrapper(name, list(options), f"--wrapper {item!r}")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return {"name": f"supersuit.{name}", **options}


def parse_wrappers(items: Sequence[str] | None) -> tuple[dict[str, Any], ...]:
    """Every ``--wrapper`` value in order (see :func:`parse_wrapper`)."""
    return tuple(parse_wrapper(item) for item in items or ())
