"""Logging callbacks: TensorBoard event files and a CSV file of the periodic tests.

:class:`TensorBoard` writes with TensorBoard's own record writer and protos (the ``tensorboard``
package, ``pip install 'marl_note[tensorboard]'``); it never imports TensorFlow or PyTorch.
:class:`CSVLogger` needs nothing beyond the standard library.

Both are callbacks: pass them in ``trainer.train(..., callbacks=[...])``.
"""
from __future__ import annotations

import csv
import math
import os
import socket
import time
from itertools import count
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["CSVLogger", "TensorBoard"]

_file_ids = count()


def _path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    return Path(value)


def _scalar(value: Any) -> float | None:
    """``value`` as a float if it is one real number (not a bool), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number, np.ndarray)):
        return None
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "iuf":
        return None
    return float(arr)


class TensorBoard:
    """Write scalars per learner update and per periodic test to a TensorBoard event file.

    Tags (the step of each is the training env steps so far, so updates and tests share one axis
    and a resumed run goes on where it stopped):

    - ``update/<name>`` for each scalar of a learner's update metrics (``loss``, ``epsilon``, ...);
      a run with several learners puts the second and later ones under ``update/learner<k>/``;
    - ``train/reward`` and ``train/episode_length``: the mean reward metric and length of the
      training episodes finished in each collection chunk;
    - ``test/<name>`` for each number in a periodic test's result (``reward``, the metric;
      ``reward_std``; ``mean_num_steps``), and ``test/<seat>/<name>`` for its per-seat results
      (``win``, ``draw``, ``loss``, ``mean_return``) when the learner was tested against a baseline.

    Each ``train()`` writes one new ``events.out.tfevents...`` file in ``log_dir`` (created if
    missing), flushed after each test and closed when training ends; view them with
    ``tensorboard --logdir <log_dir>``. A missing ``tensorboard`` package raises an ImportError
    here, before training.

    Example:
        >>> import tempfile
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=20,
        ...                                episodes_per_train=4, test_freq=2, episodes_per_test=1, seed=0)
        >>> log_dir = tempfile.mkdtemp()
        >>> dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
        >>> stats = trainer.train([dqn], learning_mask=[1],
        ...                       plot=False, progress=False, callbacks=[TensorBoard(log_dir)])
        >>> [name.startswith("events.out.tfevents.") for name in os.listdir(log_dir)]
        [True]
    """

    def __init__(self, log_dir: str | os.PathLike):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.record_writer import RecordWriter
        except ImportError as exc:
            raise ImportError("the TensorBoard callback needs the tensorboard package: "
                              "pip install 'marl_note[tensorboard]'") from exc
        self._event_pb2, self._summary_pb2, self._record_writer = event_pb2, summary_pb2, RecordWriter
        self.log_dir = _path("log_dir", log_dir)
        if self.log_dir.exists() and not self.log_dir.is_dir():
            raise NotADirectoryError(f"TensorBoard log_dir {str(self.log_dir)!r} exists and is not a directory")
        self.path: Path | None = None  # the event file of the current (or last) train()
        self._writer: Any = None
        self._learner = 0
        self._chunk: list[tuple[float, int]] = []  # (reward, length) of the chunk's finished episodes

    # ------------------------------------------------------------------ events
    def on_train_begin(self, trainer: Any) -> None:
        self._close()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_file_ids)}"
        self.path = self.log_dir / name
        self._writer = self._record_writer(open(self.path, "wb"))  # noqa: SIM115 (closed at on_train_end)
        self._write(self._event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self._chunk = []

    def on_episode_end(self, trainer: Any, episode: int, logs: dict[str, Any]) -> None:
        self._chunk.append((float(logs["reward"]), int(logs["length"])))

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        if self._chunk:
            rewards, lengths = zip(*self._chunk)
            self._scalars(trainer, {"train/reward": float(np.mean(rewards)),
                                    "train/episode_length": float(np.mean(lengths))})
            self._chunk = []

    def on_batch_begin(self, trainer: Any, batch: int, logs: dict[str, Any]) -> None:
        self._learner = int(logs["learner"])

    def on_batch_end(self, trainer: Any, batch: int, metrics: dict[str, Any]) -> None:
        prefix = "update/" if self._learner == 0 else f"update/learner{self._learner}/"
        self._scalars(trainer, {prefix + key: value for key, value in metrics.items()})

    def on_test_end(self, trainer: Any, result: dict[str, Any], episodes: int) -> None:
        values = {f"test/{key}": value for key, value in result.items()
                  if not key.startswith("num_collected") and key != "learner_seat"}
        for seat, row in (result.get("per_seat") or {}).items():
            values.update({f"test/{seat}/{key}": value for key, value in row.items() if key != "episodes"})
        self._scalars(trainer, values)
        if self._writer is not None:
            self._writer.flush()

    def on_train_end(self, trainer: Any, stats: dict[str, Any]) -> None:
        self._close()
        if self.path is not None:
            stats["tensorboard_path"] = str(self.path)

    # ------------------------------------------------------------------ writing
    def _scalars(self, trainer: Any, values: dict[str, Any]) -> None:
        summary = self._summary_pb2.Summary
        numbers = [(tag, x) for tag, x in ((tag, _scalar(v)) for tag, v in values.items()) if x is not None]
        if not numbers or self._writer is None:
            return
        run = trainer.run_state
        step = 0 if run is None else int(run.env_steps)
        self._write(self._event_pb2.Event(wall_time=time.time(), step=step, summary=summary(
            value=[summary.Value(tag=tag, simple_value=x) for tag, x in numbers])))

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


CSV_COLUMNS = ("episodes", "env_steps", "gradient_steps", "metric", "reward_std", "mean_num_steps", "best_metric",
               "wall_time")


class CSVLogger:
    """Write one CSV row per periodic test: the counters and the test's results.

    Columns: ``episodes``, ``env_steps`` and ``gradient_steps`` (the run's counters at the test),
    ``metric`` (the test's reward metric), ``reward_std``, ``mean_num_steps``, ``best_metric``
    (the best metric so far, this test included) and ``wall_time`` (Unix seconds). Each row is
    flushed as it is written.

    An existing file is never overwritten silently: a non-empty ``path`` is refused (before
    training) unless ``append=True`` (rows go after the existing ones, whose header must be the
    same columns) or ``overwrite=True`` (it is replaced when training starts). Later ``train()``
    calls with the same logger append to the file it wrote.

    Example:
        >>> import tempfile
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=20,
        ...                                episodes_per_train=4, test_freq=2, episodes_per_test=1, seed=0)
        >>> path = os.path.join(tempfile.mkdtemp(), "tests.csv")
        >>> dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
        >>> stats = trainer.train([dqn], learning_mask=[1],
        ...                       plot=False, progress=False, callbacks=[CSVLogger(path)])
        >>> rows = list(csv.DictReader(open(path)))
        >>> len(rows) == len(stats["test_history"]), rows[-1]["episodes"] == str(stats["num_collected_episodes"])
        (True, True)
        >>> CSVLogger(path)
        Traceback (most recent call last):
        ...
        FileExistsError: CSVLogger: ... already exists; pass append=True to add rows to it or overwrite=True ...
    """

    def __init__(self, path: str | os.PathLike, append: bool = False, overwrite: bool = False):
        self.path = _path("path", path)
        if append and overwrite:
            raise ValueError("CSVLogger: append=True and overwrite=True contradict each other; pick one")
        self.append, self.overwrite = bool(append), bool(overwrite)
        self._check_target()
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._written = False  # the file is ours from the first train() on: later ones append to it

    def _check_target(self) -> None:
        """Refuse a directory, a foreign non-empty file (unless append/overwrite), a foreign header."""
        if self.path.is_dir():
            raise IsADirectoryError(f"CSVLogger: {str(self.path)!r} is a directory; give a file path")
        if not self.path.exists() or self.path.stat().st_size == 0 or self.overwrite:
            return
        if not self.append:
            raise FileExistsError(f"CSVLogger: {str(self.path)!r} already exists; pass append=True to add rows to "
                                  f"it or overwrite=True to replace it")
        with open(self.path, newline="") as f:
            header = next(csv.reader(f), [])
        if tuple(header) != CSV_COLUMNS:
            raise ValueError(f"CSVLogger: cannot append to {str(self.path)!r}: its columns are {header}, "
                             f"this logger writes {list(CSV_COLUMNS)}")

    def on_train_begin(self, trainer: Any) -> None:
        self.on_train_end(trainer, {})
        if not self._written:
            self._check_target()  # the file may have appeared since this logger was made
        fresh = not self._written and (self.overwrite or not self.path.exists() or self.path.stat().st_size == 0)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w" if fresh else "a", newline="")  # noqa: SIM115 (closed at on_train_end)
        self._writer = csv.writer(self._file)
        self._written = True
        if fresh:
            self._writer.writerow(CSV_COLUMNS)
            self._file.flush()

    def on_test_end(self, trainer: Any, result: dict[str, Any], episodes: int) -> None:
        if self._file is None:
            return
        run = trainer.run_state
        metric = float(result["reward"])
        best = max(run.best, metric) if math.isfinite(run.best) else metric
        self._writer.writerow([episodes, run.env_steps, run.updates, metric, result.get("reward_std", ""),
                               result.get("mean_num_steps", ""), best, f"{time.time():.3f}"])
        self._file.flush()

    def on_train_end(self, trainer: Any, stats: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
