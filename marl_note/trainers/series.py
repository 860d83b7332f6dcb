"""What a training run records for its plots: bounded series of (training episodes, value).

A run keeps, besides its test history, one :class:`Series` per quantity in
``RunState.series`` (saved in run checkpoints):

- ``train_reward``: after each collection chunk that finished training episodes, the reward
  metric over the last 100 training episodes (the value the progress bar shows; not recorded
  while the tests play a learner against a baseline, where the training seats' mean is
  meaningless: the points of the chunks before the first test, which decides that, are dropped then);
- ``{seat}/train_reward`` in such a self-play run instead: from the first test on, each seat's mean
  training return over the same episodes (the learner's own return as ``player_1``, as ``player_2``);
- every scalar metric each learner's ``update`` returns (``loss``, ``eps``, ``gradient_steps``,
  ...), one point per update; with several learners a name is prefixed by the learner's seats
  (``"player_1/loss"``);
- ``batch_size``: the batch size each update round was given;
- each callback's ``plot_series()`` (e.g. an opponent pool's Elo rating), as the callback last
  reported it at a test.

Memory stays bounded: a series keeps at most ``max_points`` points (default 1000). When it is
full, neighbouring points are averaged pairwise and each point from then on stands for twice
as many records (its ``stride``): a point is the mean of ``stride`` consecutive records, placed
at the training episode count of the last of them. Non-finite values are not recorded.

Each series belongs to a plot panel (:data:`PANELS`), judged from its name by :func:`panel_of`.

Example:
    >>> s = Series("loss", max_points=4)
    >>> for episode in range(1, 6):
    ...     s.add(episode, float(episode))
    >>> s.stride, s.values()
    (2, [(2, 1.5), (4, 3.5), (5, 5.0)])
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from marl_note.agents.checkpoints import CheckpointError

MAX_POINTS = 1000

# plot panels, in figure order, with their titles
PANELS = {"test": "test reward metric", "reward": "training reward (last 100 episodes)", "loss": "loss",
          "exploration": "exploration", "knobs": "batch size and adapted knobs", "other": "other update metrics",
          "callbacks": "callbacks (e.g. Elo)"}
_EXPLORATION = {"eps", "epsilon", "tau", "temperature", "noise_sigma", "sigma", "noise_scale", "alpha", "log_alpha",
                "ent_coef", "entropy", "exploration_rate"}
_KNOBS = {"batch_size", "gradient_steps", "gradient_steps_per_env_step", "per_beta", "beta", "lr", "learning_rate",
          "num_updates", "update_steps", "update_batches", "n_steps", "num_steps", "clip_range", "target_kl"}


def panel_of(name: str) -> str:
    """The plot panel of a series named ``name`` (a learner prefix ``"seat/"`` is ignored).

    Example:
        >>> [panel_of(n) for n in ("test_metric", "train_reward", "player_1/loss", "eps", "batch_size", "q_mean")]
        ['test', 'reward', 'loss', 'exploration', 'knobs', 'other']
    """
    base = name.rsplit("/", 1)[-1].lower()
    if base in ("test_metric", "test_reward"):
        return "test"
    if base in ("train_reward", "training_reward"):
        return "reward"
    if "loss" in base:
        return "loss"
    if base in _EXPLORATION:
        return "exploration"
    if base in _KNOBS or base.startswith("lr"):
        return "knobs"
    if "elo" in base.split():
        return "callbacks"
    return "other"


@dataclass
class Series:
    """One recorded quantity: at most ``max_points`` points, each the mean of ``stride`` records.

    Example:
        >>> s = Series("eps")
        >>> s.add(10, 0.9); s.add(20, 0.5)
        >>> s.values(), s.panel
        ([(10, 0.9), (20, 0.5)], 'exploration')
    """

    name: str
    panel: str = ""
    stride: int = 1
    points: list[tuple[int, float]] = field(default_factory=list)
    pending: tuple[int, float, int] = (0, 0.0, 0)  # (last episodes, sum, count) of the bucket being filled
    max_points: int = MAX_POINTS

    def __post_init__(self) -> None:
        self.panel = self.panel or panel_of(self.name)
        if self.panel not in PANELS:
            raise ValueError(f"series {self.name!r}: unknown panel {self.panel!r}; the panels are {list(PANELS)}")
        if self.max_points < 2 or self.max_points % 2:
            raise ValueError(f"max_points must be an even number >= 2, got {self.max_points}")

    def add(self, episodes: int, value: float) -> None:
        """Record ``value`` at ``episodes`` training episodes (skipped if not finite)."""
        if not math.isfinite(value):
            return
        _, total, count = self.pending
        total, count = total + float(value), count + 1
        if count < self.stride:
            self.pending = (int(episodes), total, count)
            return
        self.points.append((int(episodes), total / count))
        self.pending = (0, 0.0, 0)
        if len(self.points) >= self.max_points:
            self._halve()

    def _halve(self) -> None:
        """Average neighbouring points pairwise; from now on a point stands for twice the records."""
        pts = self.points
        merged = [(pts[i + 1][0], (pts[i][1] + pts[i + 1][1]) / 2) for i in range(0, len(pts) - 1, 2)]
        self.points = merged + pts[len(merged) * 2:]
        self.stride *= 2

    def values(self) -> list[tuple[int, float]]:
        """The points, and the mean of the bucket being filled (if any) as the latest point."""
        last, total, count = self.pending
        return self.points + ([(last, total / count)] if count else [])

    def to_json(self) -> dict[str, Any]:
        return {"panel": self.panel, "stride": self.stride, "points": [[int(e), float(v)] for e, v in self.points],
                "pending": [int(self.pending[0]), float(self.pending[1]), int(self.pending[2])]}

    @classmethod
    def from_json(cls, name: str, d: Any) -> Series:
        """A saved series; CheckpointError naming the series for anything malformed."""
        what = f"run checkpoint series {name!r}"
        if not isinstance(d, dict) or set(d) != {"panel", "stride", "points", "pending"}:
            raise CheckpointError(f"{what} must be an object with panel, stride, points and pending")
        if d["panel"] not in PANELS:
            raise CheckpointError(f"{what} has unknown panel {d['panel']!r}")
        stride, points, pending = d["stride"], d["points"], d["pending"]
        if not _is_int(stride) or stride < 1:
            raise CheckpointError(f"{what}: stride must be an integer >= 1, got {stride!r}")
        pairs_ok = isinstance(points, list) and all(
            isinstance(p, list) and len(p) == 2 and _is_int(p[0]) and _is_real(p[1]) for p in points)
        if not pairs_ok:
            raise CheckpointError(f"{what}: points must be a list of [episodes, finite value] pairs")
        if not (isinstance(pending, list) and len(pending) == 3 and _is_int(pending[0]) and _is_real(pending[1])
                and _is_int(pending[2]) and 0 <= pending[2] < stride):
            raise CheckpointError(f"{what}: pending must be [episodes, sum, count] with 0 <= count < stride")
        return cls(name, d["panel"], stride, [(int(e), float(v)) for e, v in points],
                   (int(pending[0]), float(pending[1]), int(pending[2])))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def series_to_json(series: Mapping[str, Series]) -> dict[str, Any]:
    return {name: s.to_json() for name, s in series.items()}


def series_from_json(d: Any) -> dict[str, Series]:
    if not isinstance(d, dict):
        raise CheckpointError(f"run checkpoint counter 'series' is {type(d).__name__}, expected an object")
    return {str(name): Series.from_json(str(name), s) for name, s in d.items()}


def learner_labels(possible_agents: Sequence[str], seats: Sequence[Any], learn: Sequence[bool],
                   learners: Sequence[Any], owner_of: Any) -> list[str]:
    """Series-name prefixes of the learners: ``""`` for a lone learner, else its learning seats ``"a,b/"``."""
    if len(learners) <= 1:
        return [""] * len(learners)
    out = []
    for learner in learners:
        names = [a for a, seat, on in zip(possible_agents, seats, learn) if on and owner_of(seat) is learner]
        out.append(",".join(names) + "/")
    return out


class Recorder:
    """Records a run's series (into the dict it is given, the run's ``RunState.series``).

    Example:
        >>> rec = Recorder({}, labels=[""])
        >>> rec.update(0, 10, {"loss": 0.5, "eps": 0.9, "gradient_steps": 4, "note": "text"}, batch_size=64)
        >>> rec.chunk(10, train_reward=1.0)
        >>> sorted(rec.series), rec.series["batch_size"].values()
        (['batch_size', 'eps', 'gradient_steps', 'loss', 'train_reward'], [(10, 64.0)])
    """

    def __init__(self, series: dict[str, Series], labels: Sequence[str]):
        self.series, self.labels = series, list(labels)

    def add(self, name: str, episodes: int, value: float, panel: str = "") -> None:
        if name not in self.series:
            self.series[name] = Series(name, panel)
        self.series[name].add(episodes, value)

    def update(self, learner: int, episodes: int, metrics: Mapping[str, Any], batch_size: int) -> None:
        """One learner's update: its scalar metrics, and the batch size it was given (unless it
        reports its own ``batch_size``). Call it for every learner of the round, in order."""
        prefix = self.labels[learner] if learner < len(self.labels) else f"learner{learner}/"
        for key, value in metrics.items():
            if isinstance(value, (bool, np.bool_, str, bytes)) or not np.isscalar(value):
                continue
            try:
                number = float(cast(Any, value))
            except (TypeError, ValueError):  # a complex number
                continue
            self.add(f"{prefix}{key}", episodes, number)
        if learner == len(self.labels) - 1 and not (len(self.labels) == 1 and "batch_size" in metrics):
            self.add("batch_size", episodes, float(batch_size))

    def chunk(self, episodes: int, train_reward: float | None) -> None:
        """After a collection chunk: the training reward, if episodes finished since the last point."""
        if train_reward is None:
            return
        last = self.series.get("train_reward")
        if last is None or not last.values() or last.values()[-1][0] < episodes:
            self.add("train_reward", episodes, train_reward)

    def seat_rewards(self, episodes: int, rewards: Mapping[str, float]) -> None:
        """After a chunk of a self-play run: each seat's mean training return (``"{seat}/train_reward"``,
        the training-reward panel), where the mean over seats (``train_reward``) would say nothing."""
        for seat, value in rewards.items():
            name = f"{seat}/train_reward"
            last = self.series.get(name)
            if last is None or not last.values() or last.values()[-1][0] < episodes:
                self.add(name, episodes, value)

    def callbacks(self, plot_series: Mapping[str, Sequence[tuple[int, float]]]) -> None:
        """Store the callbacks' ``plot_series()`` as they are now (a series they report empty is kept)."""
        for label, points in plot_series.items():
            if not points:
                continue
            s = Series(str(label), "callbacks")
            for e, v in points:
                s.add(int(e), float(v))
            self.series[str(label)] = s
