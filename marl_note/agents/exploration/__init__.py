"""Exploration, numpy only: action-selection policies for discrete actions, noise for continuous ones.

- :mod:`~marl_note.agents.exploration.policies`: epsilon-greedy, softmax, Boltzmann (and the
  max-Boltzmann, Boltzmann-Gumbel and Gumbel-softmax variants), greedy; with annealing schedules.
- :mod:`~marl_note.agents.exploration.masked`: argmax, softmax and sampling over legal actions,
  the primitives the policies are built on.
- :mod:`~marl_note.agents.exploration.noise`: Gaussian and Ornstein-Uhlenbeck processes, and
  :class:`ExplorationNoise`, which adds one to a batch of actions.
- :mod:`~marl_note.agents.exploration.per_env`: one noise process per (agent, env) stream.
"""
from typing import TYPE_CHECKING

from marl_note._moved import lazy_package

if TYPE_CHECKING:
    from marl_note.agents.exploration.masked import masked_argmax
    from marl_note.agents.exploration.noise import (
        AnnealedGaussianProcess,
        ExplorationNoise,
        GaussianWhiteNoiseProcess,
        OrnsteinUhlenbeckProcess,
    )
    from marl_note.agents.exploration.per_env import PerEnvNoise
    from marl_note.agents.exploration.policies import (
        BoltzmannGumbelQPolicy,
        BoltzmannQPolicy,
        EpsGreedyQPolicy,
        GreedyQPolicy,
        GumbelSoftmaxPolicy,
        LinearSchedule,
        MaxBoltzmannQPolicy,
        SoftmaxPolicy,
    )

__all__ = ["AnnealedGaussianProcess", "ExplorationNoise", "GaussianWhiteNoiseProcess", "OrnsteinUhlenbeckProcess",
           "PerEnvNoise", "BoltzmannGumbelQPolicy", "BoltzmannQPolicy", "EpsGreedyQPolicy", "GreedyQPolicy",
           "GumbelSoftmaxPolicy", "LinearSchedule", "MaxBoltzmannQPolicy", "SoftmaxPolicy", "masked_argmax"]

# each name loads its own module on first use
__getattr__ = lazy_package(__name__, {
    "masked_argmax": "marl_note.agents.exploration.masked",
    "AnnealedGaussianProcess": "marl_note.agents.exploration.noise",
    "ExplorationNoise": "marl_note.agents.exploration.noise",
    "GaussianWhiteNoiseProcess": "marl_note.agents.exploration.noise",
    "OrnsteinUhlenbeckProcess": "marl_note.agents.exploration.noise",
    "PerEnvNoise": "marl_note.agents.exploration.per_env",
    "BoltzmannGumbelQPolicy": "marl_note.agents.exploration.policies",
    "BoltzmannQPolicy": "marl_note.agents.exploration.policies",
    "EpsGreedyQPolicy": "marl_note.agents.exploration.policies",
    "GreedyQPolicy": "marl_note.agents.exploration.policies",
    "GumbelSoftmaxPolicy": "marl_note.agents.exploration.policies",
    "LinearSchedule": "marl_note.agents.exploration.policies",
    "MaxBoltzmannQPolicy": "marl_note.agents.exploration.policies",
    "SoftmaxPolicy": "marl_note.agents.exploration.policies",
})
