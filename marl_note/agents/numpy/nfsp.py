"""NFSP in numpy: DQN's networks (:mod:`marl_note.agents.numpy.dqn`) plus the average-policy network and its
supervised step, with a hand-written backward pass; the rest is :class:`~marl_note.agents.nfsp.NFSPCore`.

The supervised step is the torch backend's, written out: the softmax over legal actions, the mean
cross-entropy against the stored actions, its gradient ``(p - onehot) / B`` through the network,
clipping to ``max_grad_norm`` and torch's Adam.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from marl_note.agents.nfsp import NFSPCore
from marl_note.agents.numpy.dqn import DQNNetworks

__all__ = ["NFSP", "NFSPNetworks"]


class NFSPNetworks(DQNNetworks):
    """DQN's Q-networks and step, plus ``avg_net``, ``avg_optimizer`` and the supervised step (numpy in and out)."""

    def add_average(self, weights: Mapping[str, np.ndarray], lr: float) -> None:
        """Build the average-policy MLP ``avg_net`` from ``weights`` and its Adam ``avg_optimizer``."""
        self.avg_net = self.mlp("avg_net", weights, self.config.activation)
        self.adam("avg_optimizer", ["avg_net"], lr=lr)

    def avg_logits(self, obs: np.ndarray) -> np.ndarray:
        return self.avg_net(np.asarray(obs, np.float32))

    def sl_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int) -> dict[str, float]:
        """One Adam step of the cross-entropy of the masked softmax against ``act``; returns ``sl_loss``."""
        logits, cache = self.avg_net.forward(np.asarray(arrays["obs"], np.float32))
        legal = np.asarray(arrays["legal"], bool)
        act = np.asarray(arrays["act"], np.int64)
        rows = np.arange(len(act))
        z = np.where(legal, logits, -np.inf)
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        total = e.sum(axis=1, keepdims=True)
        loss = float(-(z[rows, act] - np.log(total[:, 0])).mean())
        grad = e / total
        grad[rows, act] -= 1.0
        grad /= len(act)
        grads = self.grads("avg_optimizer")
        self.avg_net.backward(grad.astype(np.float32), cache, grads)
        self.step("avg_optimizer", loss, grads, self.config.max_grad_norm, who, update, name="sl_loss")
        return {"sl_loss": loss}


class NFSP(NFSPCore):
    """NFSP in numpy; arguments, behaviour and state as :class:`~marl_note.agents.nfsp.NFSPCore`.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = NFSP(gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> sorted(k for k in agent.state_dict() if k.startswith("avg_net"))
        ['avg_net.0.bias', 'avg_net.0.weight', 'avg_net.2.bias', 'avg_net.2.weight']
    """

    Networks = NFSPNetworks
