"""The update schedule shared by the off-policy agents (numpy only, no torch, no tensorflow).

:func:`run_update_schedule`: ``update_steps`` gradient steps (or ``replay_ratio`` times the new
transitions) once ``learning_starts`` transitions are stored, metrics summed and averaged.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["run_update_schedule"]


def _mean_metrics(totals: dict[Any, float], steps: int) -> dict[str, Any]:
    return {k: v / steps for k, v in totals.items()} if steps else {}


def run_update_schedule(agent, batch_size: int, step: Callable[[int], Mapping[Any, float]], *, new: int = 0,
                        extra: Callable[[], Mapping[str, Any]] = dict,
                        summarise: Callable[[dict[Any, float], int], dict[str, Any]] = _mean_metrics
                        ) -> dict[str, Any]:
    """One ``update()`` call's gradient steps, shared by the DQN, DDPG and RL base classes.

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
    if len(agent.replay) == 0 or len(agent.replay) < agent.learning_starts:
        return {"gradient_steps": 0}
    steps = agent.update_steps if agent.update_steps is not None else max(1, round(agent.replay_ratio * new))
    totals: dict[Any, float] = {}
    for _ in range(steps):
        for k, v in step(int(batch_size)).items():
            totals[k] = totals[k] + v if k in totals else v
    metrics = summarise(totals, steps)
    metrics.update(extra())
    metrics["gradient_steps"] = steps
    return metrics
