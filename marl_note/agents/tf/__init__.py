"""TensorFlow/Keras agents: ``from marl_note.agents.tf import DQN, PPO, DDPG, SAC``.

The same constructor arguments, defaults and behaviour as ``marl_note.agents.torch``, and the
same numpy ``state_dict()`` keys and layouts, so weights, optimiser moments, counters and
exploration state move between the backends. This package is the only place in
``marl_note.agents`` that imports tensorflow or keras.
"""
from marl_note.agents.tf.alphazero import AlphaZero
from marl_note.agents.tf.ddpg import DDPG
from marl_note.agents.tf.dqn import DQN
from marl_note.agents.tf.maddpg import MADDPG
from marl_note.agents.tf.ppo import PPO
from marl_note.agents.tf.rl import RL
from marl_note.agents.tf.sac import SAC

__all__ = ["AlphaZero", "DQN", "PPO", "RL", "MADDPG", "DDPG", "SAC"]
