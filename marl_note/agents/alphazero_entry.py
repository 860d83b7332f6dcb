"""What AlphaZero's registry entry points at: when an env fits it, and the board games it is checked on.

The entry itself (``marl_note.agents.registry``, name ``"alphazero"``) names these by dotted path,
so reading the registry imports none of AlphaZero. When AlphaZero moves to an optional part of
the package, this module moves with it and registers the entry itself.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.types import EnvSpec
    >>> spec = EnvSpec(("agent_0",), {"agent_0": gym.spaces.Box(-1, 1, (4,))},
    ...                {"agent_0": gym.spaces.Discrete(2)}, turn_based=False, has_action_mask=False)
    >>> fit_problem("alphazero", spec, None)
    'alphazero searches turn-based board games, and this env is not turn-based'
"""
from __future__ import annotations

from typing import Any

from marl_note.agents.alphazero import board_simulator_for

__all__ = ["fit_problem"]


def fit_problem(algo: str, spec: Any, seats: list[str] | None = None) -> str | None:
    """Why AlphaZero cannot learn ``seats`` of the env ``spec``: not turn-based, or a board it cannot
    rebuild from the observation (only tic-tac-toe and connect four); None if it can."""
    if not spec.turn_based:
        return f"{algo} searches turn-based board games, and this env is not turn-based"
    for seat in seats or list(spec.possible_agents):
        try:
            board_simulator_for(spec.observation_space(seat), spec.action_space(seat))
        except ValueError:
            return (f"{algo} rebuilds the position from the observation, which only tic-tac-toe and connect "
                    f"four allow (seat {seat!r} observes {spec.observation_space(seat)})")
    return None
