"""Training callbacks: objects with any of the trainer's events, checked before training.

Events (each optional; the trainer passes itself first), in the order they fire:

- ``on_train_begin(trainer)``
- ``on_episode_begin(trainer, episode, logs)`` when a training episode starts: ``episode`` counts
  the training episodes started before it, ``logs`` holds ``env_index``
- ``on_episode_end(trainer, episode, logs)`` when a training episode ends: ``episode`` counts the
  training episodes finished before it; ``logs`` holds ``returns`` (one per seat), ``length``
  (env steps), ``env_index``, ``reward`` (the trainer's reward metric of this one episode) and
  ``tag`` (the matchmaker's tag, else None). Several train envs run episodes side by side, so a
  begin and its end share ``logs["env_index"]``, not the count.
- ``on_collect_end(trainer, stats, episodes)`` after each collection chunk
- ``on_batch_begin(trainer, batch, logs)`` / ``on_batch_end(trainer, batch, logs)`` around each
  learner's ``update`` call: ``batch`` counts the update calls of this ``train()``; the begin
  ``logs`` hold ``learner`` (its index), ``episodes`` and ``env_steps``, the end ``logs`` are the
  update's metrics
- ``on_update_end(trainer, metrics, episodes)`` after each learner's update
- ``on_test_end(trainer, result, episodes)`` after each periodic test
- ``on_train_end(trainer, stats)`` (may add keys to the returned statistics)
- ``plot_series() -> {label: [(episodes, value), ...]}`` extra lines drawn on the metric plot

A callback (or hook) ends training after the current collection chunk by setting
``trainer.stop_training = True`` (Keras' ``model.stop_training``). Episode events cost a Python
call per training episode, and only when some callback has them.

The trainer's function hooks (``reward_metric``, ``stop_fn``) have their results checked here
too (:func:`metric_value`, :func:`stop_value`), so a wrong result names the hook.

A callback with none of these, or with an ``on_...`` method the trainer does not know (a typo, or
Keras' ``on_epoch_end``), is refused when the list is built, so it cannot be silently ignored.

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
    TypeError: callback Typo has on_epoch_end, which is no trainer hook (the trainer has no epochs: \
on_episode_end fires after each training episode, on_test_end after each test); the hooks are \
on_train_begin, on_episode_begin, on_episode_end, on_collect_end, on_batch_begin, on_batch_end, \
on_update_end, on_test_end, on_train_end, plot_series
"""
from __future__ import annotations

import inspect
import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from marl_note.validation import non_negative_float, optional, positive_int

__all__ = ["EVENTS", "HOOKS", "CallbackList", "EarlyStopping", "EpisodeEvents", "LambdaCallback", "metric_value",
           "stop_value"]

EVENTS = ("on_train_begin", "on_episode_begin", "on_episode_end", "on_collect_end", "on_batch_begin",
          "on_batch_end", "on_update_end", "on_test_end", "on_train_end")
HOOKS = (*EVENTS, "plot_series")

# Keras names a user may bring, and what fires instead
_KERAS_HINTS = {
    "on_epoch_begin": "the trainer has no epochs: on_episode_begin fires when a training episode starts",
    "on_epoch_end": "the trainer has no epochs: on_episode_end fires after each training episode, "
                    "on_test_end after each test",
    "on_train_batch_begin": "use on_batch_begin (around each learner update)",
    "on_train_batch_end": "use on_batch_end (around each learner update)",
}


def _not_a_hook(name: str) -> str:
    hint = _KERAS_HINTS.get(name)
    return f"{name}, which is no trainer hook" + (f" ({hint})" if hint else "")


class CallbackList:
    """The callbacks of one training run, validated on construction, fired by event name.

    Example:
        >>> class Series:
        ...     def plot_series(self):
        ...         return {"elo": [(10, 1210.0)]}
        >>> CallbackList([Series()]).plot_series()
        {'elo': [(10, 1210.0)]}
        >>> CallbackList([Series()]).listens("on_episode_end")
        False
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
                raise TypeError(f"callback {name} has {', '.join(_not_a_hook(u) for u in unknown)}; "
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

    def listens(self, event: str) -> bool:
        """Whether any callback has ``event`` (the trainer skips the work of an event nobody hears)."""
        return any(getattr(cb, event, None) is not None for cb in self.callbacks)

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


class EpisodeEvents:
    """The collector's per-episode calls (``episode_begin``/``episode_end``) that fire the episode
    events, counting training episodes from ``episodes``; ``reward_of(returns)`` is one episode's
    reward metric. :meth:`hooks` leaves out an event no callback has, so it costs nothing.

    Example:
        >>> seen = []
        >>> callbacks = CallbackList([LambdaCallback(on_episode_end=lambda episode, logs: seen.append(
        ...     (episode, logs["reward"])))])
        >>> hooks = EpisodeEvents(callbacks, None, 5, lambda returns: float(returns.mean())).hooks()
        >>> hooks["episode_begin"] is None
        True
        >>> hooks["episode_end"](0, np.array([1.0, 3.0]), 9, None)
        >>> seen
        [(5, 2.0)]
    """

    def __init__(self, callbacks: CallbackList, trainer: Any, episodes: int,
                 reward_of: Callable[[np.ndarray], float]):
        self.callbacks, self.trainer, self.reward_of = callbacks, trainer, reward_of
        self.begun = self.ended = episodes

    def begin(self, env_index: int) -> None:
        self.callbacks.fire("on_episode_begin", self.trainer, self.begun, {"env_index": env_index})
        self.begun += 1

    def end(self, env_index: int, returns: np.ndarray, length: int, tag: Any) -> None:
        logs = {"returns": returns, "length": length, "env_index": env_index, "reward": self.reward_of(returns),
                "tag": tag}
        self.callbacks.fire("on_episode_end", self.trainer, self.ended, logs)
        self.ended += 1

    def hooks(self) -> dict[str, Callable[..., None] | None]:
        """The collector's ``episode_begin``/``episode_end`` arguments."""
        return {"episode_begin": self.begin if self.callbacks.listens("on_episode_begin") else None,
                "episode_end": self.end if self.callbacks.listens("on_episode_end") else None}


