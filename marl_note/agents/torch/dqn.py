"""DQN in PyTorch: the Q-networks, the TD target and one gradient step; the rest is :class:`DQNCore`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.dqn import DQNConfig, DQNCore
from marl_note.agents.torch.common import maybe_compile
from marl_note.agents.torch.networks import ACTIVATION_MODULES, TorchNetworks, conv_from_numpy, sequential_from_numpy

__all__ = ["DQN", "DQNNetworks", "DuelingQNet"]


def linear_from_numpy(weights: Mapping[str, np.ndarray], key: str) -> nn.Linear:
    """The ``nn.Linear`` holding ``{key}.weight`` ``[out, in]`` and ``{key}.bias``."""
    w, b = (np.asarray(weights[f"{key}.{part}"], np.float32) for part in ("weight", "bias"))
    layer = nn.utils.skip_init(nn.Linear, w.shape[1], w.shape[0])
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(w))
        layer.bias.copy_(torch.from_numpy(b))
    return layer


class DuelingQNet(nn.Module):
    """``Q = V(h) + A(h, a) - mean_a A(h, a)`` with ``h = torso(s)`` (every torso layer activated)."""

    def __init__(self, prefix: str, weights: Mapping[str, np.ndarray], activation: str, conv=None):
        super().__init__()
        self.conv = conv_from_numpy(f"{prefix}.conv", weights, conv, activation) if conv else None
        torso = sequential_from_numpy(f"{prefix}.torso", weights, activation)
        self.torso = nn.Sequential(*torso, ACTIVATION_MODULES[activation]())
        self.value = linear_from_numpy(weights, f"{prefix}.value")
        self.advantage = linear_from_numpy(weights, f"{prefix}.advantage")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.torso(x if self.conv is None else self.conv(x))
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=1, keepdim=True)


class DQNNetworks(TorchNetworks):
    """Online and target Q-networks, Adam, the TD target and one checked gradient step (numpy in and out)."""

    def __init__(self, weights: Mapping[str, np.ndarray], config: DQNConfig, device: Any = "cpu",
                 compile: bool = False, user: Any = None):
        super().__init__(device, compile)
        self.config = config
        self.conv = config.conv_layers if config.torso == "conv" else None
        self.user = user  # (factory, input shape, seed) of a user-supplied torso
        self.q_net = self.q_network("q_net", weights)
        self.target_net = self.q_network("target_net", weights, trainable=False)
        if user is not None:
            self.sync("target_net", "q_net")
        self.adam("optimizer", ["q_net"], lr=config.lr)
        self._loss_fn = maybe_compile(self._loss, self.compile, "DQN loss")

    def q_network(self, name: str, weights: Mapping[str, np.ndarray], trainable: bool = True) -> nn.Module:
        if self.user is not None:
            return self.user_mlp(name, weights, self.config.activation, self.user, trainable)
        if not self.config.dueling:
            return self.mlp(name, weights, self.config.activation, trainable, self.conv)
        net = DuelingQNet(name, weights, self.config.activation, self.conv).to(self.device)
        net.requires_grad_(trainable)
        self.modules[name] = net
        return net

    @torch.inference_mode()
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return self.q_net(self.tensor(obs)).cpu().numpy()

    @torch.no_grad()
    def _target(self, b: Mapping[str, torch.Tensor]) -> torch.Tensor:
        q_next = self.target_net(b["next_obs"])
        chooser = self.q_net(b["next_obs"]) if self.config.double else q_next
        best = chooser.masked_fill(~b["legal"], -torch.inf).argmax(dim=1, keepdim=True)
        return b["rew"] + b["discount"] * b["alive"] * q_next.gather(1, best).squeeze(1)

    def _tensors(self, arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v, device=self.device) for k, v in arrays.items()}

    def td_target(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        return self._target(self._tensors(arrays)).cpu().numpy()

    def _loss(self, obs: torch.Tensor, act: torch.Tensor, target: torch.Tensor,
              weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q_net(obs).gather(1, act[:, None]).squeeze(1)
        if self.config.criterion == "huber":
            losses = nn.functional.smooth_l1_loss(q, target, reduction="none")
        else:
            losses = nn.functional.mse_loss(q, target, reduction="none")
        return (weights * losses).mean(), q

    def grad_sq_norm(self, arrays: Mapping[str, np.ndarray]) -> float:
        """``|G_B|^2``: the squared norm of the gradient of the batch's mean loss over the online
        network's parameters, unclipped, in float64. Nothing is written: no ``.grad``, no optimiser
        step, no weight or version change (``torch.autograd.grad`` returns the gradients)."""
        b = self._tensors(arrays)
        loss, _ = self._loss(b["obs"], b["act"], self._target(b), b["weights"])
        grads = torch.autograd.grad(loss, [p for p in self.q_net.parameters() if p.requires_grad])
        return float(sum(g.double().square().sum() for g in grads))

    def train_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int
                   ) -> tuple[dict[str, float], np.ndarray]:
        """One Adam step on the batch; returns ``(metrics, |TD| per row)``. Non-finite steps raise, unwritten."""
        b = self._tensors(arrays)
        target = self._target(b)
        loss, q = self._loss_fn(b["obs"], b["act"], target, b["weights"])
        self.step("optimizer", loss, self.config.max_grad_norm, who, update)
        td_abs = (target - q.detach()).abs()
        loss_v, q_mean, td_mean = torch.stack([loss.detach(), q.detach().mean(), td_abs.mean()]).tolist()
        return {"loss": loss_v, "q_mean": q_mean, "td_abs": td_mean}, td_abs.cpu().numpy()


class DQN(DQNCore):
    """DQN in PyTorch; arguments, behaviour and state as :class:`~marl_note.agents.dqn.DQNCore`.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), hidden_sizes=(8,), dueling=True, seed=0)
        >>> agent.q_values(np.zeros((2, 4))).shape, sorted(agent.state_dict())[-3:]
        ((2, 3), ['target_net.value.bias', 'target_net.value.weight', 'updates'])
    """

    Networks = DQNNetworks
