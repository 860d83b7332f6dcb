"""The trainer's counters and statistics, and whole-run checkpoints (agents + counters).

A run checkpoint is a :mod:`marl_note.agents.checkpoints.format` file (manifest.json + arrays.npz, no
pickle, atomic): the manifest holds the counters, the test history and, per distinct agent, its
class name; the arrays hold each agent's numpy ``state_dict`` (prefix ``agent{k}.``), with
``include_replay`` its replay buffer (prefix ``replay{k}.``), and the numpy ``state_dict()`` of each
callback that has ``state_dict``/``load_state_dict`` (prefix ``callback.<class name><n>.``, ``n``
counting callbacks of that class; an adaptive controller's state, say). Episodes in flight are not saved:
a resumed run starts fresh episodes. Loading checks the counters, every agent's arrays and every
replay buffer's contents before it assigns anything (see :mod:`marl_note.agents.checkpoints.state_check`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from marl_note.agents.checkpoints.format import CheckpointError, read_checkpoint, write_checkpoint
from marl_note.agents.checkpoints.state_check import check_agent_state, check_replay_state, load_checked
from marl_note.trainers.seats import learner_of
from marl_note.trainers.series import Series, series_from_json, series_to_json

KIND = "marl_note.run"


@dataclass
class RunState:
    """Counters of one training run, in the project's one vocabulary."""

    env_steps: int = 0
    agent_steps: int = 0
    episodes: int = 0
    updates: int = 0  # gradient steps, summed over learning policies
    best: float = -math.inf
    best_episode: int = 0
    next_test: int = 0  # the training episode count from which the next periodic test is due
    training_time: float = 0.0
    history: list[tuple[int, float]] = field(default_factory=list)  # (episodes, test metric)
    recent_returns: list[list[float]] = field(default_factory=list)  # last 100 training episodes
    series: dict[str, Series] = field(default_factory=dict)  # for the plots (see marl_note.trainers.series)

    OPTIONAL = ("series",)  # counters that checkpoints written before them lack

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["best"] = None if self.best == -math.inf else self.best
        d["history"] = [[int(e), float(m)] for e, m in self.history]
        d["series"] = series_to_json(self.series)
        return d

    def all_series(self) -> dict[str, list[tuple[int, float]]]:
        """``{"test_metric": history, name: points, ...}``: every recorded series as (episodes, value) pairs.

        Example:
            >>> RunState(history=[(10, 0.5)]).all_series()
            {'test_metric': [(10, 0.5)]}
        """
        return {"test_metric": list(self.history), **{name: s.values() for name, s in self.series.items()}}

    @classmethod
    def from_json(cls, d: Any) -> RunState:
        """The counters of a run checkpoint; CheckpointError naming the first one of the wrong type."""
        if not isinstance(d, dict):
            raise CheckpointError(f"run checkpoint counters are {type(d).__name__}, expected an object")
        missing = [k for k in cls.__dataclass_fields__ if k not in d and k not in cls.OPTIONAL]
        if missing:
            raise CheckpointError(f"run checkpoint counters are incomplete: missing {missing}")
        counts = {k: _count(d[k], k) for k in ("env_steps", "agent_steps", "episodes", "updates", "best_episode",
                                               "next_test")}
        best = None if d["best"] is None else _number(d["best"], "best")
        history, recent = d["history"], d["recent_returns"]
        if not isinstance(history, list) or not all(isinstance(h, list) and len(h) == 2 for h in history):
            raise CheckpointError("run checkpoint counter 'history' is not a list of [episodes, metric] pairs")
        if not isinstance(recent, list) or not all(isinstance(r, list) for r in recent):
            raise CheckpointError("run checkpoint counter 'recent_returns' is not a list of lists of returns")
        time_ = _number(d["training_time"], "training_time", finite=True)
        if time_ < 0:
            raise CheckpointError(f"run checkpoint counter 'training_time' is negative ({time_})")
        return cls(**counts, best=-math.inf if best is None else best, training_time=time_,
                   history=[(_count(e, "history episodes"), _number(m, "history metric")) for e, m in history],
                   recent_returns=[[_number(x, "recent_returns") for x in r] for r in recent],
                   series=series_from_json(d.get("series", {})))


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"run checkpoint counter {name!r} must be an integer >= 0, got {value!r}")
    return value


