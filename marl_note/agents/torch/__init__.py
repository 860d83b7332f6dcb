"""PyTorch agents: ``from marl_note.agents.torch import DQN, PPO, DDPG, SAC``.

This package is the only place in ``marl_note.agents`` that imports torch. The agents follow the
learning contract of :mod:`marl_note.agents.base` and keep all state as numpy in
``state_dict()``.
"""
from marl_note.agents.torch.alphazero import AlphaZero
from marl_note.agents.torch.ddpg import DDPG
from marl_note.agents.torch.dqn import DQN
from marl_note.agents.torch.maddpg import MADDPG
from marl_note.agents.torch.ppo import PPO
from marl_note.agents.torch.rl import RL
from marl_note.agents.torch.sac import SAC

__all__ = ["AlphaZero", "DQN", "PPO", "DDPG", "RL", "MADDPG", "SAC"]