# what a LambdaCallback function is called with: the event's arguments after the trainer
LAMBDA_ARGS = {"on_train_begin": (), "on_episode_begin": ("episode", "logs"), "on_episode_end": ("episode", "logs"),
               "on_collect_end": ("stats", "episodes"), "on_batch_begin": ("batch", "logs"),
               "on_batch_end": ("batch", "logs"), "on_update_end": ("metrics", "episodes"),
               "on_test_end": ("result", "episodes"), "on_train_end": ("stats",), "plot_series": ()}


class LambdaCallback:
    """A callback from plain functions, one per event, called like Keras' ``LambdaCallback``.

    Each function gets the event's arguments *without* the trainer (Keras' lambdas do not get the
    model either): ``on_episode_end(episode, logs)``, ``on_batch_end(batch, logs)``,
    ``on_test_end(result, episodes)``, ``on_collect_end(stats, episodes)``,
    ``on_update_end(metrics, episodes)``, ``on_train_begin()``, ``on_train_end(stats)`` and
    ``plot_series()``. The trainer of the running event is ``callback.trainer``, so a function can
    stop training with ``callback.trainer.stop_training = True``. A function that cannot take its
    event's arguments, or an event the trainer does not have (Keras' ``on_epoch_end``), is refused
    here, before training.

    Example:
        >>> returns = []
        >>> cb = LambdaCallback(on_episode_end=lambda episode, logs: returns.append(logs["returns"]))
        >>> cb
        LambdaCallback(on_episode_end)
        >>> cb.on_episode_end(None, 0, {"returns": np.array([9.0])})
        >>> returns
        [array([9.])]
        >>> LambdaCallback(on_test_end=lambda result: None)
        Traceback (most recent call last):
        ...
        TypeError: LambdaCallback on_test_end is called with (result, episodes); the function takes (result)
    """

    def __init__(self, **functions: Callable[..., Any]):
        if not functions:
            raise TypeError(f"LambdaCallback needs at least one function; the events are {', '.join(HOOKS)}")
        self.trainer: Any = None
        for event, fn in functions.items():
            if event not in LAMBDA_ARGS:
                raise TypeError(f"LambdaCallback got {_not_a_hook(event)}; the hooks are {', '.join(HOOKS)}")
            if not callable(fn):
                raise TypeError(f"LambdaCallback {event} must be a function, got {type(fn).__name__}")
            _check_arity(event, fn, LAMBDA_ARGS[event])
            setattr(self, event, fn if event == "plot_series" else self._with_trainer(fn))
        self._events = tuple(functions)

    def _with_trainer(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def hook(trainer: Any, *args: Any) -> Any:
            self.trainer = trainer
            return fn(*args)
        return hook

    def __repr__(self) -> str:
        return f"LambdaCallback({', '.join(self._events)})"


def _check_arity(event: str, fn: Callable[..., Any], args: tuple[str, ...]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: it is called and may raise then
        return
    try:
        signature.bind(*args)
    except TypeError:
        params = ", ".join(signature.parameters)
        raise TypeError(f"LambdaCallback {event} is called with ({', '.join(args)}); the function takes "
                        f"({params})") from None


class EarlyStopping:
    """Stop training when the training return is good enough, or the test metric stops improving.

    - ``trial_count`` + ``criterion`` (the original library's names): after each training episode,
      the mean of the last ``trial_count`` episodes' rewards (each episode's reward metric, by
      default the learning seats' mean return) is compared with ``criterion``; reaching it stops.
    - ``patience``: after each periodic test, a metric above the best so far by more than
      ``min_delta`` is an improvement; ``patience`` tests in a row without one stop (Keras'
      ``EarlyStopping(patience=...)`` on the test metric).

    Either may be given, or both (whichever fires first stops). Stopping sets
    ``trainer.stop_training``: training ends after the current collection chunk, whose test runs
    as the last one. The returned statistics get ``early_stopping``: ``{"stopped", "reason",
    "episode"}``. ``verbose=True`` prints the reason when it stops. The trainer's own ``stop_fn``
    works beside it. Its state restarts with each ``train()``.

    Example:
        >>> stop = EarlyStopping(trial_count=2, criterion=10.0)
        >>> class Trainer:
        ...     stop_training = False
        >>> trainer = Trainer()
        >>> stop.on_train_begin(trainer)
        >>> for episode, reward in enumerate([3.0, 12.0, 9.0]):
        ...     stop.on_episode_end(trainer, episode, {"reward": reward})
        >>> trainer.stop_training, stop.reason
        (True, 'mean reward of the last 2 training episodes 10.5 >= criterion 10')
        >>> EarlyStopping(trial_count=10)
        Traceback (most recent call last):
        ...
        ValueError: EarlyStopping: trial_count=10 without criterion stops nothing; give criterion (the mean \
reward of the last trial_count training episodes that stops training) or leave trial_count out
    """

    def __init__(self, trial_count: int | None = None, criterion: float | None = None, patience: int | None = None,
                 min_delta: float = 0.0, verbose: bool = False):
        self.trial_count = optional(positive_int, "trial_count", trial_count, "training episodes averaged")
        self.patience = optional(positive_int, "patience", patience, "tests without improvement")
        self.min_delta = non_negative_float("min_delta", min_delta)
        if criterion is not None:
            if isinstance(criterion, (bool, np.bool_)) or not isinstance(criterion, (int, float, np.number)) \
                    or not math.isfinite(float(criterion)):
                raise ValueError(f"EarlyStopping: criterion must be a finite number, got {criterion!r}")
            criterion = float(criterion)
        self.criterion: float | None = criterion
        if criterion is not None and self.trial_count is None:
            raise ValueError("EarlyStopping: criterion needs trial_count, the number of recent training episodes "
                             "whose mean reward is compared with it")
        if self.trial_count is not None and criterion is None:
            raise ValueError(f"EarlyStopping: trial_count={self.trial_count} without criterion stops nothing; give "
                             f"criterion (the mean reward of the last trial_count training episodes that stops "
                             f"training) or leave trial_count out")
        if criterion is None and self.patience is None:
            raise ValueError("EarlyStopping needs trial_count + criterion (stop on the mean training reward) "
                             "or patience (stop when the test metric stops improving)")
        self.verbose = bool(verbose)
        # only the events it needs, so that a patience-only callback costs nothing per episode
        if self.criterion is not None:
            self.on_episode_end = self._watch_reward
        if self.patience is not None:
            self.on_test_end = self._watch_test
        self.on_train_begin(None)

    def on_train_begin(self, trainer: Any) -> None:
        self.window: deque[float] = deque(maxlen=self.trial_count or 1)
        self.best = -math.inf
        self.wait = 0
        self.reason: str | None = None
        self.stopped_episode: int | None = None

    def _stop(self, trainer: Any, episode: int, reason: str) -> None:
        if self.reason is None:
            self.reason, self.stopped_episode = reason, episode
            if self.verbose:
                print(f"marl_note: EarlyStopping stops training at episode {episode}: {reason}")
        trainer.stop_training = True

    def _watch_reward(self, trainer: Any, episode: int, logs: dict[str, Any]) -> None:
        self.window.append(float(logs["reward"]))
        if len(self.window) == self.window.maxlen:
            mean = float(np.mean(self.window))
            assert self.criterion is not None  # only watched with a criterion
            if mean >= self.criterion:
                self._stop(trainer, episode + 1, f"mean reward of the last {self.trial_count} training episodes "
                                                 f"{mean:.6g} >= criterion {self.criterion:.6g}")

    def _watch_test(self, trainer: Any, result: dict[str, Any], episodes: int) -> None:
        metric = float(result["reward"])
        if metric > self.best + self.min_delta:
            self.best, self.wait = metric, 0
            return
        self.wait += 1
        if self.patience is not None and self.wait >= self.patience:
            self._stop(trainer, episodes, f"no test metric above the best {self.best:.6g} (+ min_delta "
                                          f"{self.min_delta:.6g}) in {self.wait} tests (patience {self.patience})")

    def on_train_end(self, trainer: Any, stats: dict[str, Any]) -> None:
        stats["early_stopping"] = {"stopped": self.reason is not None, "reason": self.reason,
                                   "episode": self.stopped_episode}


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
    """``stop_fn``'s result, which must be a bool (a numpy bool too); anything else raises naming the hook.

    A number is refused rather than read as a truth value: 0.5 would stop training, and a
    ``stop_fn`` that returns a score instead of a decision is a bug.

    Example:
        >>> stop_value(True), stop_value(np.float64(3.0) >= 2.0)
        (True, True)
        >>> stop_value(0.5)
        Traceback (most recent call last):
        ...
        TypeError: stop_fn must return True (stop) or False (go on), got float: 0.5
    """
    return bool(_hook_scalar("stop_fn", value, "b", "True (stop) or False (go on)"))
