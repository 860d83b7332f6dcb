"""The original library's PyTorch agents: every built-in agent with ``set()``, ``train()``,
``visualize_*`` and ``animate_agent``, and ``RL``, the base class for agents written the original way.

The core agents (``marl_note.agents.torch``) act, learn and save; these add the original workflow
(:class:`~marl_note.compat.workflow.Workflow`) on top, with the same constructors and checkpoints.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.compat.torch import DQN
    >>> from marl_note.agents import EpsGreedyQPolicy
    >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
    >>> agent.set(policy=EpsGreedyQPolicy(0.01), pool_size=1000) is agent, agent.replay.capacity
    (True, 1000)
"""
from marl_note.agents import torch as _core
from marl_note.compat.torch.rl import RL
from marl_note.compat.workflow import Workflow

__all__ = ["DQN", "PPO", "DDPG", "SAC", "MADDPG", "RL"]


class DQN(Workflow, _core.DQN):
    """:class:`marl_note.agents.torch.DQN` with the original workflow (``set``, ``train``, ``visualize_*``)."""


class PPO(Workflow, _core.PPO):
    """:class:`marl_note.agents.torch.PPO` with the original workflow (``set``, ``train``, ``visualize_*``)."""


class DDPG(Workflow, _core.DDPG):
    """:class:`marl_note.agents.torch.DDPG` with the original workflow (``set``, ``train``, ``visualize_*``)."""


class SAC(Workflow, _core.SAC):
    """:class:`marl_note.agents.torch.SAC` with the original workflow (``set``, ``train``, ``visualize_*``)."""


class MADDPG(Workflow, _core.MADDPG):
    """:class:`marl_note.agents.torch.MADDPG` with the original workflow (``set``, ``train``, ``visualize_*``)."""
