"""Backend-neutral agent pieces: the acting contract, RandomAgent, exploration policies and noise.

Each algorithm's numpy core is ``marl_note.agents.<algo>``; its networks live in
``marl_note.agents.torch`` and ``marl_note.agents.tf``. Search opponents for classic board games
(``WinOrBlockPlayer``, ``AlphaBetaPlayer``, ``PerfectTicTacToePlayer``) are in
``marl_note.agents.board_games``. Importing this package imports neither
framework.
"""
from marl_note.agents.base import Agent, LearningAgent, RandomAgent, is_learning_agent
from marl_note.agents.board_games import AlphaBetaPlayer, PerfectTicTacToePlayer, WinOrBlockPlayer
from marl_note.agents.exploration.noise import GaussianWhiteNoiseProcess, OrnsteinUhlenbeckProcess
from marl_note.agents.exploration.policies import (
    BoltzmannGumbelQPolicy,
    BoltzmannQPolicy,
    EpsGreedyQPolicy,
    GreedyQPolicy,
    GumbelSoftmaxPolicy,
    MaxBoltzmannQPolicy,
    SoftmaxPolicy,
)

__all__ = [
    "Agent", "LearningAgent", "RandomAgent", "is_learning_agent",
    "WinOrBlockPlayer", "AlphaBetaPlayer", "PerfectTicTacToePlayer",
    "GreedyQPolicy", "EpsGreedyQPolicy", "SoftmaxPolicy", "BoltzmannQPolicy", "MaxBoltzmannQPolicy",
    "BoltzmannGumbelQPolicy", "GumbelSoftmaxPolicy",
    "GaussianWhiteNoiseProcess", "OrnsteinUhlenbeckProcess",
]
