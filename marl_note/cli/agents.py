"""Which algorithm fits which env, who sits in which seat, and building the agents (the backend imported last).

Everything here but :func:`import_backend` and :func:`build_learners` is numpy only: the fit
of an algorithm is judged from the env's spaces, the ``--agent-arg`` names from the signature
of the algorithm's numpy core, so every such mistake is reported before torch or TensorFlow
is imported.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.types import EnvSpec
    >>> spec = EnvSpec(("player_1", "player_2"), dict.fromkeys(("player_1", "player_2"), gym.spaces.Box(0, 1, (9,))),
    ...                dict.fromkeys(("player_1", "player_2"), gym.spaces.Discrete(9)), True, True)
    >>> fitting_algorithms(spec)
    ['dqn', 'ppo', 'sac']
    >>> plan = plan_seats(spec, "dqn", self_play=True)
    >>> plan.mode, plan.learners, plan.seat_map
    ('self-play', ['player_1', 'player_2'], {'player_1': 'agent', 'player_2': 'agent'})
    >>> check_algorithm("ddpg", spec, "tictactoe_v3")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --algo ddpg does not fit tictactoe_v3: ... Algorithms that fit: dqn, ppo, sac
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marl_note.cli.common import CLIError

__all__ = ["ALGORITHMS", "BACKENDS", "SeatPlan", "build_learners", "check_agent_kwargs", "check_algorithm",
           "fitting_algorithms", "import_backend", "plan_seats"]


@dataclass(frozen=True)
class Algorithm:
    """An algorithm of the command line: its class name, numpy core and the action spaces it handles."""

    cls: str
    core: str  # module.Class of the numpy core (its constructor names the arguments)
    actions: tuple[str, ...]
    joint: bool = False  # one learner over all seats (needs a Parallel env)
    board_games: bool = False  # searches with the rules of a board game it rebuilds from the observation


ALGORITHMS: dict[str, Algorithm] = {
    "dqn": Algorithm("DQN", "marl_note.agents.dqn.DQNCore", ("Discrete",)),
    "ppo": Algorithm("PPO", "marl_note.agents.ppo.PPOCore", ("Discrete", "Box")),
    "ddpg": Algorithm("DDPG", "marl_note.agents.ddpg.DDPGCore", ("Box",)),
    "sac": Algorithm("SAC", "marl_note.agents.sac.SACCore", ("Discrete", "Box")),
    "maddpg": Algorithm("MADDPG", "marl_note.agents.maddpg.MADDPGCore", ("Discrete", "Box"), joint=True),
    "alphazero": Algorithm("AlphaZero", "marl_note.contrib.alphazero.core.AlphaZeroCore", ("Discrete",),
                           board_games=True),
}
BACKENDS = {"torch": ("PyTorch", "pip install 'marl_note[torch]'"),
            "tf": ("TensorFlow", "pip install 'marl_note[tf]'"),
            "numpy": ("numpy", "pip install marl_note")}
_SET_BY_CLI = ("observation_space", "action_space", "observation_spaces", "action_spaces", "seed")


def _problem(algo: str, spec: Any, seats: list[str] | None = None) -> str | None:
    """Why ``algo`` cannot learn ``seats`` (default: every seat) of the env, or None if it can."""
    from marl_note.agents.maddpg_seats import image_observation  # numpy only
    from marl_note.agents.spaces import flat_obs_dim

    info = ALGORITHMS[algo]
    if info.board_games:
        from marl_note.contrib.alphazero.core import board_simulator_for  # numpy only

        if not spec.turn_based:
            return f"{algo} searches turn-based board games, and this env is not turn-based"
        for seat in seats or list(spec.possible_agents):
            try:
                board_simulator_for(spec.observation_space(seat), spec.action_space(seat))
            except ValueError:
                return (f"{algo} rebuilds the position from the observation, which only tic-tac-toe and connect "
                        f"four allow (seat {seat!r} observes {spec.observation_space(seat)})")
    if info.joint and spec.turn_based:
        return (f"{algo} learns from every agent's step at once (joint per-step data), which needs a Parallel "
                f"env where all agents act together; this env is turn-based")
    for seat in seats or list(spec.possible_agents):
        space = spec.action_space(seat)
        if type(space).__name__ not in info.actions:
            return f"{algo} needs {' or '.join(info.actions)} actions, but seat {seat!r} has {space}"
        try:
            flat_obs_dim(spec.observation_space(seat))
        except TypeError:
            return (f"the built-in networks take Box, Discrete, MultiBinary or MultiDiscrete observations (or "
                    f"Dict/Tuple of those), but seat {seat!r} observes {spec.observation_space(seat)}")
        if info.joint and image_observation(spec.observation_space(seat)):
            return (f"{algo} reads no images (it has no conv torso yet), but seat {seat!r} observes "
                    f"{spec.observation_space(seat)}")
    return None


def fitting_algorithms(spec: Any, seats: list[str] | None = None) -> list[str]:
    """The algorithms that can learn ``seats`` (default: every seat) of the env described by ``spec``."""
    return [name for name in ALGORITHMS if _problem(name, spec, seats) is None]


def check_algorithm(algo: str, spec: Any, env_name: str, seats: list[str] | None = None) -> None:
    """Raise a CLIError naming the problem and the algorithms that fit when ``algo`` does not fit the env."""
    problem = _problem(algo, spec, seats)
    if problem is not None:
        fitting = fitting_algorithms(spec, seats)
        raise CLIError(f"--algo {algo} does not fit {env_name}: {problem}. "
                       f"Algorithms that fit: {', '.join(fitting) if fitting else 'none of ' + ', '.join(ALGORITHMS)}")


def check_agent_kwargs(algo: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse ``--agent-arg`` names the algorithm's constructor does not take (checked without a backend)."""
    module, _, name = ALGORITHMS[algo].core.rpartition(".")
    params = inspect.signature(getattr(importlib.import_module(module), name).__init__).parameters
    allowed = sorted(p for p in params if p not in ("self", "config", *_SET_BY_CLI))  # config: a dataclass
    for key in kwargs:
        if key in _SET_BY_CLI:
            raise CLIError(f"--agent-arg {key}=... is set by the command line (spaces from the env, seed from --seed)")
        if key not in allowed:
            raise CLIError(f"--agent-arg {key}: {ALGORITHMS[algo].cls} takes no argument {key!r}; it takes "
                           f"{', '.join(allowed)}")


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
    if ALGORITHMS[algo].joint:
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


def build_learners(module: Any, algo: str, spec: Any, plan: SeatPlan, kwargs: Mapping[str, Any],
                   seed: int | None) -> dict[str, Any]:
    """The learning agents of ``plan``, keyed by checkpoint name (one per distinct agent)."""
    cls = getattr(module, ALGORITHMS[algo].cls)
    if plan.mode == "joint":
        names = list(spec.possible_agents)
        return {algo: cls({a: spec.observation_space(a) for a in names}, {a: spec.action_space(a) for a in names},
                          seed=seed, **kwargs)}
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