def _number(value: Any, name: str, finite: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (finite and not math.isfinite(value)):
        raise CheckpointError(f"run checkpoint counter {name!r} must be a {'finite ' if finite else ''}number, "
                              f"got {value!r}")
    return float(value)


def distinct(agents: Sequence[Any]) -> list[Any]:
    """The distinct state-owning objects among seats (joint learners instead of their seat actors)."""
    out: list[Any] = []
    for agent in agents:
        owner = learner_of(agent)
        if not any(owner is o for o in out):
            out.append(owner)
    return out


def stateful_callbacks(callbacks: Sequence[Any]) -> dict[str, Any]:
    """``{key: callback}`` of the callbacks whose state a run checkpoint carries (key: class name + count).

    Example:
        >>> class Counter:
        ...     def state_dict(self): return {}
        ...     def load_state_dict(self, state): pass
        >>> sorted(stateful_callbacks([Counter(), object(), Counter()]))
        ['Counter0', 'Counter1']
    """
    out: dict[str, Any] = {}
    for cb in callbacks:
        if callable(getattr(cb, "state_dict", None)) and callable(getattr(cb, "load_state_dict", None)):
            name = type(cb).__name__
            out[f"{name}{sum(k.rstrip('0123456789') == name for k in out)}"] = cb
    return out


def save_run(path: str, state: RunState, agents: Sequence[Any], settings: dict[str, Any],
             include_replay: bool = True, callbacks: Sequence[Any] = ()) -> str:
    arrays: dict[str, np.ndarray] = {}
    kinds = []
    for k, agent in enumerate(distinct(agents)):
        kinds.append(type(agent).__name__)
        if callable(getattr(agent, "state_dict", None)):
            arrays.update({f"agent{k}.{key}": np.asarray(v) for key, v in agent.state_dict().items()})
        replay = getattr(agent, "replay", None)
        if include_replay and replay is not None and callable(getattr(replay, "state_dict", None)):
            arrays.update({f"replay{k}.{key}": np.asarray(v) for key, v in replay.state_dict().items()})
    for key, cb in stateful_callbacks(callbacks).items():
        arrays.update({f"callback.{key}.{name}": np.asarray(v) for name, v in cb.state_dict().items()})
    import marl_note

    manifest = {"kind": KIND, "library_version": marl_note.__version__, "agents": kinds,
                "counters": state.to_json(), "settings": settings}
    return write_checkpoint(path, manifest, arrays)


def load_run(path: str, agents: Sequence[Any], callbacks: Sequence[Any] = ()) -> RunState:
    """Check the checkpoint against ``agents`` first (counters, every agent's arrays, every replay
    buffer's contents), then load their states and the states of those ``callbacks`` it holds one
    for (a callback's saved state without the callback is ignored); return the counters.

    On a CheckpointError no agent and no replay buffer has changed.
    """
    manifest, arrays = read_checkpoint(path)
    if manifest.get("kind") != KIND:
        raise CheckpointError(f"{path} is not a run checkpoint (kind {manifest.get('kind')!r}); "
                              f"load single agents with their restore()")
    owners = distinct(agents)
    kinds = [type(a).__name__ for a in owners]
    if manifest.get("agents") != kinds:
        raise CheckpointError(f"{path} holds agents {manifest.get('agents')}, but this run has {kinds}")
    try:
        state = RunState.from_json(manifest.get("counters"))
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    known = (*(f"{p}{k}." for k in range(len(owners)) for p in ("agent", "replay")), "callback.")
    stray = sorted(key for key in arrays if not key.startswith(known))
    if stray:
        raise CheckpointError(f"{path} holds arrays of no agent of this run: {stray[:8]}")
    plans = []
    for k, agent in enumerate(owners):
        what = f"{path}: agent {k} ({kinds[k]})"
        part = {key[len(f"agent{k}."):]: v for key, v in arrays.items() if key.startswith(f"agent{k}.")}
        replay_state = {key[len(f"replay{k}."):]: v for key, v in arrays.items() if key.startswith(f"replay{k}.")}
        loaded = previous = None
        if callable(getattr(agent, "state_dict", None)):
            loaded, previous = check_agent_state(agent, part, what)
        elif part:
            raise CheckpointError(f"{what}: the checkpoint holds a state but the agent has no load_state_dict()")
        replay = getattr(agent, "replay", None)
        if replay_state:
            if replay is None or not callable(getattr(replay, "load_state_dict", None)):
                raise CheckpointError(f"{what}: the checkpoint holds replay contents but the agent has no "
                                      f"replay buffer")
            check_replay_state(replay, replay_state, what)
        plans.append((what, agent, loaded, previous, replay if replay_state else None, replay_state))
    done: list[tuple[str, Any, Any]] = []
    try:  # everything checked: now load (and should a load still fail, put back what was loaded)
        for what, agent, loaded, previous, replay, replay_state in plans:
            if loaded is not None:
                load_checked(agent, loaded, previous, what)
                done.append((what, agent, previous))
            if replay is not None:
                before = None if callable(getattr(replay, "check_state_dict", None)) else replay.state_dict()
                load_checked(replay, replay_state, before, f"{what} replay")
        _load_callbacks(path, arrays, callbacks)
    except CheckpointError:
        for _what, agent, previous in reversed(done):
            agent.load_state_dict(previous)
        raise
    return state


def _load_callbacks(path: str, arrays: dict[str, Any], callbacks: Sequence[Any]) -> None:
    for key, cb in stateful_callbacks(callbacks).items():
        part = {k[len(f"callback.{key}."):]: v for k, v in arrays.items() if k.startswith(f"callback.{key}.")}
        if part:
            try:
                cb.load_state_dict(part)
            except (KeyError, TypeError, ValueError) as exc:
                raise CheckpointError(f"{path}: callback {key}: {exc}") from None


def run_summary(run: RunState, stopped: bool, tested_against_baseline: bool,
                last_test: dict[str, Any]) -> dict[str, Any]:
    """The statistics ``DecentralizedTrainer.train`` returns for a finished ``run``.

    Example:
        >>> out = run_summary(RunState(episodes=20, history=[(10, 0.5), (20, 1.0)], best=1.0, best_episode=20),
        ...                   stopped=False, tested_against_baseline=False, last_test={})
        >>> out["reward_metric_stats"]["mean"], out["best_episode"], out["num_collected_episodes"]
        (0.75, 20, 20)
    """
    metrics = np.array([m for _, m in run.history], dtype=np.float64)
    out: dict[str, Any] = {
        "reward_metric_stats": {"last": float(metrics[-1]), "mean": float(metrics.mean()),
                                "std": float(metrics.std()), "max": float(metrics.max()),
                                "min": float(metrics.min())} if len(metrics) else {},
        "num_collected_steps": run.env_steps, "num_collected_agent_steps": run.agent_steps,
        "num_collected_episodes": run.episodes, "num_gradient_steps": run.updates,
        "training_time": run.training_time, "best_reward": float(run.best),
        "best_episode": run.best_episode, "stopped_by_stop_fn": stopped, "test_history": list(run.history),
        "tested_against_baseline": tested_against_baseline,
    }
    if "per_seat" in last_test:
        out["last_test_per_seat"] = last_test["per_seat"]
    return out
