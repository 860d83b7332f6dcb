"""Which algorithm fits which env, who sits in which seat, and building the agents (the backend imported last).

The algorithms are those of :mod:`marl_note.agents.registry` (the built-in ones, AlphaZero's optional
part and any plugin named in ``MARL_NOTE_PLUGINS``, see :mod:`marl_note.cli.plugins`). Everything
here but :func:`import_backend` and :func:`build_learners` is numpy only: the fit of an algorithm is
judged from the env's spaces, the ``--agent-arg`` names from the signature of the algorithm's numpy
core, so every such mistake is reported before torch or TensorFlow is imported.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.types import EnvSpec
    >>> spec = EnvSpec(("player_1", "player_2"), dict.fromkeys(("player_1", "player_2"), gym.spaces.Box(0, 1, (9,))),
    ...                dict.fromkeys(("player_1", "player_2"), gym.spaces.Discrete(9)), True, True)
    >>> fitting_algorithms(spec)
    ['dqn', 'ppo', 'sac', 'nfsp']
    >>> plan = plan_seats(spec, "dqn", self_play=True)
    >>> plan.mode, plan.learners, plan.seat_map
    ('self-play', ['player_1', 'player_2'], {'player_1': 'agent', 'player_2': 'agent'})
    >>> check_algorithm("ddpg", spec, "tictactoe_v3")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --algo ddpg does not fit tictactoe_v3: ... Algorithms that fit: dqn, ppo, sac, nfsp
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marl_note.agents import registry
from marl_note.agents.base import JointLearnerClass
from marl_note.cli.common import CLIError
from marl_note.cli.plugins import algorithm

__all__ = ["BACKENDS", "SeatPlan", "agent_class", "build_learners", "check_agent_kwargs", "check_algorithm",
           "fitting_algorithms", "import_backend", "plan_seats"]

BACKENDS = registry.BACKENDS
_SET_BY_CLI = ("observation_space", "action_space", "observation_spaces", "action_spaces", "seed")


def fitting_algorithms(spec: Any, seats: list[str] | None = None) -> list[str]:
    """The algorithms that can learn ``seats`` (default: every seat) of the env described by ``spec``."""
    return registry.fitting(spec, seats)


def check_algorithm(algo: str, spec: Any, env_name: str, seats: list[str] | None = None) -> None:
    """Raise a CLIError naming the problem and the algorithms that fit when ``algo`` does not fit the env."""
    problem = algorithm(algo).problem(spec, seats)
    if problem is not None:
        fitting = fitting_algorithms(spec, seats)
        raise CLIError(f"--algo {algo} does not fit {env_name}: {problem}. Algorithms that fit: "
                       f"{', '.join(fitting) if fitting else 'none of ' + ', '.join(registry.names())}")


def check_agent_kwargs(algo: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse ``--agent-arg`` names the algorithm's constructor does not take (checked without a backend)."""
    core = algorithm(algo).core_cls()
    params = inspect.signature(core).parameters  # the constructor's
    allowed = sorted(p for p in params if p not in ("self", "config", *_SET_BY_CLI))  # config: a dataclass
    for key in kwargs:
        if key in _SET_BY_CLI:
            raise CLIError(f"--agent-arg {key}=... is set by the command line (spaces from the env, seed from --seed)")
        if key not in allowed:
            raise CLIError(f"--agent-arg {key}: {core.__name__.removesuffix('Core')} takes no argument {key!r}; it "
                           f"takes {', '.join(allowed)}")


@dataclass(frozen=True)
class SeatPlan:
    """Who sits where in a training run.

    ``mode``: ``"self-play"`` (one agent in every seat, all learning), ``"independent"`` (one
    agent per seat, each learning), ``"opponent"`` (one learner in ``learners[0]``, the opponent
    in the other seats) or ``"joint"`` (MADDPG: one learner, one actor per seat).
    ``seat_map`` names the checkpoint each seat's agent is saved under (None: the opponent).
    """

    mode: str
    learners: list[str]
    seat_map: dict[str, str | None]

    @property
    def checkpoint_names(self) -> list[str]:
        return sorted({n for n in self.seat_map.values() if n is not None})


