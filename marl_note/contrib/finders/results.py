"""What :class:`~marl_note.contrib.finders.finders.LRFinder` and :class:`~marl_note.contrib.finders.finders.OptFinder`
return: the recorded curve or ranking, a suggestion, a table and a PNG plot (numpy and matplotlib only).

Example:
    >>> import numpy as np
    >>> lrs = np.geomspace(1e-4, 1e-1, 7)
    >>> result = LRFinderResult("loss", lrs, np.array([1.0, 0.9, 0.6, 0.3, 0.25, 0.4, 2.0]), smoothing=0.0,
    ...                         stop_reason="done", optimizers=("optimizer",), loss_key="loss")
    >>> [f"{lr:.0e}" for lr in result.valley()]  # the loss is within half its drop of its best here
    ['1e-03', '3e-02']
    >>> f"{result.suggestion():.1e}", f"{result.suggestion(method='steepest'):.0e}"  # the valley's centre
    ('5.6e-03', '1e-03')
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marl_note.atomic_files import write_atomically

__all__ = ["LRFinderResult", "OptFinderResult", "smooth"]

STOP_REASONS = ("done", "diverged", "collapsed", "non-finite", "budget")


def smooth(values: Sequence[float] | np.ndarray, smoothing: float) -> np.ndarray:
    """Exponential moving average with bias correction (``smoothing`` = the weight of the past, in [0, 1)).

    Example:
        >>> smooth([1.0, 3.0], 0.5).tolist()  # the first value, then the weighted mean (0.5 * 1 + 3) / 1.5
        [1.0, 2.3333333333333335]
    """
    out = np.empty(len(values))
    avg = 0.0
    for i, v in enumerate(values):
        avg = smoothing * avg + (1.0 - smoothing) * float(v)
        out[i] = avg / (1.0 - smoothing ** (i + 1)) if smoothing else avg
    return out


def _save_figure(fig: Any, path: str | None, stem: str) -> str:
    """Write ``fig`` as a PNG atomically (default ``runs/<stem>_<time>.png``); return its absolute path."""
    import matplotlib.pyplot as plt

    if path is None:
        path = os.path.join("runs", time.strftime(f"{stem}_%Y%m%d-%H%M%S.png"))
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.tight_layout()
    try:
        write_atomically(path, lambda f: fig.savefig(f, format="png"), suffix=".png")
    finally:
        plt.close(fig)
    return path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


@dataclass
class LRFinderResult:
    """One learning-rate search: ``lrs[i]`` was the learning rate when ``values[i]`` (an update
    round's loss, or a finished episode's return) was recorded.

    ``stop_reason``: ``"done"`` (all ``num`` points), ``"diverged"`` (the smoothed loss grew past
    ``diverge`` times its best), ``"collapsed"`` (the smoothed return fell below ``collapse`` of its
    best), ``"non-finite"`` (the agent refused a NaN/inf gradient step; the last value is NaN) or
    ``"budget"`` (the trainer's episode budget ran out first).
    """

    metric: str
    lrs: np.ndarray
    values: np.ndarray
    smoothing: float
    stop_reason: str
    optimizers: tuple[str, ...]
    loss_key: str | None = None
    smoothed: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.lrs = np.asarray(self.lrs, np.float64)
        self.values = np.asarray(self.values, np.float64)
        self.smoothed = smooth(self.values, self.smoothing)

    def __len__(self) -> int:
        return len(self.lrs)

    def __repr__(self) -> str:
        span = f"{self.lrs[0]:.2g}..{self.lrs[-1]:.2g}" if len(self) else "none"
        return (f"LRFinderResult(metric={self.metric!r}, points={len(self)}, lrs={span}, "
                f"stop_reason={self.stop_reason!r}, optimizers={list(self.optimizers)})")

    def suggestion(self, skip_start: int = 0, skip_end: int = 0, method: str = "valley") -> float:
        """A learning rate read off the smoothed curve, ignoring ``skip_start`` / ``skip_end`` points at
        the ends and any non-finite point.

        ``method="valley"`` (default): the centre, on the log scale, of the valley of the curve: the
        rates around the best smoothed value (lowest loss, highest return) whose value lies within
        half of the improvement the search made before its best (the valley's full width at half
        depth, like the width of a dip in a spectrum). Its left end is where the rate starts to
        matter, its right end where the updates start to hurt, so its centre keeps the same
        distance, in factors of the rate, from both. ``method="steepest"``: the rate at which the
        curve improves fastest per point (per log lr: the rates grow geometrically), the classic
        range-test reading; it sits at the valley's left edge and tends to suggest too little (on
        CartPole DQN 1e-4, which does not solve it in 3000 episodes; ``bench/bench_adaptive.py``).
        A curve that never improved has no valley: the steepest point is returned.

        Raises ValueError when fewer than 3 points remain or ``method`` is unknown.
        """
        if method not in ("valley", "steepest"):
            raise ValueError(f"method must be 'valley' or 'steepest', got {method!r}")
        keep, curve = self._kept(skip_start, skip_end)
        lrs = self.lrs[keep]
        if method == "valley":
            span = self._valley(lrs, curve)
            if span is not None:
                return float(math.sqrt(span[0] * span[1]))
        slope = np.gradient(curve)
        best = int(np.argmin(slope) if self.metric == "loss" else np.argmax(slope))
        return float(lrs[best])

    def valley(self, skip_start: int = 0, skip_end: int = 0) -> tuple[float, float] | None:
        """``(lowest, highest)`` learning rate of the valley :meth:`suggestion` centres on; None when
        the curve never improved on its first point."""
        keep, curve = self._kept(skip_start, skip_end)
        return self._valley(self.lrs[keep], curve)

    def _valley(self, lrs: np.ndarray, curve: np.ndarray) -> tuple[float, float] | None:
        cost = curve if self.metric == "loss" else -curve
        best = int(np.argmin(cost))
        depth = float(cost[:best + 1].max() - cost[best])
        if not depth > 0:
            return None
        half = cost[best] + depth / 2
        left = right = best
        while left > 0 and cost[left - 1] <= half:
            left -= 1
        while right < len(cost) - 1 and cost[right + 1] <= half:
            right += 1
        return float(lrs[left]), float(lrs[right])

    def _kept(self, skip_start: int, skip_end: int) -> tuple[np.ndarray, np.ndarray]:
        """The indices of the points a suggestion reads and their smoothed curve."""
        finite = np.flatnonzero(np.isfinite(self.values))
        keep = finite[(finite >= skip_start) & (finite < len(self) - skip_end)]
        if len(keep) < 3:
            raise ValueError(f"a suggestion needs at least 3 finite points after skipping, this search has "
                             f"{len(keep)} (of {len(self)}); search with a larger num or a wider lr range")
        return keep, smooth(self.values[keep], self.smoothing)

    get_best_lr = suggestion  # the original library's name

    def plot(self, path: str | os.PathLike | None = None) -> str:
        """PNG of the metric (raw and smoothed) against the learning rate on a log axis, the suggestion
        marked; written atomically to ``path`` (default ``runs/lr_finder_<time>.png``), absolute path returned."""
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(6, 4))
        label = (self.loss_key or "loss") if self.metric == "loss" else "episode return"
        ax.plot(self.lrs, self.values, color="C0", alpha=0.35, marker=".", linestyle="none", label=label)
        ax.plot(self.lrs, self.smoothed, color="C0", label=f"{label} (smoothed)")
        try:
            lr = self.suggestion()
            ax.axvline(lr, color="C3", linestyle="--", label=f"suggestion {lr:.2g}")
            span = self.valley()
            if span is not None:
                ax.axvspan(*span, color="C3", alpha=0.08, label="valley (within half the drop of the best)")
        except ValueError:
            pass
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel(label)
        ax.set_title(f"learning-rate search ({self.stop_reason})")
        ax.grid(alpha=0.3)
        ax.legend()
        return _save_figure(fig, None if path is None else os.fspath(path), "lr_finder")


@dataclass
class OptFinderResult:
    """Candidates ranked by ``score`` (the mean test metric, higher first; or the final loss, lower
    first); a candidate whose training was refused for a NaN/inf step ranks last with score NaN.

    ``rows`` are dicts in rank order: ``rank``, ``index`` (in the candidate list), ``candidate``,
    ``score``, ``diverged``, ``error``, ``same_init`` (whether it started from the shared initial
    weights), ``episodes``, ``gradient_steps``, ``losses`` (one per update round) and
    ``test_history`` (``(episodes, metric)`` pairs). ``best_agent`` is the trained agent of the
    best candidate.
    """

    metric: str
    rows: list[dict[str, Any]]
    best_agent: Any = None

    @property
    def best(self) -> dict[str, Any]:
        """The overrides of the best candidate."""
        return dict(self.rows[0]["candidate"])

    def scores(self) -> list[float]:
        """Scores in rank order."""
        return [row["score"] for row in self.rows]

    def table(self) -> str:
        """The ranking as a small text table.

        Example:
            >>> print(OptFinderResult("reward", [dict(rank=1, candidate={"lr": 1e-3}, score=42.0, diverged=False,
            ...                                        episodes=20, gradient_steps=100)]).table())
            rank  score  candidate
               1     42  {'lr': 0.001}
        """
        scores = ["nan" if math.isnan(row["score"]) else f"{row['score']:.4g}" for row in self.rows]
        width = max([5, *map(len, scores)])
        lines = [f"rank  {'score':>{width}}  candidate"]
        for row, score in zip(self.rows, scores):
            note = "  (diverged)" if row.get("diverged") else ""
            lines.append(f"{row['rank']:>4}  {score:>{width}}  {row['candidate']}{note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"OptFinderResult(metric={self.metric!r}, best={self.best}, candidates={len(self.rows)})"

    def plot(self, path: str | os.PathLike | None = None) -> str:
        """PNG with each candidate's score (bars, in candidate order) and its loss per update round;
        written atomically to ``path`` (default ``runs/opt_finder_<time>.png``), absolute path returned."""
        plt = _pyplot()
        fig, (bars, curves) = plt.subplots(1, 2, figsize=(10, 4))
        rows = sorted(self.rows, key=lambda r: r["index"])
        names = [", ".join(f"{k}={v}" for k, v in row["candidate"].items()) or "(defaults)" for row in rows]
        scores = [0.0 if math.isnan(row["score"]) else row["score"] for row in rows]
        bars.bar(range(len(rows)), scores, color=["C3" if row["diverged"] else f"C{i}" for i, row in enumerate(rows)])
        bars.set_xticks(range(len(rows)), names, rotation=20, ha="right", fontsize=8)
        bars.set_ylabel("mean test metric" if self.metric == "reward" else "final loss")
        bars.set_title("candidates (red: diverged)")
        for i, (row, name) in enumerate(zip(rows, names)):
            if row["losses"]:
                curves.plot(row["losses"], color=f"C{i}", label=name)
        curves.set_xlabel("update round")
        curves.set_ylabel("loss")
        curves.set_yscale("symlog")
        curves.grid(alpha=0.3)
        if any(row["losses"] for row in rows):
            curves.legend(fontsize=8)
        return _save_figure(fig, None if path is None else os.fspath(path), "opt_finder")
