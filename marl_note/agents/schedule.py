"""The update schedule shared by the off-policy agents (numpy only, no torch, no tensorflow).

One ``update()`` call runs :func:`gradient_steps` gradient steps: none before ``learning_starts``
transitions are stored, else ``update_steps`` or, when that is None, ``replay_ratio`` times the
transitions observed since the last call (at least one); :func:`mean_metrics` runs them and
averages their metrics. DQN, DDPG, SAC, MADDPG and the ``RL`` base class all go through here.

A run's wall-time budget reaches inside an update: the trainer calls ``update()`` within
:func:`stop_updates_when`, and :func:`mean_metrics` (and PPO's and MAPPO's minibatch loops) end the
call's gradient steps early once :func:`updates_cut_short` says so, so that one long update (PPO's
epochs over a pixel rollout) cannot carry a run minutes past its budget.

What "new" counts is :class:`NewSteps`' business: by default (``update_count="env_steps"``) the env
steps in which the agent acted, as the trainer reports them, so that one agent shared by N seats does
the gradient steps per env step a one-seat agent does, not N times as many; ``"transitions"`` counts
every stored transition (per seat). An agent fed by hand, with no env steps reported, counts
transitions either way. ``update_steps`` is per ``update()`` call, which the trainer makes once per
collection chunk for each learning agent however many seats it holds.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["NewSteps", "UPDATE_COUNTS", "check_update_count", "gradient_steps", "mean_metrics",
           "run_update_schedule", "stop_updates_when", "updates_cut_short"]

_STOPS: list[Callable[[], bool]] = []  # the innermost stop_updates_when block's condition last

UPDATE_COUNTS = ("env_steps", "transitions")


def check_update_count(value: Any) -> str:
    """``value`` if it names what ``replay_ratio`` multiplies (:data:`UPDATE_COUNTS`), else a ValueError."""
    if value not in UPDATE_COUNTS:
        raise ValueError(f"update_count must be 'env_steps' (replay_ratio gradient steps per env step the agent "
                         f"acted in, however many seats it holds) or 'transitions' (per stored transition, "
                         f"so N seats give N times as many), got {value!r}")
    return str(value)


class NewSteps:
    """What an agent observed since its last ``update()``: transitions and, when reported, env steps.

    :meth:`take` returns the count ``replay_ratio`` multiplies and starts over: env steps for
    ``count="env_steps"`` once any have been reported (the trainer does), else transitions.

    Example:
        >>> new = NewSteps("env_steps")
        >>> new.observed(6); new.take()  # nothing reported (an agent fed by hand): transitions
        6
        >>> new.observed(6); new.env_stepped(2); new.take()  # 3 seats of one shared agent, 2 env steps
        2
        >>> new = NewSteps("transitions"); new.observed(6); new.env_stepped(2); new.take()
        6
    """

    __slots__ = ("count", "transitions", "env_steps", "reported")

    def __init__(self, count: str = "env_steps"):
        self.count = check_update_count(count)
        self.transitions = 0
        self.env_steps = 0
        self.reported = False

    def observed(self, transitions: int) -> None:
        self.transitions += int(transitions)

    def env_stepped(self, env_steps: int) -> None:
        self.env_steps += int(env_steps)
        self.reported = True

    def take(self) -> int:
        new = self.env_steps if self.count == "env_steps" and self.reported else self.transitions
        self.transitions = self.env_steps = 0
        return new


def gradient_steps(stored: int, new: int, learning_starts: int, update_steps: int | None,
                   replay_ratio: float) -> int:
    """Gradient steps for one ``update()`` call with ``stored`` transitions, ``new`` since the last call.

    Example:
        >>> gradient_steps(stored=8, new=4, learning_starts=4, update_steps=None, replay_ratio=0.5)
        2
        >>> gradient_steps(stored=3, new=3, learning_starts=4, update_steps=1, replay_ratio=0.5)
        0
    """
    if stored == 0 or stored < learning_starts:
        return 0
    return update_steps if update_steps is not None else max(1, round(replay_ratio * new))


@contextlib.contextmanager
def stop_updates_when(stop: Callable[[], bool]) -> Iterator[None]:
    """Within the block, an ``update()`` ends its gradient steps early once ``stop()`` is True.

    The trainer wraps its updates in one when a run has a wall-time budget. ``stop`` is asked before
    every gradient step (a PPO minibatch) by :func:`mean_metrics` and the on-policy loops; an update
    it cuts reports the gradient steps it took.

    Example:
        >>> with stop_updates_when(lambda: True):
        ...     mean_metrics(lambda: {"loss": 1.0}, 5)
        {'gradient_steps': 0}
        >>> updates_cut_short()
        False
    """
    if not callable(stop):
        raise TypeError(f"stop_updates_when(stop) takes a function stop() -> bool, got {stop!r}")
    _STOPS.append(stop)
    try:
        yield
    finally:
        _STOPS.remove(stop)


def updates_cut_short() -> bool:
    """True when an enclosing :func:`stop_updates_when` says the current update must end now."""
    return any(stop() for stop in _STOPS)


def mean_metrics(step: Callable[[], Mapping[str, float]], steps: int) -> dict[str, float]:
    """Call ``step()`` ``steps`` times (fewer when :func:`updates_cut_short` ends the update first); the
    mean of each metric it returns, and ``gradient_steps``: the calls made.

    Example:
        >>> losses = iter([1.0, 3.0])
        >>> mean_metrics(lambda: {"loss": next(losses)}, 2)
        {'loss': 2.0, 'gradient_steps': 2}
    """
    totals: dict[str, float] = {}
    done = 0
    while done < steps and not updates_cut_short():
        for k, v in step().items():
            totals[k] = totals.get(k, 0.0) + float(v)
        done += 1
    return {**{k: v / done for k, v in totals.items()}, "gradient_steps": done}


def _mean_metrics(totals: dict[Any, float], steps: int) -> dict[str, Any]:
    return {k: v / steps for k, v in totals.items()} if steps else {}


def run_update_schedule(agent, batch_size: int, step: Callable[[int], Mapping[Any, float]], *, new: int = 0,
                        extra: Callable[[], Mapping[str, Any]] = dict,
                        summarise: Callable[[dict[Any, float], int], dict[str, Any]] = _mean_metrics
                        ) -> dict[str, Any]:
    """One ``update()`` call's gradient steps, for the ``RL`` base class (per-optimiser losses).

    Nothing happens before ``agent.learning_starts`` transitions are stored (``{"gradient_steps": 0}``).
    Otherwise ``step(batch_size)`` runs ``agent.update_steps`` times, or, when that is None,
    ``max(1, round(agent.replay_ratio * new))`` times for ``new`` transitions observed since the last
    call; its metrics are summed per key and handed to ``summarise(totals, steps)`` (the mean by
    default), then ``extra()`` (e.g. policy metrics) and ``gradient_steps`` are added.

    Example:
        >>> from types import SimpleNamespace
        >>> agent = SimpleNamespace(replay=[0] * 8, learning_starts=4, update_steps=None, replay_ratio=0.5)
        >>> losses = iter([1.0, 3.0])
        >>> run_update_schedule(agent, 2, lambda b: {"loss": next(losses)}, new=4, extra=lambda: {"eps": 0.1})
        {'loss': 2.0, 'eps': 0.1, 'gradient_steps': 2}
        >>> agent.learning_starts = 9; run_update_schedule(agent, 2, lambda b: {}, new=4)
        {'gradient_steps': 0}
    """
    ratio = agent.replay_ratio if agent.update_steps is None else 0.0  # RL agents have only update_steps
    steps = gradient_steps(len(agent.replay), new, agent.learning_starts, agent.update_steps, ratio)
    if not steps:
        return {"gradient_steps": 0}
    totals: dict[Any, float] = {}
    done = 0
    while done < steps and not updates_cut_short():
        for k, v in step(int(batch_size)).items():
            totals[k] = totals[k] + v if k in totals else v
        done += 1
    metrics = summarise(totals, done)
    metrics.update(extra())
    metrics["gradient_steps"] = done
    return metrics
