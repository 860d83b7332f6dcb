"""The rules the search players need: boards, legal moves, where a move lands, lines of a win.

A position is a flat ``int8`` array of the board's cells seen by the player to move: ``+1`` its
own pieces, ``-1`` the opponent's, ``0`` empty (row-major, as PettingZoo's ``observation`` planes
reshape). :func:`decode` turns a batch of PettingZoo observations (channels last, plane 0 the
current player's pieces, plane 1 the opponent's) into such positions, checking the shape first.

Example:
    >>> import numpy as np
    >>> game = get_game("tictactoe_v3")
    >>> obs = np.zeros((1, 3, 3, 2), np.int8); obs[0, 0, :2, 0] = 1; obs[0, 1, :2, 1] = 1
    >>> board = decode(game, obs)[0]
    >>> board.tolist()
    [1, 1, 0, -1, -1, 0, 0, 0, 0]
    >>> [a for a in game.legal_actions(board) if game.wins_with(board, a, 1)]
    [2]
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["BoardGame", "CONNECT_FOUR", "TIC_TAC_TOE", "get_game", "decode"]


def _lines(rows: int, cols: int, length: int) -> np.ndarray:
    """Every run of ``length`` cells in a row, column or diagonal, as flat cell indices."""
    out = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end_r, end_c = r + (length - 1) * dr, c + (length - 1) * dc
                if 0 <= end_r < rows and 0 <= end_c < cols:
                    out.append([(r + k * dr) * cols + c + k * dc for k in range(length)])
    return np.asarray(out, np.int64)


@dataclass(frozen=True, eq=False)
class BoardGame:
    """One classic board game: its board shape, whether pieces drop (connect four), its lines.

    Example:
        >>> CONNECT_FOUR.lines.shape, TIC_TAC_TOE.lines.shape
        ((69, 4), (8, 3))
    """

    name: str
    rows: int
    cols: int
    line_length: int
    gravity: bool  # True: an action is a column and the piece falls to its lowest empty cell
    lines: np.ndarray = field(init=False, repr=False)
    lines_at: tuple[np.ndarray, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lines = _lines(self.rows, self.cols, self.line_length)
        object.__setattr__(self, "lines", lines)
        object.__setattr__(self, "lines_at", tuple(lines[(lines == cell).any(axis=1)]
                                                   for cell in range(self.rows * self.cols)))

    @property
    def num_actions(self) -> int:
        return self.cols if self.gravity else self.rows * self.cols

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (self.rows, self.cols, 2)

    def legal_actions(self, board: np.ndarray) -> list[int]:
        """Actions that are legal on ``board`` (a column with room, or an empty cell)."""
        top = board[:self.cols] if self.gravity else board
        return [int(a) for a in np.flatnonzero(top == 0)]

    def landing(self, board: np.ndarray, action: int) -> int:
        """The cell a piece played with ``action`` occupies (the action must be legal)."""
        if not self.gravity:
            return action
        empty = np.flatnonzero(board[action::self.cols] == 0)
        return int(empty[-1]) * self.cols + action

    def wins_with(self, board: np.ndarray, action: int, piece: int) -> bool:
        """Whether ``piece`` (+1 own, -1 opponent) playing ``action`` completes a line."""
        cell = self.landing(board, action)
        after = board.copy()
        after[cell] = piece
        return self.completes_line(after, cell)

    def completes_line(self, board: np.ndarray, cell: int) -> bool:
        """Whether the piece on ``cell`` is part of a full line of its owner."""
        return bool((board[self.lines_at[cell]] == board[cell]).all(axis=1).any())


CONNECT_FOUR = BoardGame("connect_four", rows=6, cols=7, line_length=4, gravity=True)
TIC_TAC_TOE = BoardGame("tictactoe", rows=3, cols=3, line_length=3, gravity=False)
_GAMES = {"connect_four": CONNECT_FOUR, "connect_four_v3": CONNECT_FOUR,
          "tictactoe": TIC_TAC_TOE, "tictactoe_v3": TIC_TAC_TOE, "tic_tac_toe": TIC_TAC_TOE}


def get_game(game: str | BoardGame) -> BoardGame:
    """The :class:`BoardGame` named ``game`` (``"connect_four"``, ``"tictactoe"``, or the PettingZoo names)."""
    if isinstance(game, BoardGame):
        return game
    if not isinstance(game, str) or game not in _GAMES:
        raise ValueError(f"unknown board game {game!r}; expected one of {sorted(_GAMES)}")
    return _GAMES[game]


def decode(game: BoardGame, obs: np.ndarray, who: str = "a board player") -> np.ndarray:
    """``[batch, rows * cols]`` int8 positions (+1 own, -1 opponent) from PettingZoo observations."""
    obs = np.asarray(obs)
    if obs.ndim != 4 or obs.shape[1:] != game.obs_shape:
        raise ValueError(f"{who} for {game.name} needs a batch of observations of shape "
                         f"[batch, {', '.join(map(str, game.obs_shape))}] (channels last: own pieces, "
                         f"opponent's pieces), got shape {list(obs.shape)}")
    own, opp = obs[..., 0] != 0, obs[..., 1] != 0
    if np.any(own & opp):
        raise ValueError(f"{who} got an observation with a cell in both players' planes")
    return (own.astype(np.int8) - opp.astype(np.int8)).reshape(len(obs), -1)


def check_mask(game: BoardGame, mask: np.ndarray | None, boards: np.ndarray, who: str) -> np.ndarray:
    """The legal actions of each row as a bool ``[batch, num_actions]`` array (from ``mask`` or the board)."""
    if mask is None:
        legal = np.zeros((len(boards), game.num_actions), bool)
        for k, board in enumerate(boards):
            legal[k, game.legal_actions(board)] = True
    else:
        legal = np.asarray(mask, bool)
        if legal.shape != (len(boards), game.num_actions):
            raise ValueError(f"{who} for {game.name} needs an action mask of shape "
                             f"[{len(boards)}, {game.num_actions}], got shape {list(legal.shape)}")
        top = boards[:, :game.cols] if game.gravity else boards
        bad = np.argwhere(legal & (top != 0))
        if len(bad):
            raise ValueError(f"{who}: the action mask allows action {int(bad[0, 1])} in row {int(bad[0, 0])}, "
                             f"which the board shows is {'a full column' if game.gravity else 'an occupied cell'}")
    if not legal.any(axis=1).all():
        raise ValueError(f"{who} got an observation with no legal action")
    return legal