def plan_seats(spec: Any, algo: str, self_play: bool = False, opponent: str | None = None,
               seat: str | None = None) -> SeatPlan:
    """The seat plan of ``train`` for these options, or a CLIError for options that contradict each other."""
    names = list(spec.possible_agents)
    if seat is not None and opponent is None:
        raise CLIError("--seat names the learner's seat when it trains against an --opponent; give --opponent too")
    if self_play and opponent is not None:
        raise CLIError("--self-play (one learner in every seat) and --opponent (a fixed player in the other seats) "
                       "exclude each other")
    if algorithm(algo).joint:
        if self_play or opponent is not None:
            raise CLIError(f"{algo} is one learner with its own actor in every seat: it takes neither --self-play "
                           f"nor --opponent")
        return SeatPlan("joint", names, dict.fromkeys(names, algo))
    if self_play:
        different = [a for a in names[1:] if spec.observation_space(a) != spec.observation_space(names[0])
                     or spec.action_space(a) != spec.action_space(names[0])]
        if different:
            raise CLIError(f"--self-play puts one agent in every seat, but seat {different[0]!r} has other spaces than "
                           f"{names[0]!r}; drop --self-play to train one agent per seat")
        return SeatPlan("self-play", names, dict.fromkeys(names, "agent"))
    if opponent is not None:
        if len(names) < 2:
            raise CLIError(f"--opponent needs an env with several seats; this one has only {names}")
        seat = names[0] if seat is None else seat
        if seat not in names:
            raise CLIError(f"--seat {seat!r} is not a seat of this env; its seats are {', '.join(names)}")
        return SeatPlan("opponent", [seat], {a: (a if a == seat else None) for a in names})
    return SeatPlan("independent", names, {a: a for a in names})


def import_backend(backend: str) -> Any:
    """``marl_note.agents.torch``, ``.tf`` or ``.numpy``, or a CLIError saying what to install."""
    framework, install = BACKENDS[backend]
    try:
        return importlib.import_module(f"marl_note.agents.{backend}")
    except ImportError as exc:
        raise CLIError(f"--backend {backend} needs {framework}, which cannot be imported ({exc}): {install}") from None


def agent_class(algo: str, backend: str) -> type:
    """The registered class of ``algo`` for ``backend``, or a CLIError (no such class, framework missing)."""
    entry = algorithm(algo)
    if backend not in entry.backends:
        raise CLIError(f"--algo {algo} has no {backend} class; use --backend {' or '.join(entry.backends)}")
    try:
        return entry.cls(backend)
    except ImportError as exc:
        raise CLIError(str(exc)) from None


def build_learners(backend: str, algo: str, spec: Any, plan: SeatPlan, kwargs: Mapping[str, Any],
                   seed: int | None) -> dict[str, Any]:
    """The learning agents of ``plan``, keyed by checkpoint name (one per distinct agent)."""
    cls = agent_class(algo, backend)
    if plan.mode == "joint":
        if not isinstance(cls, JointLearnerClass):
            raise CLIError(f"--algo {algo} is registered as joint, but {cls.__qualname__} has no from_spec(spec, ...)")
        return {algo: cls.from_spec(spec, seed=seed, **kwargs)}  # its own use of the env's state, if any
    learners = {}
    for k, name in enumerate(plan.checkpoint_names):
        seat = plan.learners[0] if name == "agent" else name
        learners[name] = cls(spec.observation_space(seat), spec.action_space(seat),
                             seed=None if seed is None else seed + k, **kwargs)
    return learners


def seat_agents(plan: SeatPlan, learners: Mapping[str, Any], opponents: Mapping[str, Any]) -> list[Any]:
    """One agent per seat, in seat order: the learners where the plan puts them, the opponents elsewhere."""
    seats = []
    for k, (seat, name) in enumerate(plan.seat_map.items()):
        if name is None:
            seats.append(opponents[seat])
        elif plan.mode == "joint":
            seats.append(learners[name].seat_agents()[k])
        else:
            seats.append(learners[name])
    return seats
