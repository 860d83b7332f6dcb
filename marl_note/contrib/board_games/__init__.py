"""Search opponents for classic board games (numpy only): win-or-block, alpha-beta, perfect tic-tac-toe.

They follow the acting contract on PettingZoo's own observations of ``tictactoe_v3`` and
``connect_four_v3`` (channels-last board planes of the player to move, plus the action mask), so
they sit in any seat of a trainer or serve as baselines in ``trainer.test_against``.

Example:
    >>> import numpy as np
    >>> from marl_note.contrib.board_games import AlphaBetaPlayer
    >>> AlphaBetaPlayer(depth=1, seed=0).act(np.zeros((3, 6, 7, 2), np.int8)).shape
    (3,)
"""
from marl_note.contrib.board_games.alphabeta import AlphaBetaPlayer
from marl_note.contrib.board_games.players import BoardPlayer, PerfectTicTacToePlayer, WinOrBlockPlayer
from marl_note.contrib.board_games.rules import CONNECT_FOUR, TIC_TAC_TOE, BoardGame, get_game

__all__ = ["BoardPlayer", "WinOrBlockPlayer", "AlphaBetaPlayer", "PerfectTicTacToePlayer",
           "BoardGame", "CONNECT_FOUR", "TIC_TAC_TOE", "get_game"]
