"""The trainer's counters and statistics, and whole-run checkpoints (agents + counters).

A run checkpoint is a :mod:`marl_note.agents.checkpoints.format` file (manifest.json + arrays.npz, no
pickle, atomic): the manifest holds the counters, the test history and, per distinct agent, its
class name and (``agent_spaces``) the spaces it records (those of its ``saving_spaces``); the
arrays hold each agent's numpy ``state_dict`` (prefix ``agent{k}.``), with
``include_replay`` its replay buffer (prefix ``replay{k}.``), and the numpy ``state_dict()`` of each
callback that has ``state_dict``/``load_state_dict`` (prefix ``callback.<class name><n>.``, ``n``
counting callbacks of that class; an adaptive controller's state, say). Episodes in flight are not saved:
a resumed run starts fresh episodes. Loading checks the counters (:meth:`RunState.from_json`: their
types, no unknown ones, finite metrics, and that they agree with each other), the spaces each agent
was saved with against its own (:mod:`marl_note.agents.checkpoints.space_check`), every agent's
arrays and every replay buffer's contents before it assigns anything (see
:mod:`marl_note.agents.checkpoints.state_check`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from marl_note.agents.base import HasReplay, Saveable, Stateful
from marl_note.agents.checkpoints.format import CheckpointError, read_checkpoint, write_checkpoint
from marl_note.agents.checkpoints.space_check import check_agent_spaces, spaces_from_json, spaces_to_json
from marl_note.agents.checkpoints.state_check import check_agent_state, check_replay_state, load_checked
from marl_note.agents.copies import recorded_spaces
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
        """The counters of a run checkpoint; CheckpointError naming the first one that is wrong.

        Each counter must have its type (counts are integers >= 0, the best and every test metric
        a finite number, the best None before the first test) and no unknown counter may be there;
        then :meth:`check` compares them with each other.
        """
        if not isinstance(d, dict):
            raise CheckpointError(f"run checkpoint counters are {type(d).__name__}, expected an object")
        missing = [k for k in cls.__dataclass_fields__ if k not in d and k not in cls.OPTIONAL]
        if missing:
            raise CheckpointError(f"run checkpoint counters are incomplete: missing {missing}")
        unknown = sorted(str(k) for k in d if k not in cls.__dataclass_fields__)
        if unknown:
            raise CheckpointError(f"run checkpoint has unknown counters {unknown[:8]} (an edited checkpoint, or one "
                                  f"written by a newer marl_note)")
        counts = {k: _count(d[k], k) for k in ("env_steps", "agent_steps", "episodes", "updates", "best_episode",
                                               "next_test")}
        best = None if d["best"] is None else _number(d["best"], "best", finite=True)
        history, recent = d["history"], d["recent_returns"]
        if not isinstance(history, list) or not all(isinstance(h, list) and len(h) == 2 for h in history):
            raise CheckpointError("run checkpoint counter 'history' is not a list of [episodes, metric] pairs")
        if not isinstance(recent, list) or not all(isinstance(r, list) for r in recent):
            raise CheckpointError("run checkpoint counter 'recent_returns' is not a list of lists of returns")
        time_ = _number(d["training_time"], "training_time", finite=True)
        if time_ < 0:
            raise CheckpointError(f"run checkpoint counter 'training_time' is negative ({time_})")
        state = cls(**counts, best=-math.inf if best is None else best, training_time=time_,
                    history=[(_count(e, "history episodes"), _number(m, "history metric", finite=True))
                             for e, m in history],
                    recent_returns=[[_number(x, "recent_returns") for x in r] for r in recent],
                    series=series_from_json(d.get("series", {})))
        state.check()
        return state

    def check(self, num_agents: int | None = None) -> None:
        """Raise CheckpointError unless the counters agree with each other as a run leaves them.

        Every finished episode took an env step (``episodes <= env_steps``); tests happen in order
        and only at episode counts reached (``history``); ``best`` / ``best_episode`` are the first
        best test of ``history`` (``None`` / 0 before any); the next test is due after the last one
        (``next_test``); ``recent_returns`` holds the last ``min(episodes, 100)`` training
        episodes, one return per seat (``num_agents`` of them, when given).

        Example:
            >>> RunState(env_steps=50, episodes=3, history=[(2, 1.0)], best=1.0, best_episode=2, next_test=4,
            ...          recent_returns=[[0.0]] * 3).check(num_agents=1)
            >>> RunState(env_steps=50, episodes=3, best=7.0, next_test=4, recent_returns=[[0.0]] * 3).check()
            Traceback (most recent call last):
            ...
            marl_note.agents.checkpoints.format.CheckpointError: run checkpoint counters disagree: best is 7.0 ...
        """
        problems = []
        if self.episodes > self.env_steps:
            problems.append(f"episodes={self.episodes} exceeds env_steps={self.env_steps} (every episode takes "
                            f"a step)")
        tested = [e for e, _ in self.history]
        if tested != sorted(tested) or (tested and tested[-1] > self.episodes):
            problems.append(f"history's episode counts {tested[:8]}{' ...' if len(tested) > 8 else ''} are not in "
                            f"order up to episodes={self.episodes}")
        if not self.history:
            if self.best != -math.inf or self.best_episode != 0:
                problems.append(f"best is {self.best} (at episode {self.best_episode}) but there is no test in "
                                f"history")
        else:
            top = max(m for _, m in self.history)
            first = next(e for e, m in self.history if m == top)
            if self.best != top or self.best_episode != first:
                problems.append(f"best={self.best} at episode {self.best_episode}, but history's best test "
                                f"scored {top} at episode {first}")
            if self.next_test <= tested[-1]:
                problems.append(f"next_test={self.next_test} is not after the last test (episode {tested[-1]})")
        if len(self.recent_returns) != min(self.episodes, 100):
            problems.append(f"recent_returns holds {len(self.recent_returns)} episodes, but the last "
                            f"min(episodes, 100) = {min(self.episodes, 100)} should be there")
        widths = sorted({len(r) for r in self.recent_returns})
        if len(widths) > 1 or (widths and num_agents is not None and widths[0] != num_agents):
            problems.append(f"recent_returns rows have {widths} returns each"
                            + (f", expected {num_agents} (one per seat)" if num_agents is not None else ""))
        if problems:
            raise CheckpointError(f"run checkpoint counters disagree: {'; '.join(problems)}")


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
        if isinstance(cb, Stateful):
            name = type(cb).__name__
            out[f"{name}{sum(k.rstrip('0123456789') == name for k in out)}"] = cb
    return out


def save_run(path: str, state: RunState, agents: Sequence[Any], settings: dict[str, Any],
             include_replay: bool = True, callbacks: Sequence[Any] = ()) -> str:
    arrays: dict[str, np.ndarray] = {}
    kinds = []
    for k, agent in enumerate(distinct(agents)):
        kinds.append(type(agent).__name__)
        if isinstance(agent, Stateful):
            arrays.update({f"agent{k}.{key}": np.asarray(v) for key, v in agent.state_dict().items()})
        replay = _replay_of(agent)
        if include_replay and replay is not None:
            arrays.update({f"replay{k}.{key}": np.asarray(v) for key, v in replay.state_dict().items()})
    for key, cb in stateful_callbacks(callbacks).items():
        arrays.update({f"callback.{key}.{name}": np.asarray(v) for name, v in cb.state_dict().items()})
    import marl_note

    manifest = {"kind": KIND, "library_version": marl_note.__version__, "agents": kinds,
                "agent_spaces": [_recorded_spaces(agent) for agent in distinct(agents)],
                "counters": state.to_json(), "settings": settings}
    return write_checkpoint(path, manifest, arrays)


def _replay_of(agent: Any) -> Stateful | None:
    """``agent``'s replay buffer when it has one whose contents a checkpoint can hold, else None."""
    replay = agent.replay if isinstance(agent, HasReplay) else None
    return replay if isinstance(replay, Stateful) else None


