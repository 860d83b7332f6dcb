"""Numpy agents: ``from marl_note.agents.numpy import DQN, PPO, SAC, DDPG, MADDPG``; no framework is imported.

The same constructor arguments, defaults, behaviour and ``state_dict()`` keys and layouts as
``marl_note.agents.torch`` and ``marl_note.agents.tf``, for MLP networks, with hand-written
backward passes and torch's Adam (:mod:`marl_note.agents.numpy.layers`): the small networks of
most CPU workloads learn several times faster than through a framework's per-op dispatch, and a
checkpoint moves between the three backends. Conv and user torsos stay on the frameworks.
"""
from typing import TYPE_CHECKING

from marl_note._moved import lazy_package

if TYPE_CHECKING:
    from marl_note.agents.numpy.ddpg import DDPG
    from marl_note.agents.numpy.dqn import DQN
    from marl_note.agents.numpy.maddpg import MADDPG
    from marl_note.agents.numpy.nfsp import NFSP
    from marl_note.agents.numpy.ppo import PPO
    from marl_note.agents.numpy.sac import SAC

__all__ = ["DDPG", "DQN", "MADDPG", "NFSP", "PPO", "SAC"]

# each class loads its own module on first use
__getattr__ = lazy_package(__name__, {
    "DDPG": "marl_note.agents.numpy.ddpg",
    "DQN": "marl_note.agents.numpy.dqn",
    "MADDPG": "marl_note.agents.numpy.maddpg",
    "NFSP": "marl_note.agents.numpy.nfsp",
    "PPO": "marl_note.agents.numpy.ppo",
    "SAC": "marl_note.agents.numpy.sac",
})
