"""NFSP in PyTorch: DQN's networks (:mod:`marl_note.agents.torch.dqn`) plus the average-policy network and
its supervised step; the rest is :class:`~marl_note.agents.nfsp.NFSPCore`."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from marl_note.agents.nfsp import NFSPCore
from marl_note.agents.torch.dqn import DQNNetworks

__all__ = ["NFSP", "NFSPNetworks"]


class NFSPNetworks(DQNNetworks):
    """DQN's Q-networks and step, plus ``avg_net``, ``avg_optimizer`` and the supervised step (numpy in and out)."""

    def add_average(self, weights: Mapping[str, np.ndarray], lr: float) -> None:
        """Build the average-policy MLP ``avg_net`` from ``weights`` and its Adam ``avg_optimizer``."""
        self.avg_net = self.mlp("avg_net", weights, self.config.activation)
        self.adam("avg_optimizer", ["avg_net"], lr=lr)

    @torch.inference_mode()
    def avg_logits(self, obs: np.ndarray) -> np.ndarray:
        return self.avg_net(self.tensor(obs)).cpu().numpy()

    def sl_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int) -> dict[str, float]:
        """One Adam step of the cross-entropy of the masked softmax against ``act``; returns ``sl_loss``."""
        obs = self.tensor(arrays["obs"])
        act = torch.as_tensor(np.asarray(arrays["act"], np.int64), device=self.device)
        legal = torch.as_tensor(np.asarray(arrays["legal"], bool), device=self.device)
        logits = self.avg_net(obs).masked_fill(~legal, -torch.inf)
        loss = nn.functional.cross_entropy(logits, act)
        self.step("avg_optimizer", loss, self.config.max_grad_norm, who, update, name="sl_loss")
        return {"sl_loss": float(loss.detach())}


class NFSP(NFSPCore):
    """NFSP in PyTorch; arguments, behaviour and state as :class:`~marl_note.agents.nfsp.NFSPCore`.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = NFSP(gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> agent.learning_rates()
        {'optimizer': 0.001, 'avg_optimizer': 0.001}
    """

    Networks = NFSPNetworks
