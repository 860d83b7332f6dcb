"""DDPG in PyTorch: the actor, the critic, their Polyak targets and one gradient step.

Acting, replay, exploration and the update schedule are numpy, in :mod:`marl_note.agents.ddpg`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from marl_note.agents.ddpg import DDPGBatch, DDPGConfig, DDPGCore
from marl_note.agents.torch.common import maybe_compile
from marl_note.agents.torch.critics import register_critic
from marl_note.agents.torch.networks import TorchNetworks
from marl_note.agents.torsos import conv_of

__all__ = ["DDPG", "DDPGNetworks"]


class DDPGNetworks(TorchNetworks):
    """``actor``, ``critic``, ``actor_target``, ``critic_target`` and their two Adam optimisers."""

    def __init__(self, weights: Mapping[str, np.ndarray], cfg: DDPGConfig, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        self.cfg = cfg
        conv = conv_of(cfg)  # images: a conv torso under the actor and one under the critic
        self.actor = self.mlp("actor", weights, cfg.activation, conv=conv)
        self.critic = register_critic(self, "critic", weights, cfg.activation, conv)
        self.actor_target = self.mlp("actor_target", weights, cfg.activation, trainable=False, conv=conv)
        self.critic_target = register_critic(self, "critic_target", weights, cfg.activation, conv, trainable=False)
        self.adam("actor_optimizer", ["actor"], cfg.actor_lr)
        self.adam("critic_optimizer", ["critic"], cfg.critic_lr)
        self._critic_loss = maybe_compile(self.critic_loss, self.compile, "DDPG critic loss")
        self._actor_loss = maybe_compile(self.actor_loss, self.compile, "DDPG actor loss")

    @staticmethod
    def q(critic: torch.nn.Module, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return critic(x, a).squeeze(1)

    @torch.no_grad()
    def actions(self, obs: np.ndarray) -> np.ndarray:
        return torch.tanh(self.actor(self.tensor(obs))).cpu().numpy()

    @torch.no_grad()
    def q_values(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        return self.q(self.critic, self.tensor(obs), self.tensor(act)).cpu().numpy()

    @torch.no_grad()
    def target(self, b: DDPGBatch) -> torch.Tensor:
        next_x = self.tensor(b.next_obs)
        next_q = self.q(self.critic_target, next_x, torch.tanh(self.actor_target(next_x)))
        y = self.tensor(b.rew) + self.tensor(b.discount) * self.tensor(b.alive) * next_q
        return y if self.cfg.target_clip is None else y.clamp(*self.cfg.target_clip)

    def td_target(self, b: DDPGBatch) -> np.ndarray:
        return self.target(b).cpu().numpy()

    def critic_loss(self, x: torch.Tensor, a: torch.Tensor, y: torch.Tensor, w: torch.Tensor):
        q = self.q(self.critic, x, a)
        return (w * (q - y).pow(2)).mean(), q

    def actor_loss(self, x: torch.Tensor) -> torch.Tensor:
        mu = torch.tanh(self.actor(x))
        loss = -self.q(self.critic, x, mu).mean()
        return loss + self.cfg.action_l2 * mu.pow(2).mean() if self.cfg.action_l2 > 0 else loss

    def grad_sq_norm(self, b: DDPGBatch) -> float:
        """``|G_B|^2`` of the critic loss over the critic's parameters (float64; nothing written)."""
        loss, _ = self.critic_loss(self.tensor(b.obs), self.tensor(b.act), self.target(b), self.tensor(b.weights))
        grads = torch.autograd.grad(loss, list(self.critic.parameters()))
        return float(sum(g.double().square().sum() for g in grads))

    def train_step(self, b: DDPGBatch, who: str, update: int) -> tuple[dict[str, float], np.ndarray]:
        """Critic step, actor step, then both targets move ``tau``; metrics and the TD errors."""
        x, y = self.tensor(b.obs), self.target(b)
        critic_loss, q = self._critic_loss(x, self.tensor(b.act), y, self.tensor(b.weights))
        self.step("critic_optimizer", critic_loss, self.cfg.max_grad_norm, who, update, "critic loss")
        actor_loss = self._actor_loss(x)
        self.step("actor_optimizer", actor_loss, self.cfg.max_grad_norm, who, update, "actor loss")
        self.sync("actor_target", "actor", self.cfg.tau)
        self.sync("critic_target", "critic", self.cfg.tau)
        metrics = {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "q_mean": q.mean().item()}
        return metrics, (y - q).detach().cpu().numpy()


class DDPG(DDPGCore):
    """DDPG in PyTorch; every argument and behaviour is :class:`~marl_note.agents.ddpg.DDPGCore`'s.

    Example:
        >>> import gymnasium as gym
        >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((2, 3))).shape, type(agent.nets.actor).__name__
        ((2, 1), 'Sequential')
    """

    Networks = DDPGNetworks
