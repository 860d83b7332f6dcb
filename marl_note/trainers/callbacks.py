"""Training callbacks: objects with any of the trainer's hook methods, checked before training.

Hooks (each optional; the trainer passes itself first):

- ``on_train_begin(trainer)``
- ``on_collect_end(trainer, stats, episodes)`` after each collection chunk
- ``on_update_end(trainer, metrics, episodes)`` after each learner's update
- ``on_test_end(trainer, result, episodes)`` after each periodic test
- ``on_train_end(trainer, stats)`` (may add keys to the returned statistics)
- ``plot_series() -> {label: [(episodes, value), ...]}`` extra lines drawn on the metric plot

The trainer's function hooks (``reward_metric``, ``stop_fn``) have their results checked here
too (:func:`metric_value`, :func:`stop_value`), so a wrong result names the hook.

A callback with none of these, or with an ``on_...`` method the trainer does not know (a typo such
as ``on_epoch_end``), is refused when the list is built, so it cannot be silently ignored.

Example:
    >>> class Count:
    ...     def __init__(self):
    ...         self.tests = 0
    ...     def on_test_end(self, trainer, result, episodes):
    ...         self.tests += 1
    >>> count = Count()
    >>> callbacks = CallbackList([count])
    >>> callbacks.fire("on_test_end", None, {"reward": 1.0}, 10)
    >>> count.tests
    1
    >>> class Typo:
    ...     def on_epoch_end(self, trainer): ...
    >>> CallbackList([Typo()])
    Traceback (most recent call last):
    ...
    TypeError: callback Typo has on_epoch_end, which is no trainer hook; the hooks are on_train_begin, \
on_collect_end, on_update_end, on_test_end, on_train_end, plot_series
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["EVENTS", "HOOKS", "CallbackList", "metric_value", "stop_value"]

EVENTS = ("on_train_begin", "on_collect_end", "on_update_end", "on_test_end", "on_train_end")
HOOKS = (*EVENTS, "plot_series")


class CallbackList:
    """The callbacks of one training run, validated on construction, fired by event name.

    Example:
        >>> class Series:
        ...     def plot_series(self):
        ...         return {"elo": [(10, 1210.0)]}
        >>> CallbackList([Series()]).plot_series()
        {'elo': [(10, 1210.0)]}
    """

    def __init__(self, callbacks: Iterable[Any] = ()):
        if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable):
            raise TypeError(f"callbacks must be a list of callback objects, got {type(callbacks).__name__}")
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            name = type(cb).__name__
            unknown = [attr for attr in dir(cb)
                       if attr.startswith("on_") and attr not in HOOKS and callable(getattr(cb, attr, None))]
            if unknown:
                raise TypeError(f"callback {name} has {', '.join(unknown)}, which is no trainer hook; "
                                f"the hooks are {', '.join(HOOKS)}")
            found = [hook for hook in HOOKS if getattr(cb, hook, None) is not None]
            if not found:
                raise TypeError(f"callback {name} has none of the trainer hooks {', '.join(HOOKS)}")
            not_callable = [hook for hook in found if not callable(getattr(cb, hook))]
            if not_callable:
                raise TypeError(f"callback {name}: {', '.join(not_callable)} must be a method, "
                                f"got {type(getattr(cb, not_callable[0])).__name__}")

    def __len__(self) -> int:
        return len(self.callbacks)

    def fire(self, event: str, trainer: Any, *args: Any) -> None:
        """Call ``event(trainer, *args)`` on every callback that has it, in list order."""
        if event not in EVENTS:
            raise ValueError(f"unknown trainer event {event!r}; the events are {', '.join(EVENTS)}")
        for cb in self.callbacks:
            hook = getattr(cb, event, None)
            if hook is not None:
                hook(trainer, *args)

    def plot_series(self) -> dict[str, list[tuple[int, float]]]:
        """Every callback's ``plot_series()`` merged (a later callback's label wins)."""
        series: dict[str, list[tuple[int, float]]] = {}
        for cb in self.callbacks:
            hook = getattr(cb, "plot_series", None)
            if hook is not None:
                series.update(hook())
        return series


def _hook_scalar(hook: str, value: Any, kinds: str, wanted: str) -> np.ndarray:
    """``value`` as a 0-d array of a dtype kind in ``kinds``; otherwise a TypeError naming ``hook``."""
    arr = np.asarray(value) if isinstance(value, (bool, int, float, np.generic, np.ndarray)) else None
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in kinds:
        shape = f" of shape {np.shape(value)}" if isinstance(value, np.ndarray) else ""
        raise TypeError(f"{hook} must return {wanted}, got {type(value).__name__}{shape}: {value!r:.80}")
    return arr


def metric_value(value: Any) -> float:
    """``reward_metric``'s result as a float; not a real number or NaN/inf raises naming the hook.

    Example:
        >>> metric_value(np.float32(0.5))
        0.5
    """
    out = float(_hook_scalar("reward_metric", value, "iuf", "a real number (a float or a 0-d array)").item())
    if not np.isfinite(out):
        raise ValueError(f"reward_metric returned {out}; it must return a finite number")
    return out


def stop_value(value: Any) -> bool:
    """``stop_fn``'s result as a bool; None, an array or NaN raises naming the hook.

    Example:
        >>> stop_value(None)
        Traceback (most recent call last):
        ...
        TypeError: stop_fn must return True (stop) or False (go on), got NoneType: None
    """
    arr = _hook_scalar("stop_fn", value, "biuf", "True (stop) or False (go on)")
    if np.isnan(arr.astype(np.float64)):
        raise ValueError("stop_fn returned nan; it must return True (stop) or False (go on)")
    return bool(arr)
