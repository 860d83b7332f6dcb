"""TensorFlow critics ``Q(s, a)`` that take the action after the observation's torso (DDPG, SAC, MADDPG).

The TF twin of :mod:`marl_note.agents.torch.critics`: an optional :class:`~marl_note.agents.tf.networks.ConvTorso`
``{prefix}.conv`` reads the observation, the action joins its flat features, then the Keras MLP
``{prefix}`` runs. The params (and so the state keys and layouts) are the PyTorch critic's.

Example:
    >>> import numpy as np, tensorflow as tf
    >>> from marl_note.agents.networks import mlp_weights
    >>> from marl_note.agents.tf.networks import TFNetworks
    >>> nets = TFNetworks()
    >>> q = register_critic(nets, "critic", mlp_weights("critic", 3 + 2, (8,), 1, np.random.default_rng(0)), "relu")
    >>> tuple(q(tf.zeros((4, 3)), tf.zeros((4, 2))).shape), [k for k, _, _ in nets.params["critic"]][:2]
    ((4, 1), ['critic.0.weight', 'critic.0.bias'])
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from marl_note.agents.tf.networks import ConvTorso, TFNetworks, keras_mlp

__all__ = ["ObsActionMLP", "register_critic"]


class ObsActionMLP:
    """``mlp(concat(torso(obs), act))`` with the conv torso ``{prefix}.conv`` when ``conv`` layers are given."""

    def __init__(self, prefix: str, weights: Mapping[str, np.ndarray], activation: str,
                 conv: Sequence[tuple[int, int, int, int]] | None = None):
        self.conv = ConvTorso(f"{prefix}.conv", weights, conv, activation) if conv else None
        self.mlp, mlp_params = keras_mlp(prefix, weights, activation)
        self.params = (self.conv.params if self.conv is not None else []) + mlp_params
        self.in_dim = int(np.shape(weights[f"{prefix}.0.weight"])[1])  # torso features + action

    def __call__(self, obs, act, training: bool = False):
        if self.conv is not None:
            obs = tf.reshape(self.conv(obs), [-1, self.in_dim - int(act.shape[-1])])
        return self.mlp(tf.concat([obs, act], 1), training=training)


def register_critic(nets: TFNetworks, name: str, weights: Mapping[str, np.ndarray], activation: str,
                    conv: Sequence[tuple[int, int, int, int]] | None = None) -> ObsActionMLP:
    """Build the critic ``name`` as an :class:`ObsActionMLP` on ``nets``' device and register it there."""
    with tf.device(nets.device):
        net = ObsActionMLP(name, weights, activation, conv)
    nets.models[name], nets.params[name] = net, net.params
    return net
