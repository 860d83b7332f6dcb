"""Checking saved state against a live agent or replay buffer before anything is assigned.

Loading is two steps. :func:`check_agent_state` compares every saved array with the live
``state_dict()``: each live key must be there with the same shape and a dtype that converts
without loss (numbers only: ints or floats into floats, ints or integral floats into integer
counters when they fit, 0/1 into flags; text and objects are refused), and float arrays must be
finite unless the live array itself holds NaN/inf or the agent names the key in
``nonfinite_state_keys``. Arrays the live state lacks are checked where the agent knows their
shape: optimiser slots ``<optimizer>.<i>.<slot>`` against parameter ``i``
(``_optimizer_slot_shapes()``; absent before the first update), per-env noise copies
``...env.<k>.<key>`` like their template ``...<key>``; any other extra array must be numeric and
finite. Live slots and noise copies that the checkpoint lacks are not required (loading drops
them), nor are the keys an agent lists in ``optional_state_keys`` (arrays newer than the
checkpoint). Only then does :func:`load_checked` assign, and should the object's own
``load_state_dict`` still refuse, it puts the previous state back.

Example:
    >>> import numpy as np
    >>> live = {"w": np.zeros(2, np.float32), "steps": np.asarray(3, np.int64)}
    >>> ok = check_arrays(live, {"w": np.ones(2), "steps": np.asarray(5.0)}, "demo")
    >>> ok["w"].dtype, int(ok["steps"])
    (dtype('float32'), 5)
    >>> check_arrays(live, {"w": np.array(["a", "b"]), "steps": np.asarray(5)}, "demo")
    Traceback (most recent call last):
    ...
    marl_note.agents.checkpoints.format.CheckpointError: demo: array 'w' has dtype <U1; expected numbers (float32)
"""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.checkpoints.format import CheckpointError

__all__ = ["check_arrays", "check_agent_state", "check_replay_state", "load_checked"]

_SLOT = re.compile(r"(?P<opt>.+)\.(?P<idx>\d+)\.(?P<slot>[^.]+)")
_ENV_COPY = re.compile(r"(?:^|(?<=\.))env\.\d+\.")


