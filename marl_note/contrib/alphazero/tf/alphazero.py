"""AlphaZero in TensorFlow/Keras: the policy/value network and one gradient step; the rest is :class:`AlphaZeroCore`.

The gradient step is one ``tf.function`` (XLA with ``compile=True``); the state keys and layouts
are PyTorch's, so checkpoints move between the backends.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import TFNetworks
from marl_note.contrib.alphazero.core import AlphaZeroConfig, AlphaZeroCore

__all__ = ["AlphaZero", "AlphaZeroNetworks"]

_ILLEGAL = -1e9  # the logit of an illegal move: no probability, no NaN in the cross-entropy


class AlphaZeroNetworks(TFNetworks):
    """The torso ``net.trunk`` and the head ``net.pi`` (move logits, then the value before tanh), Adam,
    one guarded gradient step (numpy in and out)."""

    def __init__(self, weights: Mapping[str, np.ndarray], config: AlphaZeroConfig, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        self.config = config
        conv = config.conv_layers if config.torso == "conv" else None
        self.trunk = self.mlp("net.trunk", weights, config.activation, conv)
        self.head = self.mlp("net.pi", weights, config.activation)
        self.act_fn = keras.activations.get(config.activation)
        self.adam("optimizer", ["net.trunk", "net.pi"], lr=config.lr)
        n = self.params["net.pi"][-1][1].shape[0] - 1
        obs = self.obs_spec(weights, "net.trunk", conv)
        self._forward = graph_function(self.forward, input_signature=[obs])
        step_signature = [obs, tf.TensorSpec([None, n], tf.float32), tf.TensorSpec([None, n], tf.bool),
                          tf.TensorSpec([None], tf.float32)]
        self._step_fn = self.function(self._step, step_signature)

    def forward(self, x, training: bool = False):
        return self.head(self.act_fn(self.trunk(x, training=training)), training=training)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        """Raw head outputs ``[B, n + 1]``."""
        return self._forward(np.asarray(obs, np.float32)).numpy()

    def _step(self, obs, pi, legal, z):
        with tf.GradientTape() as tape:
            out = self.forward(obs, training=True)
            log_p = tf.nn.log_softmax(tf.where(legal, out[:, :-1], tf.constant(_ILLEGAL, out.dtype)), axis=1)
            policy_loss = -tf.reduce_mean(tf.reduce_sum(pi * log_p, axis=1))
            value_loss = tf.reduce_mean(tf.square(tf.tanh(out[:, -1]) - z))
            weights = self.variables("net.trunk") + self.variables("net.pi")
            l2 = tf.add_n([tf.reduce_sum(tf.square(v)) for v in weights])
            loss = policy_loss + value_loss + self.config.weight_decay * l2
        _, checks = self.apply("optimizer", tape, loss, self.config.max_grad_norm)
        return tf.stack([loss, policy_loss, value_loss]), checks

    def train_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int) -> dict[str, float]:
        """The graph step on the batch, then its finiteness checks (a refused step raises, nothing applied)."""
        stats, checks = self._step_fn(np.asarray(arrays["obs"], np.float32), np.asarray(arrays["pi"], np.float32),
                                      np.asarray(arrays["legal"], bool), np.asarray(arrays["z"], np.float32))
        self.check(who, update, step_names("loss"), checks)
        return dict(zip(("loss", "policy_loss", "value_loss"), stats.numpy().tolist()))


class AlphaZero(AlphaZeroCore):
    """AlphaZero in TensorFlow/Keras; arguments, behaviour, state as
    :class:`~marl_note.contrib.alphazero.core.AlphaZeroCore`.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = AlphaZero(gym.spaces.Box(0, 1, (3, 3, 2), np.int8), gym.spaces.Discrete(9), hidden_sizes=(8,),
        ...                   seed=0)
        >>> logits, values = agent.predict(np.zeros((2, 3, 3, 2), np.int8))
        >>> logits.shape, values.shape
        ((2, 9), (2,))
    """

    Networks = AlphaZeroNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(AlphaZeroCore)
