"""Seats: what the trainer accepts as "one agent per seat" and a per-seat mask, checked up front.

Also the named questions the trainers ask about an agent (instead of probing its attributes at
each call site): can it act, does it keep per-env state, is it a seat actor of a centralised
learner, which object owns its learning state.

Example:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.agents import RandomAgent
    >>> from marl_note.envs import adapt, make_spec
    >>> spec = make_spec(adapt(tictactoe_v3.env()))
    >>> player = RandomAgent(spec.action_space("player_1"))
    >>> len(check_seats(spec, {"player_1": player, "player_2": player}))
    2
    >>> seat_flags(spec, {"player_2": 1}, "learning_mask")
    [False, True]
    >>> check_seats(spec, [player])
    Traceback (most recent call last):
    ...
    ValueError: got 1 agents for an env with 2 seats ['player_1', 'player_2']
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

from marl_note.agents.base import (
    Acting,
    Agent,
    HasObservationSpace,
    JointLearner,
    JointSeat,
    PerEnvAgent,
    is_learning_agent,
)
from marl_note.types import EnvSpec

__all__ = ["accepts_env_ids", "can_act", "check_learners", "check_seats", "joint_learner_of", "learner_of",
           "positive_int", "seat_flags"]


def can_act(agent: Any) -> TypeGuard[Acting]:
    """Whether ``agent`` has an ``act`` method (all a scripted seat needs)."""
    return isinstance(agent, Acting)


def accepts_env_ids(agent: Any) -> TypeGuard[PerEnvAgent]:
    """Whether ``agent`` keeps per-env state and so wants ``act(..., env_ids=)``."""
    return isinstance(agent, PerEnvAgent) and bool(agent.accepts_env_ids)


def joint_learner_of(agent: Any) -> JointLearner | None:
    """The centralised learner ``agent`` acts for (a :class:`JointSeat`'s ``joint_learner``), else None."""
    return (agent.joint_learner or None) if isinstance(agent, JointSeat) else None


def learner_of(agent: Any) -> Any:
    """The object that owns ``agent``'s learning state: its joint learner, or the agent itself."""
    return joint_learner_of(agent) or agent


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1; a bool, a float or anything below 1 raises a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_seats(spec: EnvSpec, agents: Sequence[Any] | Mapping[str, Any]) -> list[Agent]:
    """One agent per seat in ``possible_agents`` order, from a list or a ``{seat: agent}`` dict.

    Raises naming the seat for a missing/unknown seat, an object without ``act``, or an agent
    whose declared action or observation space differs from the seat's.
    """
    names = spec.possible_agents
    if isinstance(agents, Mapping):
        missing = [a for a in names if a not in agents]
        extra = [a for a in agents if a not in names]
        if missing or extra:
            raise ValueError(f"agents dict must have exactly the env's agents {list(names)}; "
                             f"missing {missing}, unknown {extra}")
        seats = [agents[a] for a in names]
    elif isinstance(agents, Sequence) and not isinstance(agents, str):
        if len(agents) != len(names):
            raise ValueError(f"got {len(agents)} agents for an env with {len(names)} seats {list(names)}")
        seats = list(agents)
    else:
        raise TypeError(f"agents must be a list (one per seat) or a dict keyed by agent id, "
                        f"got {type(agents).__name__}")
    for name, agent in zip(names, seats):
        if not can_act(agent):
            raise TypeError(f"agent for seat {name!r} ({type(agent).__name__}) has no "
                            f"act(obs, mask, explore) method")
        space = agent.action_space if isinstance(agent, Agent) else None
        if space is not None and space != spec.action_space(name):
            raise ValueError(f"agent for seat {name!r} has action space {space}, "
                             f"but the seat's is {spec.action_space(name)}")
        space = agent.observation_space if isinstance(agent, HasObservationSpace) else None
        if space is not None and space != spec.observation_space(name):
            raise ValueError(f"agent for seat {name!r} has observation space {space}, "
                             f"but the seat's is {spec.observation_space(name)}")
    return seats


def seat_flags(spec: EnvSpec, mask: Any, what: str) -> list[bool]:
    """A per-seat 0/1 mask (a sequence in seat order, or a ``{seat: 0/1}`` dict, absent = 0) as bools."""
    n = spec.num_agents
    if isinstance(mask, Mapping):
        unknown = [a for a in mask if a not in spec.possible_agents]
        if unknown:
            raise ValueError(f"{what} names unknown agents {unknown}")
        mask = [mask.get(a, 0) for a in spec.possible_agents]
    mask = list(np.asarray(mask).reshape(-1)) if not isinstance(mask, (list, tuple)) else list(mask)
    if len(mask) != n:
        raise ValueError(f"{what} has {len(mask)} entries for an env with {n} seats {list(spec.possible_agents)}")
    if any(m not in (0, 1, True, False) for m in mask):
        raise ValueError(f"{what} entries must be 0/1 or booleans, got {mask}")
    return [bool(m) for m in mask]


def check_learners(spec: EnvSpec, seats: Sequence[Any], learn: Sequence[bool]) -> None:
    """Every learning seat can learn: ``observe``/``update``, or a joint learner on a Parallel env."""
    if not any(learn):
        raise ValueError("learning_mask has no learning seat: at least one seat must learn (use test() to only play)")
    for name, agent, ln in zip(spec.possible_agents, seats, learn):
        joint = joint_learner_of(agent)
        if joint is not None:
            if not isinstance(joint, JointLearner):
                raise TypeError(f"seat {name!r}: joint_learner {type(joint).__name__} needs observe_joint(), "
                                f"update() and seat_agents()")
            if spec.turn_based and ln:
                raise TypeError(f"seat {name!r}: {type(joint).__name__} learns from joint per-step data, "
                                f"which needs a Parallel env; this env is turn-based")
        elif ln and not is_learning_agent(agent):
            raise TypeError(f"seat {name!r} is marked as learning but {type(agent).__name__} has no "
                            f"observe()/update() methods")
