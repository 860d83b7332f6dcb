"""The original library's plots of a run: ``visualize_reward``, ``visualize_loss``, ``visualize_reward_loss``.

Each takes a trainer (its current or last run), a ``RunState``, a series dict or, for
:func:`visualize_reward`, the test history itself, writes a PNG atomically (default
``runs/<what>_<time>.png``) and returns its path (:func:`marl_note.trainers.plot.plot_panels`).

Example:
    >>> import tempfile, os
    >>> series = {"test_metric": [(10, 0.2), (20, 0.6)], "loss": [(5, 1.0), (10, 0.7), (20, 0.4)]}
    >>> path = visualize_reward_loss(series, os.path.join(tempfile.mkdtemp(), "run.png"), show=False)
    >>> os.path.getsize(path) > 0
    True
"""
from __future__ import annotations

from typing import Any

from marl_note.trainers.plot import plot_panels

__all__ = ["visualize_reward", "visualize_loss", "visualize_reward_loss"]


def visualize_reward(source: Any, path: str | None = None, show: bool | None = None) -> str:
    """The test reward metric and the training reward (the original library's name); returns the path.

    ``source``: the test history ``[(episodes, metric), ...]`` (as before), a trainer, a
    ``RunState`` or a series dict. Default path ``runs/reward_<time>.png``.
    """
    return plot_panels(source, ("test", "reward"), path, "reward", "reward", show)


def visualize_loss(source: Any, path: str | None = None, show: bool | None = None) -> str:
    """Every learner's losses against training episodes; returns the path (default ``runs/loss_<time>.png``).

    ``source``: a trainer, a ``RunState`` or a series dict. A ValueError if no loss was recorded.
    """
    return plot_panels(source, ("loss",), path, "loss", "loss", show)


def visualize_reward_loss(source: Any, path: str | None = None, show: bool | None = None) -> str:
    """Test metric, training reward and losses in one figure; returns the path (``runs/reward_loss_<time>.png``)."""
    return plot_panels(source, ("test", "reward", "loss"), path, "reward_loss", "reward and loss", show)