def _recorded_spaces(agent: Any) -> dict[str, Any] | None:
    """``{name: space JSON}`` of the spaces ``agent`` records in its own checkpoints (None: it records none)."""
    if not isinstance(agent, Saveable):
        return None
    out = {}
    for name, value in recorded_spaces(agent).items():
        try:
            out[name] = spaces_to_json(value)
        except TypeError:  # a space the format cannot describe: nothing to compare on load
            continue
    return out


def _check_spaces(manifest: dict[str, Any], owners: Sequence[Any], path: str) -> None:
    """The spaces each agent was saved with (checkpoints that record them) against the agent's own."""
    recorded = manifest.get("agent_spaces")
    if recorded is None:  # written before run checkpoints recorded spaces
        return
    if not isinstance(recorded, list) or len(recorded) != len(owners):
        raise CheckpointError(f"{path}: manifest agent_spaces is not a list with one entry per agent")
    for k, (agent, spaces) in enumerate(zip(owners, recorded)):
        if spaces is None:
            continue
        what = f"{path}: agent {k} ({type(agent).__name__})"
        if not isinstance(spaces, dict):
            raise CheckpointError(f"{what}: manifest agent_spaces entry is not an object")
        decoded = {}
        for name, d in spaces.items():
            try:
                decoded[name] = spaces_from_json(d)
            except CheckpointError as exc:
                raise CheckpointError(f"{what}: manifest agent_spaces {name}: {exc}") from None
        check_agent_spaces(agent, decoded, what, list(decoded),
                           hint="; resume with agents built for the spaces the run was saved with")


def load_run(path: str, agents: Sequence[Any], callbacks: Sequence[Any] = ()) -> RunState:
    """Check the checkpoint against ``agents`` first (counters, the spaces each agent was saved with,
    every agent's arrays, every replay buffer's contents), then load their states and the states of
    those ``callbacks`` it holds one for (a callback's saved state without the callback is ignored);
    return the counters.

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
        state.check(num_agents=len(agents))
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    _check_spaces(manifest, owners, path)
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
        if isinstance(agent, Stateful):
            loaded, previous = check_agent_state(agent, part, what)
        elif part:
            raise CheckpointError(f"{what}: the checkpoint holds a state but the agent has no load_state_dict()")
        replay = _replay_of(agent)
        if replay_state:
            if replay is None:
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
