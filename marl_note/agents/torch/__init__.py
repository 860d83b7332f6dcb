"""PyTorch agents: ``from marl_note.agents.torch import DQN, PPO, DDPG, SAC``.

This package is the only place in ``marl_note.agents`` that imports torch. The agents follow the
learning contract of :mod:`marl_note.agents.base` and keep all state as numpy in
``state_dict()``.
"""
from typing import TYPE_CHECKING

from marl_note._moved import lazy_package

if TYPE_CHECKING:
    from marl_note.agents.torch.ddpg import DDPG
    from marl_note.agents.torch.dqn import DQN
    from marl_note.agents.torch.maddpg import MADDPG
    from marl_note.agents.torch.mappo import IPPO, MAPPO
    from marl_note.agents.torch.nfsp import NFSP
    from marl_note.agents.torch.ppo import PPO
    from marl_note.agents.torch.qmix import QMIX, VDN
    from marl_note.agents.torch.sac import SAC

__all__ = ["DDPG", "DQN", "IPPO", "MADDPG", "MAPPO", "NFSP", "PPO", "QMIX", "SAC", "VDN"]

# each class loads its own module on first use; AlphaZero and RL moved (contrib, compat) and warn
__getattr__ = lazy_package(__name__, {
    "DDPG": "marl_note.agents.torch.ddpg",
    "DQN": "marl_note.agents.torch.dqn",
    "NFSP": "marl_note.agents.torch.nfsp",
    "MADDPG": "marl_note.agents.torch.maddpg",
    "MAPPO": "marl_note.agents.torch.mappo",
    "IPPO": "marl_note.agents.torch.mappo",
    "PPO": "marl_note.agents.torch.ppo",
    "QMIX": "marl_note.agents.torch.qmix",
    "SAC": "marl_note.agents.torch.sac",
    "VDN": "marl_note.agents.torch.qmix",
})
