"""AlphaZero's registry entry, and what it points at: when an env fits it, and the board games it is checked on.

AlphaZero is an optional part: the core's registry does not name it. Importing
:mod:`marl_note.contrib.alphazero` (any of its modules) registers :data:`ENTRY` as ``"alphazero"``
in :mod:`marl_note.agents.registry`; the command line imports it, so ``--algo alphazero`` is there.
The entry names the networks by dotted path: registering it imports no framework.

Example:
    >>> from marl_note.agents import registry
    >>> registry.get("alphazero") is ENTRY, ENTRY.backends
    (True, ('torch', 'tf'))
    >>> import gymnasium as gym
    >>> from marl_note.types import EnvSpec
    >>> spec = EnvSpec(("agent_0",), {"agent_0": gym.spaces.Box(-1, 1, (4,))},
    ...                {"agent_0": gym.spaces.Discrete(2)}, turn_based=False, has_action_mask=False)
    >>> fit_problem("alphazero", spec, None)
    'alphazero searches turn-based board games, and this env is not turn-based'
    >>> [case.label for case in check_cases()]
    ['tictactoe', 'connect_four']
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents import registry
from marl_note.agents.checks import AgentCase
from marl_note.contrib.alphazero.core import board_simulator_for
from marl_note.contrib.alphazero.mcts import BoardSimulator
from marl_note.types import Transitions

__all__ = ["ENTRY", "BoardTask", "check_cases", "fit_problem"]


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


def check_cases() -> list[AgentCase]:
    """Tic-tac-toe and connect four, as PettingZoo observes them, played by one agent in both seats."""
    return [AgentCase(game, gym.spaces.Box(0, 1, (rows, cols, 2), np.int8), gym.spaces.Discrete(n), task=_task(game))
            for game, rows, cols, n in (("tictactoe", 3, 3, 9), ("connect_four", 6, 7, 7))]


def _task(game: str) -> Any:
    return lambda num_streams, seed: BoardTask(game, num_streams, seed)


class BoardTask:
    """``num_streams`` games of a board game played by one agent in both seats, as the trainer hands them over.

    Each row is the position of one game seen by the player to move. A seat's transition runs from
    its move to its next move (reward 0), or to the end of the game (terminated; +1 for the winner,
    -1 for the loser, 0 for a draw, with the final position seen by that seat), on stream
    ``2 * game + seat``. A finished game starts again.

    Example:
        >>> task = BoardTask("tictactoe", num_streams=2, seed=0)
        >>> obs, mask = task.reset()
        >>> obs.shape, obs.dtype, mask.sum(axis=1).tolist()
        ((2, 3, 3, 2), dtype('int8'), [9, 9])
        >>> batch, obs, mask = task.step(np.array([4, 0]))
        >>> batch is None, mask.sum(axis=1).tolist()   # a seat's transition closes at its next move
        (True, [8, 8])
        >>> batch, obs, mask = task.step(np.array([0, 4]))
        >>> batch, obs, mask = task.step(np.array([8, 8]))
        >>> batch.stream.tolist(), batch.rew.tolist()
        ([0, 2], [0.0, 0.0])
    """

    def __init__(self, game: str, num_streams: int, seed: int):
        self.sim = BoardSimulator(game)
        self.n = int(num_streams)
        self.rng = np.random.default_rng(seed)

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        cells = self.sim.game.rows * self.sim.game.cols
        self.states = [np.zeros(cells, np.int8) for _ in range(self.n)]
        self.open: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, int]] = {}
        return self._observe()

    def _observe(self) -> tuple[np.ndarray, np.ndarray]:
        self.obs = self.sim.encode(self.states)
        self.mask = np.stack([self.sim.legal(s) for s in self.states])
        return self.obs, self.mask

    def step(self, actions: np.ndarray) -> tuple[Transitions | None, np.ndarray, np.ndarray]:
        rows: list[tuple[int, np.ndarray, np.ndarray, int, float, np.ndarray, np.ndarray, bool]] = []
        for k, state in enumerate(self.states):
            seat = self.sim.ply(state) % 2
            previous = self.open.pop((k, seat), None)
            if previous is not None:  # this seat's previous transition ends at this move
                rows.append((2 * k + seat, *previous, 0.0, self.obs[k], self.mask[k], False))
            self.open[(k, seat)] = (self.obs[k], self.mask[k], int(actions[k]))
            after, value = self.sim.play(state, int(actions[k]))  # after: seen by the other seat
            if value is None:
                self.states[k] = after
                continue
            for who, view, reward in ((seat, -after, -value), (1 - seat, after, value)):
                mover = self.open.pop((k, who), None)
                if mover is not None:
                    final = self.sim.encode([view])[0]
                    rows.append((2 * k + who, *mover, float(reward), final, self.sim.legal(view), True))
            self.states[k] = np.zeros_like(state)
        obs, mask = self._observe()
        if not rows:
            return None, obs, mask
        stream, o, m, a, r, no, nm, term = zip(*rows)
        batch = Transitions(obs=np.stack(o), act=np.array(a, np.int64), rew=np.array(r, np.float32),
                            next_obs=np.stack(no), terminated=np.array(term), truncated=np.zeros(len(rows), bool),
                            mask=np.stack(m), next_mask=np.stack(nm), stream=np.array(stream, np.int64))
        return batch, obs, mask


#: The registry entry of AlphaZero (registered when this module is imported).
ENTRY = registry.Algorithm(
    "alphazero", "marl_note.contrib.alphazero.core.AlphaZeroCore",
    "marl_note.contrib.alphazero.torch.alphazero.AlphaZero", "marl_note.contrib.alphazero.tf.alphazero.AlphaZero",
    ("Discrete",), on_policy=False, fits=fit_problem,
    cases=check_cases, tiny={"hidden_sizes": (8,), "buffer_size": 256, "learning_starts": 8, "update_steps": 1,
                             "num_simulations": 4})
if "alphazero" not in registry.names():  # a user's own "alphazero" entry, registered before, is kept
    registry.register(ENTRY)
