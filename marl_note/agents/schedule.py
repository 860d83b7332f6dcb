"""The update schedule shared by the off-policy agents (numpy only, no torch, no tensorflow).

One ``update()`` call runs :func:`gradient_steps` gradient steps: none before ``learning_starts``
transitions are stored, else ``update_steps`` or, when that is None, ``replay_ratio`` times the
transitions observed since the last call (at least one); :func:`mean_metrics` runs them and
averages their metrics. DQN, DDPG, SAC, MADDPG and the ``RL`` base class all go through here.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["gradient_steps", "mean_metrics", "run_update_schedule"]


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


def mean_metrics(step: Callable[[], Mapping[str, float]], steps: int) -> dict[str, float]:
    """Call ``step()`` ``steps`` times; the mean of each metric it returns.

    Example:
        >>> losses = iter([1.0, 3.0])
        >>> mean_metrics(lambda: {"loss": next(losses)}, 2)
        {'loss': 2.0}
    """
    totals: dict[str, float] = {}
    for _ in range(steps):
        for k, v in step().items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return {k: v / steps for k, v in totals.items()} if steps else {}


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
    for _ in range(steps):
        for k, v in step(int(batch_size)).items():
            totals[k] = totals[k] + v if k in totals else v
    metrics = summarise(totals, steps)
    metrics.update(extra())
    metrics["gradient_steps"] = steps
    return metrics
