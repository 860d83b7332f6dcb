"""AlphaZero in PyTorch: the policy/value network and one gradient step; the rest is :class:`AlphaZeroCore`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from marl_note.agents.torch.networks import ACTIVATION_MODULES, TorchNetworks
from marl_note.contrib.alphazero.core import AlphaZeroConfig, AlphaZeroCore

__all__ = ["AlphaZero", "AlphaZeroNetworks"]

_ILLEGAL = -1e9  # the logit of an illegal move: no probability, no NaN in the cross-entropy


class AlphaZeroNetworks(TorchNetworks):
    """The torso ``net.trunk`` and the head ``net.pi`` (move logits, then the value before tanh), Adam,
    one checked gradient step (numpy in and out)."""

    def __init__(self, weights: Mapping[str, np.ndarray], config: AlphaZeroConfig, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        self.config = config
        conv = config.conv_layers if config.torso == "conv" else None
        self.trunk = self.mlp("net.trunk", weights, config.activation, conv=conv)
        self.head = self.mlp("net.pi", weights, config.activation)
        self.act_fn = ACTIVATION_MODULES[config.activation]()
        self.adam("optimizer", ["net.trunk", "net.pi"], lr=config.lr)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act_fn(self.trunk(x)))

    @torch.inference_mode()
    def predict(self, obs: np.ndarray) -> np.ndarray:
        """Raw head outputs ``[B, n + 1]``."""
        return self.forward(self.tensor(obs)).cpu().numpy()

    def train_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int) -> dict[str, float]:
        """``-sum pi log p + (v - z)^2 + weight_decay * |w|^2``, one Adam step; non-finite steps raise, unwritten."""
        obs, pi, z = self.tensor(arrays["obs"]), self.tensor(arrays["pi"]), self.tensor(arrays["z"])
        legal = torch.as_tensor(arrays["legal"], device=self.device)
        out = self.forward(obs)
        log_p = torch.log_softmax(out[:, :-1].masked_fill(~legal, _ILLEGAL), dim=1)
        policy_loss = -(pi * log_p).sum(dim=1).mean()
        value_loss = (torch.tanh(out[:, -1]) - z).square().mean()
        l2 = sum(p.square().sum() for name in ("net.trunk", "net.pi") for p in self.modules[name].parameters())
        loss = policy_loss + value_loss + self.config.weight_decay * l2
        self.step("optimizer", loss, self.config.max_grad_norm, who, update)
        values = torch.stack([loss.detach(), policy_loss.detach(), value_loss.detach()]).tolist()
        return dict(zip(("loss", "policy_loss", "value_loss"), values))


class AlphaZero(AlphaZeroCore):
    """AlphaZero in PyTorch; arguments, behaviour and state as :class:`~marl_note.contrib.alphazero.core.AlphaZeroCore`.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = AlphaZero(gym.spaces.Box(0, 1, (6, 7, 2), np.int8), gym.spaces.Discrete(7), hidden_sizes=(8,),
        ...                   seed=0)
        >>> sorted(k for k in agent.state_dict() if k.startswith("net."))
        ['net.pi.0.bias', 'net.pi.0.weight', 'net.trunk.0.bias', 'net.trunk.0.weight']
    """

    Networks = AlphaZeroNetworks
