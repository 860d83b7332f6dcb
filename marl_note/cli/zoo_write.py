"""Writing a measured score back into a recipe file's ``[result]`` table (``bench/bench_suite.py --write-results``).

Example:
    >>> _toml_value({"win": 0.5, "seats": ["player_0"], "ok": True})
    '{ win = 0.5, seats = ["player_0"], ok = true }'
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from marl_note.cli.zoo import Recipe, RecipeError, check_recipe, load_recipe, tomllib

__all__ = ["write_result"]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)  # TOML spells inf, -inf, nan
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"a recipe result holds no {type(value).__name__} ({value!r})")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def write_result(path: str | os.PathLike, result: Mapping[str, Any]) -> Recipe:
    """Replace the ``[result]`` table (the last table of a recipe file) with ``result``; returns the recipe re-read.

    Comments and everything above ``[result]`` are kept; the file is written atomically, and only
    after the new text has been checked as a recipe.
    """
    from marl_note.atomic_files import write_atomically

    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    starts = [k for k, line in enumerate(lines) if re.fullmatch(r"\s*\[result\]\s*(#.*)?", line)]
    later = [line for line in lines[starts[0] + 1:] if re.match(r"\s*\[", line)] if starts else []
    if len(starts) != 1 or later:
        raise RecipeError(f"{path}: [result] must be the file's last table to be rewritten")
    text = "\n".join(lines[:starts[0]] + ["[result]"] + [f"{_toml_key(k)} = {_toml_value(v)}"
                                                         for k, v in result.items()]) + "\n"
    check_recipe(tomllib.loads(text), path)
    write_atomically(path, lambda f: f.write(text.encode("utf-8")))
    return load_recipe(path)