def check_arrays(live: Mapping[str, Any], saved: Mapping[str, Any], what: str, *,
                 slot_shapes: Mapping[str, Sequence[tuple[int, ...]]] | None = None,
                 nonfinite_ok: Iterable[str] = (), may_lack: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Check ``saved`` against ``live`` (see the module doc); return the arrays to load, cast to the live dtypes.

    ``may_lack``: live keys (fnmatch patterns) a checkpoint need not hold (arrays added to a state
    after it was written); the agent keeps its own values of those it lacks.
    """
    slot_shapes = slot_shapes or {}
    patterns = tuple(nonfinite_ok)
    lackable = tuple(may_lack)
    saved_slot_opts = {m["opt"] for k in saved if (m := _SLOT.fullmatch(k)) and m["opt"] in slot_shapes}

    def optional(key: str) -> bool:
        """Slots of an optimiser the checkpoint has none for (not stepped yet), per-env noise copies."""
        if any(fnmatch.fnmatchcase(key, p) for p in lackable):
            return True
        m = _SLOT.fullmatch(key)
        if m and m["opt"] in slot_shapes:
            return m["opt"] not in saved_slot_opts
        template = _ENV_COPY.sub("", key, count=1)
        return template != key and template in live

    missing = sorted(k for k in live if k not in saved and not optional(k))
    if missing:
        raise CheckpointError(f"{what}: checkpoint is missing arrays {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    out: dict[str, np.ndarray] = {}
    for key, ref in live.items():
        if key in saved:
            ref = np.asarray(ref)
            allow = any(fnmatch.fnmatchcase(key, p) for p in patterns) or (
                ref.dtype.kind in "fc" and ref.size > 0 and not bool(np.isfinite(ref).all()))
            out[key] = _fit(key, np.asarray(saved[key]), ref.shape, ref.dtype, allow, what)
    slots: dict[str, dict[int, set[str]]] = {}
    for key in sorted(set(saved) - set(live)):
        arr = np.asarray(saved[key])
        m = _SLOT.fullmatch(key)
        template = _ENV_COPY.sub("", key, count=1)
        if m and m["opt"] in slot_shapes:
            shapes, idx = slot_shapes[m["opt"]], int(m["idx"])
            if idx >= len(shapes):
                raise CheckpointError(f"{what}: array {key!r} is a slot of parameter {idx}, but {m['opt']} "
                                      f"updates {len(shapes)} parameters")
            shape = arr.shape if arr.shape == () else tuple(shapes[idx])
            out[key] = _fit(key, arr, shape, None, False, what)
            slots.setdefault(m["opt"], {}).setdefault(idx, set()).add(m["slot"])
        elif template != key and template in live:
            ref = np.asarray(live[template])
            out[key] = _fit(key, arr, ref.shape, ref.dtype, any(fnmatch.fnmatchcase(template, p) for p in patterns),
                            what)
        else:
            out[key] = _fit(key, arr, arr.shape, None, any(fnmatch.fnmatchcase(key, p) for p in patterns), what)
    for opt, per in slots.items():
        if sorted(per) != list(range(len(slot_shapes[opt]))):
            raise CheckpointError(f"{what}: {opt} has saved slots for parameters {sorted(per)[:8]}, "
                                  f"but it updates {len(slot_shapes[opt])} parameters")
        if len({frozenset(v) for v in per.values()}) > 1:
            raise CheckpointError(f"{what}: {opt} has different saved slots for different parameters")
    return out


def _fit(key: str, arr: np.ndarray, shape: tuple[int, ...], dtype: np.dtype | None, allow_nonfinite: bool,
         what: str) -> np.ndarray:
    """``arr`` checked against ``shape`` and converted to ``dtype`` (None: any numeric dtype, kept)."""
    name = f"{what}: array {key!r}"
    if dtype is not None and dtype.kind not in "biufc":  # a live text array: the saved one must be text too
        if arr.dtype.kind != dtype.kind or arr.shape != tuple(shape):
            raise CheckpointError(f"{name} is {arr.dtype} {arr.shape}, expected {dtype} {tuple(shape)}")
        return arr
    if arr.dtype.kind not in "biuf":
        wanted = f" ({dtype})" if dtype is not None else ""
        raise CheckpointError(f"{name} has dtype {arr.dtype}; expected numbers{wanted}")
    if arr.shape != tuple(shape):
        raise CheckpointError(f"{name} has shape {arr.shape}, expected {tuple(shape)}")
    if arr.dtype.kind == "f" and arr.size and not allow_nonfinite and not bool(np.isfinite(arr).all()):
        raise CheckpointError(f"{name} holds NaN or infinite values")
    if dtype is None or arr.size == 0:
        return arr if dtype is None else arr.astype(dtype)
    _check_range(name, arr, dtype)
    return arr.astype(dtype, copy=False)


def _check_range(name: str, arr: np.ndarray, dtype: np.dtype) -> None:
    """Refuse values that ``dtype`` cannot hold exactly (too large, not integral, not 0/1)."""
    if dtype.kind in "fc":
        if arr.dtype.kind == "f" and dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize:
            finite = np.abs(arr[np.isfinite(arr)])
            if finite.size and float(finite.max()) > float(np.finfo(dtype).max):
                raise CheckpointError(f"{name} holds values too large for {dtype}")
    elif dtype.kind in "iu":
        if arr.dtype.kind == "f":
            if not bool(np.isfinite(arr).all()) or bool((arr != np.trunc(arr)).any()):
                raise CheckpointError(f"{name} holds non-integer values, expected {dtype}")
            lo, hi = float(arr.min()), float(arr.max())
        else:
            lo, hi = int(arr.min()), int(arr.max())
        info = np.iinfo(dtype)
        if lo < info.min or hi > info.max:
            raise CheckpointError(f"{name} holds values outside the range of {dtype}")
    elif dtype.kind == "b" and arr.dtype.kind != "b":
        if not bool(np.isin(arr, (0, 1)).all()):
            raise CheckpointError(f"{name} holds values other than 0 and 1, expected {dtype}")


def check_agent_state(agent: Any, saved: Mapping[str, Any], what: str, keys: Sequence[str] | None = None,
                      live: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state to load, live state)`` for ``agent`` from ``saved``; only ``keys`` of it when given
    (the state to load then holds the live values of every other key)."""
    live = dict(agent.state_dict()) if live is None else dict(live)
    slot_fn = getattr(agent, "_optimizer_slot_shapes", None)
    nonfinite = tuple(getattr(agent, "nonfinite_state_keys", ()))
    if keys is None:
        slot_shapes = slot_fn() if callable(slot_fn) else {}
        return check_arrays(live, saved, what, slot_shapes=slot_shapes, nonfinite_ok=nonfinite,
                            may_lack=tuple(getattr(agent, "optional_state_keys", ()))), live
    part = check_arrays({k: live[k] for k in keys}, {k: saved[k] for k in keys if k in saved}, what,
                        nonfinite_ok=nonfinite)
    return {**live, **part}, live


def check_replay_state(replay: Any, state: Mapping[str, Any], what: str) -> None:
    """The replay buffer's own ``check_state_dict`` (when it has one) as a CheckpointError."""
    check = getattr(replay, "check_state_dict", None)
    if not callable(check):
        return
    try:
        check(dict(state))
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        raise CheckpointError(f"{what}: replay contents do not fit ({exc})") from exc


def load_checked(target: Any, state: Mapping[str, Any], previous: Mapping[str, Any] | None, what: str) -> None:
    """``target.load_state_dict(state)``; if it fails, load ``previous`` back and raise CheckpointError."""
    try:
        target.load_state_dict(state)
    except Exception as exc:
        if previous is not None:
            try:
                target.load_state_dict(previous)
            except Exception:
                raise CheckpointError(f"{what}: the state does not fit ({type(exc).__name__}: {exc}); putting the "
                                      f"previous state back failed too, so it may be partly loaded") from exc
        raise CheckpointError(f"{what}: the state does not fit ({type(exc).__name__}: {exc})") from exc
