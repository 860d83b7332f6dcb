"""Scripted opponents for PettingZoo's tic-tac-toe and connect four, on the acting contract.

Each reads the board from PettingZoo's own observation (``[batch, rows, cols, 2]``, plane 0 the
pieces of the player to move, plane 1 the opponent's) and the action mask, so the same player
works in either seat of a :class:`~marl_note.trainers.DecentralizedTrainer` or in
``trainer.test_against``. Ties are broken at random with the player's own seeded generator.

Example:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.trainers import DecentralizedTrainer
    >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_test_envs=2, seed=0)
    >>> perfect = PerfectTicTacToePlayer(seed=0)
    >>> result = trainer.test_against(perfect, episodes=20)  # perfect play against random players
    >>> [result["per_seat"][seat]["loss"] for seat in ("player_1", "player_2")]
    [0.0, 0.0]
"""
from __future__ import annotations

from functools import cache

import gymnasium as gym
import numpy as np

from marl_note.contrib.board_games.rules import TIC_TAC_TOE, BoardGame, check_mask, decode, get_game

__all__ = ["BoardPlayer", "WinOrBlockPlayer", "PerfectTicTacToePlayer"]


class BoardPlayer:
    """Base of the board players: decodes and checks a batch, then picks one move per board.

    Subclasses implement ``choose(board, legal) -> action`` for one position (``board`` flat, +1 own
    pieces, -1 the opponent's; ``legal`` the legal actions, a non-empty list).

    Example:
        >>> import numpy as np
        >>> class FirstLegal(BoardPlayer):
        ...     def choose(self, board, legal):
        ...         return legal[0]
        >>> FirstLegal("connect_four").act(np.zeros((2, 6, 7, 2), np.int8)).tolist()
        [0, 0]
    """

    def __init__(self, game: str | BoardGame, seed: int | None = None):
        self.game = get_game(game)
        self.action_space = gym.spaces.Discrete(self.game.num_actions)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        """One action per observation; ``explore`` is ignored (these players always play their best)."""
        who = type(self).__name__
        boards = decode(self.game, obs, who)
        legal = check_mask(self.game, mask, boards, who)
        return np.asarray([self.choose(board, [int(a) for a in np.flatnonzero(ok)])
                           for board, ok in zip(boards, legal)], np.int64)

    def choose(self, board: np.ndarray, legal: list[int]) -> int:
        raise NotImplementedError

    def pick(self, moves: list[int]) -> int:
        """One of ``moves`` uniformly at random (the seeded tie-break)."""
        return moves[int(self.rng.integers(len(moves)))] if len(moves) > 1 else moves[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(game={self.game.name!r}, seed={self.seed})"


class WinOrBlockPlayer(BoardPlayer):
    """Plays an immediate win if it has one, else blocks the opponent's immediate win, else a random legal move.

    A one-ply player for ``"connect_four"`` or ``"tictactoe"``: it never misses a win in one and
    never leaves a single threat open, but sees nothing deeper (a double threat beats it).

    Example:
        >>> import numpy as np
        >>> player = WinOrBlockPlayer("connect_four", seed=0)
        >>> obs = np.zeros((2, 6, 7, 2), np.int8)
        >>> obs[0, 5, 0:3, 0] = 1   # own three on the bottom row: column 3 wins
        >>> obs[1, 5, 1:4, 1] = 1   # the opponent threatens on both ends: block one of them
        >>> obs[1, 4, 1:3, 0] = 1
        >>> acts = player.act(obs, np.ones((2, 7), bool))
        >>> int(acts[0]), int(acts[1]) in (0, 4)
        (3, True)
    """

    def __init__(self, game: str | BoardGame = "connect_four", seed: int | None = None):
        super().__init__(game, seed)

    def choose(self, board: np.ndarray, legal: list[int]) -> int:
        for piece in (1, -1):  # first our wins, then the opponent's
            moves = [a for a in legal if self.game.wins_with(board, a, piece)]
            if moves:
                return self.pick(moves)
        return self.pick(legal)


@cache
def _ttt_value(cells: tuple[int, ...]) -> int:
    """Exact minimax value (+1 win, 0 draw, -1 loss) for the player to move (+1 pieces) on ``cells``."""
    board = np.asarray(cells, np.int8)
    moves = TIC_TAC_TOE.legal_actions(board)
    if not moves:
        return 0
    best = -1
    for a in moves:
        value = _ttt_move_value(cells, a)
        if value > best:
            best = value
            if best == 1:
                break
    return best


def _ttt_move_value(cells: tuple[int, ...], action: int) -> int:
    """Exact value for the player to move of playing ``action`` on ``cells``."""
    board = np.asarray(cells, np.int8)
    if TIC_TAC_TOE.wins_with(board, action, 1):
        return 1
    after = board.copy()
    after[action] = 1
    return -_ttt_value(tuple(int(v) for v in -after))


class PerfectTicTacToePlayer(BoardPlayer):
    """Exact (memoised) minimax for tic-tac-toe: it never loses; random among equally good moves.

    Example:
        >>> import numpy as np
        >>> player = PerfectTicTacToePlayer(seed=0)
        >>> obs = np.zeros((1, 3, 3, 2), np.int8)
        >>> obs[0, 0, 0, 1] = obs[0, 0, 1, 1] = 1   # the opponent threatens the top row
        >>> obs[0, 1, 1, 0] = 1
        >>> player.act(obs).tolist()                # the only move that does not lose
        [2]
    """

    def __init__(self, seed: int | None = None):
        super().__init__(TIC_TAC_TOE, seed)

    def move_values(self, board: np.ndarray, legal: list[int]) -> list[int]:
        """The exact value (+1, 0, -1) of each legal move for the player to move."""
        cells = tuple(int(v) for v in board)
        return [_ttt_move_value(cells, a) for a in legal]

    def choose(self, board: np.ndarray, legal: list[int]) -> int:
        values = self.move_values(board, legal)
        best = max(values)
        return self.pick([a for a, v in zip(legal, values) if v == best])

    def __repr__(self) -> str:
        return f"PerfectTicTacToePlayer(seed={self.seed})"
