"""Copies of an agent that read its own attributes (which only ``marl_note.agents`` may do).

- :func:`recorded_spaces`: the constructor spaces a :class:`~marl_note.agents.base.Saveable` agent
  records beside its config (``saving_spaces``), by name.
- :func:`rebuild`: a new agent of the same class from its recorded constructor arguments.
- :class:`TrainingSnapshot`: everything training changes in an agent, to put back later.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from marl_note.agents.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
    >>> sorted(recorded_spaces(agent))
    ['action_space', 'observation_space']
    >>> other = rebuild(agent, {"lr": 1e-2})
    >>> other.config["lr"], other.config["hidden_sizes"], other is agent
    (0.01, (4,), False)
"""
from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.base import Saveable

__all__ = ["recorded_spaces", "rebuild", "TrainingSnapshot"]

# transitions an agent holds outside state_dict() and its replay: an on-policy rollout, an n-step window
HELD = (("rollout",), ("_feed", "nstep"))


def recorded_spaces(agent: Saveable) -> dict[str, Any]:
    """``{name: value}`` of the constructor spaces ``agent`` records in its checkpoints (its class's
    ``saving_spaces``); a name the agent lacks is left out."""
    out = {}
    for name in type(agent).saving_spaces:
        value = getattr(agent, name, None)
        if value is not None:
            out[name] = value
    return out


def _keywords(target: Any) -> set[str] | None:
    """Keyword names ``target`` (an ``__init__``) takes after ``self`` (None: any, it has ``**kwargs``)."""
    params = list(inspect.signature(target).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def rebuild(agent: Saveable, overrides: Mapping[str, Any] | None = None) -> Any:
    """A new agent of ``agent``'s class from its recorded arguments (``config``, the spaces, extra
    positional arguments) and ``overrides``; stateful arguments (a policy, noise process or replay
    buffer object) are deep-copied so the two share none. Its weights are freshly drawn."""
    cls = type(agent)
    accepted = _keywords(cls.__init__)
    spaces = {n: v for n, v in recorded_spaces(agent).items() if accepted is None or n in accepted}
    config = {k: copy.deepcopy(v) if callable(getattr(v, "state_dict", None)) else v for k, v in agent.config.items()}
    return cls(*agent.__dict__.get("_saving_varargs", ()), **{**spaces, **config, **dict(overrides or {})})


class TrainingSnapshot:
    """Everything of an agent that training changes, to put back: ``state_dict()`` (weights, optimiser
    slots and learning rates, counters, generator, exploration), the replay buffer's contents and the
    transitions held outside both (an on-policy rollout, an n-step window).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
        >>> snap = TrainingSnapshot(agent)
        >>> _ = agent.set_learning_rate(0.5)
        >>> snap.restore(agent); agent.learning_rates()
        {'optimizer': 0.001}
    """

    def __init__(self, agent: Any):
        self.state = {k: np.array(v, copy=True) for k, v in agent.state_dict().items()}
        replay: Any = getattr(agent, "replay", None)
        self.replay = ({k: np.array(v, copy=True) for k, v in replay.state_dict().items()}
                       if callable(getattr(replay, "state_dict", None)) else None)
        self.held: list[tuple[Any, str, Any]] = []
        for path in HELD:
            owner = agent
            for name in path[:-1]:
                owner = getattr(owner, name, None)
            if owner is not None and getattr(owner, path[-1], None) is not None:
                self.held.append((owner, path[-1], copy.deepcopy(getattr(owner, path[-1]))))

    def restore(self, agent: Any) -> None:
        """Put ``agent`` back as it was when the snapshot was taken."""
        agent.load_state_dict(self.state)
        if self.replay is not None:
            agent.replay.load_state_dict(self.replay)
        for owner, name, value in self.held:
            setattr(owner, name, copy.deepcopy(value))
