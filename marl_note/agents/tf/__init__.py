"""TensorFlow/Keras agents: ``from marl_note.agents.tf import DQN, PPO, DDPG, SAC``.

The same constructor arguments, defaults and behaviour as ``marl_note.agents.torch``, and the
same numpy ``state_dict()`` keys and layouts, so weights, optimiser moments, counters and
exploration state move between the backends. This package is the only place in
``marl_note.agents`` that imports tensorflow or keras.
"""
from typing import TYPE_CHECKING

from marl_note._moved import lazy_package

if TYPE_CHECKING:
    from marl_note.agents.tf.ddpg import DDPG
    from marl_note.agents.tf.dqn import DQN
    from marl_note.agents.tf.maddpg import MADDPG
    from marl_note.agents.tf.mappo import IPPO, MAPPO
    from marl_note.agents.tf.nfsp import NFSP
    from marl_note.agents.tf.ppo import PPO
    from marl_note.agents.tf.qmix import QMIX, VDN
    from marl_note.agents.tf.sac import SAC

__all__ = ["DDPG", "DQN", "IPPO", "MADDPG", "MAPPO", "NFSP", "PPO", "QMIX", "SAC", "VDN"]

# each class loads its own module on first use; AlphaZero and RL moved (contrib, compat) and warn
__getattr__ = lazy_package(__name__, {
    "DDPG": "marl_note.agents.tf.ddpg",
    "DQN": "marl_note.agents.tf.dqn",
    "NFSP": "marl_note.agents.tf.nfsp",
    "MADDPG": "marl_note.agents.tf.maddpg",
    "MAPPO": "marl_note.agents.tf.mappo",
    "IPPO": "marl_note.agents.tf.mappo",
    "PPO": "marl_note.agents.tf.ppo",
    "QMIX": "marl_note.agents.tf.qmix",
    "SAC": "marl_note.agents.tf.sac",
    "VDN": "marl_note.agents.tf.qmix",
})
