"""Argument checks shared by every layer (numpy only): one message style for every bad value.

Each check returns the value converted (``int``/``float``) or raises ``ValueError`` (``TypeError``
for a value of the wrong kind) naming the argument, what it must be, what was given and, where
it helps, what it means. ``maximum`` bounds a count or budget from above: :data:`MAX_COUNT` for
episodes, env steps and other counts, :data:`MAX_MINUTES` for a time budget, :data:`MAX_SEED`
for a seed (what the command line and the zoo's recipes accept).

Example:
    >>> positive_int("num_envs", 4)
    4
    >>> unit_interval("gamma", 0.99)
    0.99
    >>> positive_int("num_envs", 0)
    Traceback (most recent call last):
    ...
    ValueError: num_envs must be a positive integer, got 0
    >>> positive_int("episodes", 2**80, maximum=MAX_COUNT)
    Traceback (most recent call last):
    ...
    ValueError: episodes must be at most 1,000,000,000,000, got 1208925819614629174706176
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MAX_COUNT", "MAX_MINUTES", "MAX_SEED", "positive_int", "non_negative_int", "positive_float",
           "non_negative_float", "unit_interval", "open_unit_interval", "optional", "check_callable", "shown"]

MAX_COUNT = 10**12  # episodes, env steps, envs, games: a trillion is beyond any run on one machine
MAX_MINUTES = 60 * 24 * 365  # a time budget of at most a year
MAX_SEED = 2**32 - 1  # seeds are 32-bit, as NumPy's legacy seeding and most tools take them


def _hint(meaning: str) -> str:
    return f" ({meaning})" if meaning else ""


def _is_int(value: Any) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, np.integer))


def _is_number(value: Any) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))


def shown(value: Any) -> str:
    """``repr(value)`` for an error message: an integer too long to print (Python refuses to print one of over
    4300 digits) as its size, a long list or tuple as its first ten items.

    Example:
        >>> shown(10**5000), shown(list(range(12)))
        ('an integer of about 5001 digits', '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...]')
    """
    if _is_int(value) and int(value).bit_length() > 200:
        return f"an integer of about {int(int(value).bit_length() * math.log10(2)) + 1} digits"
    if isinstance(value, (list, tuple)):
        text = ", ".join([shown(v) for v in value[:10]] + (["..."] if len(value) > 10 else []))
        return f"[{text}]" if isinstance(value, list) else f"({text}{',' if len(value) == 1 else ''})"
    return repr(value)


def _at_most(name: str, value: Any, maximum: float | None, meaning: str) -> None:
    if maximum is not None and value > maximum:
        bound = f"{maximum:,}" if float(maximum).is_integer() else f"{maximum:g}"
        raise ValueError(f"{name} must be at most {bound}{_hint(meaning)}, got {shown(value)}")


def positive_int(name: str, value: Any, meaning: str = "", maximum: int | None = None) -> int:
    """``value`` as an int >= 1 (and <= ``maximum`` when given)."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer{_hint(meaning)}, got {shown(value)}")
    _at_most(name, value, maximum, meaning)
    return int(value)


def non_negative_int(name: str, value: Any, meaning: str = "", maximum: int | None = None) -> int:
    """``value`` as an int >= 0 (and <= ``maximum`` when given)."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer{_hint(meaning)}, got {shown(value)}")
    _at_most(name, value, maximum, meaning)
    return int(value)


def _number(name: str, value: Any, meaning: str) -> float:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number{_hint(meaning)}, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number{_hint(meaning)}, got nan")
    return value


def positive_float(name: str, value: Any, meaning: str = "", maximum: float | None = None) -> float:
    """``value`` as a finite float > 0 (and <= ``maximum`` when given)."""
    v = _number(name, value, meaning)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number{_hint(meaning)}, got {value!r}")
    _at_most(name, v, maximum, meaning)
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
