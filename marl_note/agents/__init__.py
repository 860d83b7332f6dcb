"""Backend-neutral agent pieces: the acting contract, RandomAgent, exploration policies and noise.

Each algorithm's numpy core is ``marl_note.agents.<algo>``; its networks live in
``marl_note.agents.torch`` and ``marl_note.agents.tf``. Search opponents for classic board games
(``WinOrBlockPlayer``, ``AlphaBetaPlayer``, ``PerfectTicTacToePlayer``) are an optional part,
:mod:`marl_note.contrib.board_games`. Importing this package imports neither
framework.
"""
from typing import TYPE_CHECKING

from marl_note._moved import lazy_package

if TYPE_CHECKING:
    from marl_note.agents.base import Agent, LearningAgent, RandomAgent, is_learning_agent
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
    "GreedyQPolicy", "EpsGreedyQPolicy", "SoftmaxPolicy", "BoltzmannQPolicy", "MaxBoltzmannQPolicy",
    "BoltzmannGumbelQPolicy", "GumbelSoftmaxPolicy",
    "GaussianWhiteNoiseProcess", "OrnsteinUhlenbeckProcess",
]

# each name loads its own module on first use; the board-game players moved to marl_note.contrib and warn
__getattr__ = lazy_package(__name__, {
    "Agent": "marl_note.agents.base",
    "LearningAgent": "marl_note.agents.base",
    "RandomAgent": "marl_note.agents.base",
    "is_learning_agent": "marl_note.agents.base",
    "GaussianWhiteNoiseProcess": "marl_note.agents.exploration.noise",
    "OrnsteinUhlenbeckProcess": "marl_note.agents.exploration.noise",
    "BoltzmannGumbelQPolicy": "marl_note.agents.exploration.policies",
    "BoltzmannQPolicy": "marl_note.agents.exploration.policies",
    "EpsGreedyQPolicy": "marl_note.agents.exploration.policies",
    "GreedyQPolicy": "marl_note.agents.exploration.policies",
    "GumbelSoftmaxPolicy": "marl_note.agents.exploration.policies",
    "MaxBoltzmannQPolicy": "marl_note.agents.exploration.policies",
    "SoftmaxPolicy": "marl_note.agents.exploration.policies",
})
