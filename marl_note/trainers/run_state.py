"""The trainer's counters and statistics, and whole-run checkpoints (agents + counters).

A run checkpoint is a :mod:`marl_note.agents.checkpoint` file (manifest.json + arrays.npz, no
pickle, atomic): the manifest holds the counters, the test history and, per distinct agent, its
class name; the arrays hold each agent's numpy ``state_dict`` (prefix ``agent{k}.``) and, with
``include_replay``, its replay buffer (prefix ``replay{k}.``). Episodes in flight are not saved:
a resumed run starts fresh episodes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from marl_note.agents.checkpoint import CheckpointError, check_state_shapes, read_checkpoint, write_checkpoint

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
    next_test: int = 0
    training_time: float = 0.0
    history: list[tuple[int, float]] = field(default_factory=list)  # (episodes, test metric)
    recent_returns: list[list[float]] = field(default_factory=list)  # last 100 training episodes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["best"] = None if self.best == -math.inf else self.best
        d["history"] = [[int(e), float(m)] for e, m in self.history]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RunState":
        try:
            state = cls(**{k: d[k] for k in cls.__dataclass_fields__})
        except (KeyError, TypeError) as exc:
            raise CheckpointError(f"run checkpoint counters are incomplete: {exc}") from None
        state.best = -math.inf if state.best is None else float(state.best)
        state.history = [(int(e), float(m)) for e, m in state.history]
        return state


def distinct(agents: Sequence[Any]) -> list[Any]:
    """The distinct state-owning objects among seats (joint learners instead of their seat actors)."""
    out: list[Any] = []
    for agent in agents:
        owner = getattr(agent, "joint_learner", None) or agent
        if not any(owner is o for o in out):
            out.append(owner)
    return out


def save_run(path: str, state: RunState, agents: Sequence[Any], settings: dict[str, Any],
             include_replay: bool = True) -> str:
    arrays: dict[str, np.ndarray] = {}
    kinds = []
    for k, agent in enumerate(distinct(agents)):
        kinds.append(type(agent).__name__)
        if callable(getattr(agent, "state_dict", None)):
            arrays.update({f"agent{k}.{key}": np.asarray(v) for key, v in agent.state_dict().items()})
        replay = getattr(agent, "replay", None)
        if include_replay and replay is not None and callable(getattr(replay, "state_dict", None)):
            arrays.update({f"replay{k}.{key}": np.asarray(v) for key, v in replay.state_dict().items()})
    import marl_note

    manifest = {"kind": KIND, "library_version": marl_note.__version__, "agents": kinds,
                "counters": state.to_json(), "settings": settings}
    return write_checkpoint(path, manifest, arrays)


def load_run(path: str, agents: Sequence[Any]) -> RunState:
    """Check the checkpoint against ``agents`` first, then load their states; return the counters."""
    manifest, arrays = read_checkpoint(path)
    if manifest.get("kind") != KIND:
        raise CheckpointError(f"{path} is not a run checkpoint (kind {manifest.get('kind')!r}); "
                              f"load single agents with their restore()")
    owners = distinct(agents)
    kinds = [type(a).__name__ for a in owners]
    if manifest.get("agents") != kinds:
        raise CheckpointError(f"{path} holds agents {manifest.get('agents')}, but this run has {kinds}")
    state = RunState.from_json(manifest.get("counters", {}))
    plans = []
    for k, agent in enumerate(owners):
        part = {key[len(f"agent{k}."):]: v for key, v in arrays.items() if key.startswith(f"agent{k}.")}
        if callable(getattr(agent, "state_dict", None)):
            check_state_shapes(agent.state_dict(), part, f"{path}: agent {k} ({kinds[k]})")
        replay = {key[len(f"replay{k}."):]: v for key, v in arrays.items() if key.startswith(f"replay{k}.")}
        plans.append((agent, part, replay))
    for agent, part, replay in plans:  # everything checked: now load
        if callable(getattr(agent, "load_state_dict", None)):
            agent.load_state_dict(part)
        if replay and getattr(agent, "replay", None) is not None:
            agent.replay.load_state_dict(replay)
    return state
