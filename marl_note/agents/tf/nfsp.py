"""NFSP in TensorFlow: DQN's networks (:mod:`marl_note.agents.tf.dqn`) plus the average-policy network and
its supervised step (one ``tf.function``); the rest is :class:`~marl_note.agents.nfsp.NFSPCore`."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from marl_note.agents.nfsp import NFSPCore
from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.dqn import DQNNetworks

__all__ = ["NFSP", "NFSPNetworks"]


class NFSPNetworks(DQNNetworks):
    """DQN's Q-networks and step, plus ``avg_net``, ``avg_optimizer`` and the supervised step (numpy in and out)."""

    def add_average(self, weights: Mapping[str, np.ndarray], lr: float) -> None:
        """Build the average-policy MLP ``avg_net`` from ``weights``, its Adam ``avg_optimizer`` and its graphs."""
        self.avg_net = self.mlp("avg_net", weights, self.config.activation)
        self.adam("avg_optimizer", ["avg_net"], lr=lr)
        obs = self.obs_spec(weights, "avg_net")
        n = self.params["avg_net"][-1][1].shape[0]
        self._avg_forward = graph_function(lambda x: self.avg_net(x), input_signature=[obs])
        self._sl_fn = self.function(self._sl_step, [obs, tf.TensorSpec([None], tf.int32),
                                                    tf.TensorSpec([None, n], tf.bool)])

    def avg_logits(self, obs: np.ndarray) -> np.ndarray:
        return self._avg_forward(np.asarray(obs, np.float32)).numpy()

    def _sl_step(self, obs, act, legal):
        with tf.GradientTape() as tape:
            logits = self.avg_net(obs, training=True)
            logp = tf.nn.log_softmax(tf.where(legal, logits, tf.constant(-np.inf, logits.dtype)), axis=1)
            loss = -tf.reduce_mean(tf.gather(logp, act, batch_dims=1))
        _, checks = self.apply("avg_optimizer", tape, loss, self.config.max_grad_norm)
        return loss, checks

    def sl_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int) -> dict[str, float]:
        """One Adam step of the cross-entropy of the masked softmax against ``act``; returns ``sl_loss``."""
        loss, checks = self._sl_fn(np.asarray(arrays["obs"], np.float32), np.asarray(arrays["act"], np.int32),
                                   np.asarray(arrays["legal"], bool))
        self.check(who, update, step_names("sl_loss"), checks)
        return {"sl_loss": float(loss.numpy())}


class NFSP(NFSPCore):
    """NFSP in TensorFlow/Keras; arguments, behaviour and state as :class:`~marl_note.agents.nfsp.NFSPCore`.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = NFSP(gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> agent.policy_probs(np.zeros((1, 4))).shape
        (1, 2)
    """

    Networks = NFSPNetworks
