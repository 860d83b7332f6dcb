"""Budgets, counts and seeds of the command line, checked before anything is built.

Every count (``--episodes``, ``--env-steps``, ``--num-envs``, ``--games``, ...) must be a positive
integer of at most :data:`~marl_note.validation.MAX_COUNT`, ``--minutes`` a positive finite
number of at most :data:`~marl_note.validation.MAX_MINUTES` (a year), ``--seed`` an integer from
0 to :data:`~marl_note.validation.MAX_SEED`, ``--stop-reward`` a finite number. ``train`` checks
them after a zoo recipe has filled in what was not given (the recipe's own values were checked
when it was read, see :mod:`marl_note.cli.zoo`); a bad one is a :class:`~marl_note.cli.common.CLIError`
naming the flag. What needs the env (how many envs fit in memory) or the agent (how large a
network fits) is checked when the trainer and agents are built, before training starts.

Example:
    >>> from marl_note.cli.parser import build_parser
    >>> check_settings(build_parser().parse_args(["play", "--checkpoint", "x", "--seed", str(2**70)]))
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --seed must be at most 4,294,967,295, got 1180591620717411303424
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from marl_note.cli.common import CLIError
from marl_note.validation import MAX_COUNT, MAX_MINUTES, MAX_SEED, non_negative_int, positive_float, positive_int

__all__ = ["check_settings"]

# option (attribute, flag) -> its check, per command; an absent or None value is not checked
_COUNTS = {"train": ("env_steps", "episodes", "num_envs", "processes", "batch_size", "update_freq", "test_freq",
                     "test_episodes"),
           "evaluate": ("episodes", "num_envs"), "play": ("games",)}


def _flag(attr: str) -> str:
    return "--" + attr.replace("_", "-")


def _checked(check: Callable[..., Any], attr: str, value: Any, **kwargs: Any) -> None:
    try:
        check(_flag(attr), value, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None


def check_settings(args: Any) -> None:
    """Refuse a count, budget or seed of ``args`` (parsed arguments of train, evaluate or play) out of bounds."""
    for attr in _COUNTS.get(args.command, ()):
        if getattr(args, attr, None) is not None:
            _checked(positive_int, attr, getattr(args, attr), maximum=MAX_COUNT)
    if getattr(args, "eval_episodes", None) is not None:
        _checked(non_negative_int, "eval_episodes", args.eval_episodes, maximum=MAX_COUNT)
    if getattr(args, "minutes", None) is not None:
        _checked(positive_float, "minutes", args.minutes, meaning="minutes of training, at most a year",
                 maximum=MAX_MINUTES)
    if getattr(args, "seed", None) is not None:
        _checked(non_negative_int, "seed", args.seed, maximum=MAX_SEED)
    stop = getattr(args, "stop_reward", None)
    if stop is not None and not math.isfinite(stop):
        raise CLIError(f"--stop-reward must be a finite number (the test metric that ends training), got {stop}")
