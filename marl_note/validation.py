"""Argument checks shared by every layer (numpy only): one message style for every bad value.

Each check returns the value converted (``int``/``float``) or raises ``ValueError`` (``TypeError``
for a value of the wrong kind) naming the argument, what it must be, what was given and, where
it helps, what it means.

Example:
    >>> positive_int("num_envs", 4)
    4
    >>> unit_interval("gamma", 0.99)
    0.99
    >>> positive_int("num_envs", 0)
    Traceback (most recent call last):
    ...
    ValueError: num_envs must be a positive integer, got 0
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["positive_int", "non_negative_int", "positive_float", "non_negative_float", "unit_interval",
           "open_unit_interval", "optional", "check_callable"]


def _hint(meaning: str) -> str:
    return f" ({meaning})" if meaning else ""


def _is_int(value: Any) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, np.integer))


def _is_number(value: Any) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))


def positive_int(name: str, value: Any, meaning: str = "") -> int:
    """``value`` as an int >= 1."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer{_hint(meaning)}, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: Any, meaning: str = "") -> int:
    """``value`` as an int >= 0."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer{_hint(meaning)}, got {value!r}")
    return int(value)


def _number(name: str, value: Any, meaning: str) -> float:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number{_hint(meaning)}, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number{_hint(meaning)}, got nan")
    return value


def positive_float(name: str, value: Any, meaning: str = "") -> float:
    """``value`` as a finite float > 0."""
    v = _number(name, value, meaning)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number{_hint(meaning)}, got {value!r}")
    return v


def non_negative_float(name: str, value: Any, meaning: str = "") -> float:
    """``value`` as a finite float >= 0."""
    v = _number(name, value, meaning)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0{_hint(meaning)}, got {value!r}")
    return v


def unit_interval(name: str, value: Any, meaning: str = "") -> float:
    """``value`` as a float in [0, 1]."""
    v = _number(name, value, meaning)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1]{_hint(meaning)}, got {value!r}")
    return v


def open_unit_interval(name: str, value: Any, meaning: str = "") -> float:
    """``value`` as a float in (0, 1]."""
    v = _number(name, value, meaning)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must be in (0, 1]{_hint(meaning)}, got {value!r}")
    return v


def optional(check, name: str, value: Any, meaning: str = "") -> Any:
    """``None`` stays ``None``; anything else goes through ``check``.

    Example:
        >>> optional(positive_float, "tau", None), optional(positive_float, "tau", 0.5)
        (None, 0.5)
    """
    return None if value is None else check(name, value, meaning)


def check_callable(name: str, value: Any, signature: str = "") -> Any:
    """``value`` if it is callable (``None`` passes), else a TypeError saying what was expected."""
    if value is not None and not callable(value):
        what = f" {signature}" if signature else ""
        raise TypeError(f"{name} must be a function{what}, got {type(value).__name__}")
    return value
