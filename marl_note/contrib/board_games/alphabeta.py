"""Alpha-beta (negamax) search for connect four with a line-counting heuristic.

The heuristic scores a position for the player to move: every window of four cells (the 69 lines
of the board) that holds no opposing piece counts for its owner, 2 points with two pieces and 5
with three, and each piece in the centre column counts 3; the opponent's count the same,
negatively. A win scores far above any heuristic value, sooner wins more.

Example:
    >>> import numpy as np
    >>> board = np.zeros(42, np.int8)
    >>> board[[37, 38]] = 1         # own pieces in columns 2 and 3 of the bottom row
    >>> int(heuristic(board))       # three open windows of four hold both (2 each), one centre piece (3)
    9
"""
from __future__ import annotations

import numpy as np

from marl_note.contrib.board_games.players import BoardPlayer
from marl_note.contrib.board_games.rules import CONNECT_FOUR

__all__ = ["AlphaBetaPlayer", "heuristic", "WIN_SCORE"]

WIN_SCORE = 1_000_000
_TWO, _THREE, _CENTRE = 2, 5, 3
_ORDER = (3, 2, 4, 1, 5, 0, 6)  # centre columns first: better moves early, more cut-offs
_CENTRE_CELLS = np.arange(3, 42, 7)


def _window_table() -> np.ndarray:
    """Score of each window of four, indexed by its base-3 code (cell value + 1 per digit)."""
    table = np.zeros(81, np.int64)
    for code in range(81):
        digits = [(code // 3 ** k) % 3 - 1 for k in range(4)]
        own, opp = digits.count(1), digits.count(-1)
        if opp == 0:
            table[code] = {2: _TWO, 3: _THREE}.get(own, 0)
        elif own == 0:
            table[code] = -{2: _TWO, 3: _THREE}.get(opp, 0)
    return table


_TABLE = _window_table()
_DIGITS = np.array([1, 3, 9, 27], np.int64)


def heuristic(board: np.ndarray) -> int:
    """Line-counting score of a connect four position (flat, 42 cells) for the player with +1 pieces."""
    codes = (board[CONNECT_FOUR.lines].astype(np.int64) + 1) @ _DIGITS
    return int(_TABLE[codes].sum()) + _CENTRE * int(board[_CENTRE_CELLS].sum())


def negamax(board: np.ndarray, depth: int, alpha: float, beta: float) -> float:
    """The value of ``board`` for the player to move, searched ``depth`` plies (fail-soft alpha-beta)."""
    best = -np.inf
    for action in _ORDER:
        if board[action] != 0:
            continue
        cell = CONNECT_FOUR.landing(board, action)
        board[cell] = 1
        if CONNECT_FOUR.completes_line(board, cell):
            score = float(WIN_SCORE + depth)  # sooner wins score higher
        elif not (board[:7] == 0).any():
            score = 0.0  # the board is full: a draw
        elif depth == 1:
            score = float(heuristic(board))
        else:
            score = -negamax(-board, depth - 1, -beta, -alpha)
        board[cell] = 0
        if score > best:
            best = score
            alpha = max(alpha, score)
            if alpha >= beta:
                break
    return best if best > -np.inf else 0.0


class AlphaBetaPlayer(BoardPlayer):
    """Connect four player searching ``depth`` plies with alpha-beta; random among equally scored moves.

    Depth 1 takes every win in one; depth 2 also sees the opponent's reply, so it blocks threats
    and does not play under them. Each move costs about ``7 ** depth`` heuristic evaluations at
    worst (a few milliseconds at depth 2, tens at depth 4, in numpy on one core).

    Example:
        >>> import numpy as np
        >>> player = AlphaBetaPlayer(depth=2, seed=0)
        >>> obs = np.zeros((1, 6, 7, 2), np.int8)
        >>> obs[0, 3:6, 0, 1] = 1     # the opponent has three in column 0
        >>> obs[0, 5, 1:3, 0] = 1
        >>> player.act(obs, np.ones((1, 7), bool)).tolist()
        [0]
    """

    def __init__(self, depth: int = 2, seed: int | None = None):
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
            raise ValueError(f"AlphaBetaPlayer depth must be an int >= 1, got {depth!r}")
        super().__init__(CONNECT_FOUR, seed)
        self.depth = int(depth)

    def move_scores(self, board: np.ndarray, legal: list[int]) -> dict[int, float]:
        """Each legal move's score; exact for the best moves, an upper bound below the best for the rest."""
        board = board.copy()
        scores: dict[int, float] = {}
        best = -np.inf
        for action in sorted(legal, key=_ORDER.index):
            cell = CONNECT_FOUR.landing(board, action)
            board[cell] = 1
            if CONNECT_FOUR.completes_line(board, cell):
                score = float(WIN_SCORE + self.depth)
            elif not (board[:7] == 0).any():
                score = 0.0
            elif self.depth == 1:
                score = float(heuristic(board))
            else:
                # scores are integers, so a window just below the best keeps every tie exact
                score = -negamax(-board, self.depth - 1, -np.inf, -(best - 1))
            board[cell] = 0
            scores[action] = score
            best = max(best, score)
        return scores

    def choose(self, board: np.ndarray, legal: list[int]) -> int:
        scores = self.move_scores(board, legal)
        best = max(scores.values())
        return self.pick(sorted(a for a, s in scores.items() if s == best))

    def __repr__(self) -> str:
        return f"AlphaBetaPlayer(depth={self.depth}, seed={self.seed})"
