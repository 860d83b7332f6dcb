"""Checkpoint policies for a training run: periodic, best-k by the test metric, last; a trainer callback.

:class:`CheckpointManager` owns one directory. Each checkpoint it writes is a subdirectory in the
library's checkpoint format (a ``manifest.json`` and an ``arrays-<hash>.npz``, no pickle, written
atomically): the whole run (``trainer.save_checkpoint``, resumable with
``train(..., resume_from=...)``) or, with ``save_param_only``, the learning agents' weights
(``agent.save_param``, loaded with ``agent.restore_param``). An index file,
``marl_note-checkpoints.json``, lists the checkpoints the manager wrote; it deletes only those, and
only after the checkpoint that replaces them is fully written. See :class:`CheckpointManager`.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np

from marl_note.agents.base import Saveable
from marl_note.agents.checkpoints import CheckpointError
from marl_note.atomic_files import remove_quietly, remove_stale_temps, write_atomically

__all__ = ["CheckpointManager", "INDEX"]

INDEX = "marl_note-checkpoints.json"
_FORMAT = "marl_note.checkpoint_manager/1"
_PREFIX = {"periodic": "episode", "best": "best-episode", "last": "last-episode"}
_NAME = re.compile(r"(episode|best-episode|last-episode)-[0-9]{6,}(-[0-9]+)?")
_LEARNER_DIR = re.compile(r"learner[0-9]+")
_MANIFEST = "manifest.json"
_OWN_FILE = re.compile(r"arrays(-[0-9a-f]{16})?\.npz|\.marl_note-.+")  # a checkpoint's arrays and temporary files
_LEFTOVER = ".marl_note-"  # temporary files of an interrupted write carry this prefix
_STATES = ("writing", "done", "deleting")
MONITORS = ("reward", "reward_std", "mean_num_steps")  # scalar keys of every periodic test result


class CheckpointManager:
    """Save a run's checkpoints into the directory ``path`` by the original library's policies.

    A trainer callback: ``trainer.train(..., callbacks=[CheckpointManager(path, ...)])``.

    - ``save_freq=N``: a checkpoint every N training episodes, named ``episode-<count>``; written at
      the end of the first chunk (collection and update round) that passes a multiple of N, so
      ``<count>`` is the episode count there (a chunk may finish several episodes).
      ``max_save_files=M`` keeps the M newest of them, deleting the oldest.
    - ``save_best_only=True``: one checkpoint, ``best-episode-<count>``, replaced after each periodic
      test whose metric beats it (the trainer's ``test_freq`` sets how often that is checked).
      ``save_top_k=K``: the K best tests' checkpoints (a new one must beat the worst kept).
      ``monitor`` is the test result compared (``"reward"``, the trainer's test metric;
      ``"reward_std"``, ``"mean_num_steps"``) and ``mode`` whether higher (``"max"``) or lower
      (``"min"``) is better; a NaN metric never counts as better.
    - ``save_last=True`` (default): ``last-episode-<count>`` when training ends, replacing the
      previous one.
    - ``save_param_only=True``: only the learning agents' weights (``agent.save_param``): with one
      learning agent each checkpoint directory is its weights checkpoint; with several it holds
      ``learner0``, ``learner1``, ... (in ``trainer.learners`` order). Otherwise the whole run
      (every agent's state, replay buffers unless ``include_replay=False``, counters, test history).

    ``path`` must be missing, empty, or a directory this class wrote into before (recognised by
    its ``marl_note-checkpoints.json`` index); it is reused then, its checkpoints taking part in
    ``max_save_files`` and ``save_top_k`` (resuming a run keeps counting). Anything else is refused
    with a CheckpointError when training begins, before any step. Files of your own in ``path`` or
    inside a checkpoint directory are never deleted. A save that fails (a full disk, a crash)
    leaves every earlier checkpoint in place; the next run in ``path`` removes what it left. The
    temporary files (``.marl_note-tmp-*``) of a process killed while it wrote the index are removed
    by the next manager (when training begins) or save in ``path``, as soon as they are stale: the
    writer's process is gone, or they are over an hour old (see :mod:`marl_note.atomic_files`);
    those of a save still running in another process are kept.

    Example:
        >>> import os, tempfile
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=20,
        ...                                episodes_per_train=6, test_freq=2, episodes_per_test=2, seed=0)
        >>> dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
        >>> manager = CheckpointManager(os.path.join(tempfile.mkdtemp(), "ckpt"), save_freq=2, max_save_files=2,
        ...                             save_top_k=1)
        >>> _ = trainer.train([dqn], learning_mask=[1], plot=False, progress=False, callbacks=[manager])
        >>> sorted(c["role"] for c in manager.checkpoints)
        ['best', 'last', 'periodic', 'periodic']
        >>> manager.best_model_score == max(metric for _, metric in trainer.history)
        True

    Resume with ``trainer.train(..., resume_from=manager.last_model_path, callbacks=[manager])``.
    """

    def __init__(self, path: str | os.PathLike, save_freq: int | None = None, max_save_files: int | None = None,
                 save_param_only: bool = False, save_best_only: bool = False, save_top_k: int | None = None,
                 save_last: bool = True, monitor: str = "reward", mode: str = "max",
                 include_replay: bool | None = None):
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"path must be a directory path, got {path!r}")
        if os.fspath(path).endswith(".zip"):
            raise ValueError(f"path must be a directory (the manager keeps several checkpoints in it), got {path!r}")
        self.save_freq = _optional_positive("save_freq", save_freq)
        self.max_save_files = _optional_positive("max_save_files", max_save_files)
        self.save_top_k = _optional_positive("save_top_k", save_top_k)
        for name, flag in (("save_param_only", save_param_only), ("save_best_only", save_best_only),
                           ("save_last", save_last)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        if self.max_save_files is not None and self.save_freq is None:
            raise ValueError("max_save_files limits the periodic checkpoints of save_freq; set save_freq too")
        if save_best_only and self.save_top_k is not None:
            raise ValueError("save_best_only keeps the single best checkpoint, the same as save_top_k=1; "
                             "pass one of them")
        if save_best_only and self.save_freq is not None:
            raise ValueError("save_best_only saves only the best checkpoint (checked after each periodic test, "
                             "every test_freq episodes), so save_freq would have no effect; to keep periodic "
                             "checkpoints beside the best one, pass save_freq with save_top_k=1")
        if monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {MONITORS} (scalars of every periodic test), got {monitor!r}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' (a higher {monitor} is better) or 'min', got {mode!r}")
        if include_replay is not None and not isinstance(include_replay, bool):
            raise TypeError(f"include_replay must be True, False or None, got {include_replay!r}")
        if include_replay and save_param_only:
            raise ValueError("include_replay=True needs whole-run checkpoints; save_param_only saves weights only")
        self.path = os.path.abspath(os.fspath(path))
        self.save_param_only, self.save_best_only, self.save_last = save_param_only, save_best_only, save_last
        self.top_k = 1 if save_best_only else self.save_top_k
        if self.save_freq is None and self.top_k is None and not save_last:
            raise ValueError("this CheckpointManager would never save: set save_freq, save_best_only, "
                             "save_top_k or save_last=True")
        self.monitor, self.mode = monitor, mode
        self.include_replay = include_replay is not False
        self._entries: list[dict[str, Any]] | None = None  # the index, once read
        self._pending: int | None = None  # episode count of a periodic save due at the end of this chunk
        self._updates_seen = 0

    def __repr__(self) -> str:
        return f"CheckpointManager({self.path!r}, save_freq={self.save_freq}, top_k={self.top_k})"

    # ------------------------------------------------------------------ trainer events
    def on_train_begin(self, trainer: Any) -> None:
        """Check ``path`` (refusing a foreign directory), read the index, clean up an interrupted save."""
        self._entries = self._open()
        self._pending, self._updates_seen = None, 0
        if self.save_param_only:
            lacking = [type(a).__name__ for a in trainer.learners if not isinstance(a, Saveable)]
            if lacking:
                raise TypeError(f"save_param_only needs agent.save_param(); {', '.join(lacking)} has none "
                                f"(save whole runs instead: save_param_only=False)")

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        if self._pending is not None:  # the previous chunk ended without the updates we waited for
            self._save(trainer, "periodic", self._pending, None)
        self._updates_seen = 0
        if self.save_freq is not None and episodes // self.save_freq > (episodes - stats.episodes) // self.save_freq:
            self._pending = episodes

    def on_update_end(self, trainer: Any, metrics: Any, episodes: int) -> None:
        self._updates_seen += 1
        if self._pending is not None and self._updates_seen >= len(trainer.learners):
            self._save(trainer, "periodic", self._pending, None)

    def on_test_end(self, trainer: Any, result: dict[str, Any], episodes: int) -> None:
        if self._pending is not None:
            self._save(trainer, "periodic", self._pending, None)
        if self.top_k is None:
            return
        metric = float(result[self.monitor])
        if math.isnan(metric):
            return
        bests = [e for e in self._done() if e["role"] == "best"]
        sign = -1.0 if self.mode == "max" else 1.0
        # best first; among equal metrics the older first, so a new checkpoint must beat the worst kept
        ranked = sorted([*range(len(bests)), len(bests)],
                        key=lambda i: (sign * (bests[i]["metric"] if i < len(bests) else metric), i))
        if len(bests) in ranked[:self.top_k]:
            self._save(trainer, "best", episodes, metric, drop=[bests[i] for i in ranked[self.top_k:]])

    def on_train_end(self, trainer: Any, stats: dict[str, Any]) -> None:
        if self._pending is not None:
            self._save(trainer, "periodic", self._pending, None)
        if self.save_last:
            self._save(trainer, "last", int(stats["num_collected_episodes"]), None,
                       drop=[e for e in self._done() if e["role"] == "last"])

    # ------------------------------------------------------------------ what was written
    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """The checkpoints in ``path``, oldest first: ``{"path", "role", "episodes", "metric", "params", ...}``."""
        return [{**e, "path": os.path.join(self.path, e["name"])} for e in self._done()]

    @property
    def best_k_models(self) -> dict[str, float]:
        """``{path: metric}`` of the best checkpoints kept (``save_best_only`` / ``save_top_k``)."""
        return {c["path"]: c["metric"] for c in self.checkpoints if c["role"] == "best"}

    @property
    def best_model_path(self) -> str | None:
        """The best checkpoint by ``monitor`` (None before the first)."""
        best = self._best()
        return None if best is None else best["path"]

    @property
    def best_model_score(self) -> float | None:
        best = self._best()
        return None if best is None else best["metric"]

    @property
    def last_model_path(self) -> str | None:
        """The checkpoint written when training last ended (``save_last``)."""
        last = [c["path"] for c in self.checkpoints if c["role"] == "last"]
        return last[-1] if last else None

    @property
    def latest_model_path(self) -> str | None:
        """The checkpoint written last, of any role: where to resume a run that stopped unexpectedly."""
        every = self.checkpoints
        return every[-1]["path"] if every else None

    def _best(self) -> dict[str, Any] | None:
        bests = [c for c in self.checkpoints if c["role"] == "best"]
        if not bests:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        return max(reversed(bests), key=lambda c: sign * c["metric"])  # the newest among equals

    # ------------------------------------------------------------------ the index
    def _done(self) -> list[dict[str, Any]]:
        entries = self._entries if self._entries is not None else self._read_index()
        return [e for e in entries if e["state"] == "done"]

    def _index_path(self) -> str:
        return os.path.join(self.path, INDEX)

    def _read_index(self) -> list[dict[str, Any]]:
        """The index entries (an empty list where there is no index); CheckpointError if it is not ours."""
        where = self._index_path()
        if not os.path.isfile(where):
            return []
        try:
            with open(where, "rb") as f:
                data = json.loads(f.read(16 << 20).decode("utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise CheckpointError(f"{where}: cannot read the checkpoint index ({exc}); move it away or "
                                  f"choose another path") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("checkpoints"), list):
            raise CheckpointError(f"{where} is not a marl_note checkpoint index; refusing to manage {self.path} "
                                  f"(choose another path)")
        entries = data["checkpoints"]
        for e in entries:
            if not _valid_entry(e):
                raise CheckpointError(f"{where}: entry {e!r:.200} is not a checkpoint this manager writes "
                                      f"(a damaged or edited index); move it away or choose another path")
        return entries

    def _write_index(self) -> None:
        body = json.dumps({"format": _FORMAT, "checkpoints": self._entries}, indent=1).encode()
        write_atomically(self._index_path(), lambda f: f.write(body))

    def _open(self) -> list[dict[str, Any]]:
        """The index of ``path`` after removing what an interrupted run left; refuses a foreign path."""
        if not os.path.lexists(self.path):
            return []
        if not os.path.isdir(self.path):
            raise CheckpointError(f"CheckpointManager path {self.path} exists and is not a directory")
        names = sorted(os.listdir(self.path))
        if INDEX not in names:
            others = [n for n in names if not n.startswith(_LEFTOVER)]
            if others:
                shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
                raise CheckpointError(
                    f"CheckpointManager path {self.path} is a non-empty directory that this manager did not "
                    f"write (it holds {shown} and no {INDEX}); refusing to keep checkpoints there, since the "
                    f"manager deletes old checkpoints. Choose a new or empty directory, e.g. "
                    f"{os.path.join(self.path, 'checkpoints')}")
        self._entries = self._read_index()
        remove_stale_temps(self.path, _LEFTOVER)  # temporary files of an interrupted index write
        stale = [e for e in self._entries if e["state"] != "done"
                 or not os.path.isdir(os.path.join(self.path, e["name"]))]
        for e in stale:  # half-written, half-deleted, or deleted by hand
            self._remove_files(e)
            self._entries.remove(e)
        if stale:
            self._write_index()
        return self._entries

    # ------------------------------------------------------------------ writing and deleting
    def _save(self, trainer: Any, role: str, episodes: int, metric: float | None,
              drop: list[dict[str, Any]] | None = None) -> None:
        """Write a checkpoint, commit it to the index, then delete ``drop`` (and old periodic ones)."""
        assert self._entries is not None, "on_train_begin opens the index"
        drop = list(drop or ())
        if role == "periodic":
            self._pending = None
            if self.max_save_files is not None:
                periodic = [e for e in self._done() if e["role"] == "periodic"]
                drop = periodic[:max(0, len(periodic) + 1 - self.max_save_files)]
        os.makedirs(self.path, exist_ok=True)
        remove_stale_temps(self.path, _LEFTOVER)  # of a killed process that saved here (stale by now)
        learners = list(trainer.learners) if self.save_param_only else []
        name = self._fresh_name(role, episodes)
        entry: dict[str, Any] = {"name": name, "role": role, "episodes": int(episodes), "metric": metric,
                                 "params": self.save_param_only,
                                 "learners": [type(a).__name__ for a in learners], "state": "writing"}
        self._entries.append(entry)
        self._write_index()  # a crash from here on leaves an entry that the next run cleans up
        target = os.path.join(self.path, name)
        try:
            if not self.save_param_only:
                trainer.save_checkpoint(target, include_replay=self.include_replay)
            elif len(learners) == 1:
                learners[0].save_param(target)
            else:
                os.makedirs(target)
                for k, agent in enumerate(learners):
                    agent.save_param(os.path.join(target, f"learner{k}"))
        except BaseException:
            try:
                self._remove_files(entry)
                self._entries.remove(entry)
                self._write_index()
            except OSError:
                pass  # the index still marks it "writing": the next run in this path removes it
            raise
        entry["state"] = "done"
        for old in drop:
            old["state"] = "deleting"
        self._write_index()  # the commit: the new checkpoint is listed, the dropped ones are not done
        for old in drop:
            self._remove_files(old)
            self._entries.remove(old)
        if drop:
            self._write_index()

    def _fresh_name(self, role: str, episodes: int) -> str:
        taken = {e["name"] for e in self._entries or ()} | set(os.listdir(self.path))
        base = f"{_PREFIX[role]}-{int(episodes):06d}"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        return name

    def _remove_files(self, entry: dict[str, Any]) -> None:
        """Delete the files this manager wrote for ``entry`` (a user's files there stay, and so does their folder)."""
        target = os.path.join(self.path, entry["name"])
        if not os.path.isdir(target) or os.path.islink(target):
            return
        if entry["params"] and len(entry["learners"]) > 1:
            for name in os.listdir(target):
                if _LEARNER_DIR.fullmatch(name):
                    _remove_checkpoint_files(os.path.join(target, name))
        _remove_checkpoint_files(target)


def _remove_checkpoint_files(directory: str) -> None:
    """Remove a checkpoint's manifest (first: it is no checkpoint any more), arrays and temporary files,
    then the directory if nothing else is left in it."""
    if not os.path.isdir(directory) or os.path.islink(directory):
        return
    remove_quietly(os.path.join(directory, _MANIFEST))
    for name in os.listdir(directory):
        if _OWN_FILE.fullmatch(name) and os.path.isfile(os.path.join(directory, name)):
            remove_quietly(os.path.join(directory, name))
    try:
        os.rmdir(directory)
    except OSError:
        pass  # a file of the user's is in it: keep it


def _valid_entry(e: Any) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("name"), str) and _NAME.fullmatch(e["name"]) is not None
            and e.get("role") in _PREFIX and e["name"].startswith(_PREFIX[e["role"]] + "-")
            and isinstance(e.get("episodes"), int) and not isinstance(e["episodes"], bool) and e["episodes"] >= 0
            and (e.get("metric") is None or (isinstance(e["metric"], (int, float)) and not isinstance(e["metric"], bool)
                                              and math.isfinite(e["metric"])))
            and (e["role"] != "best" or e.get("metric") is not None)
            and isinstance(e.get("params"), bool) and e.get("state") in _STATES
            and isinstance(e.get("learners"), list) and all(isinstance(n, str) for n in e["learners"]))


def _optional_positive(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)
