"""DDPG in numpy: the actor, the critic, their Polyak targets and one gradient step with hand-written
backward passes (acting, replay, exploration and the update schedule: :mod:`marl_note.agents.ddpg`).

The step is the torch backend's, in its order: the critic's weighted squared error against the
(optionally clipped) target, then the actor's loss ``-Q(s, tanh(actor(s)))`` (plus ``action_l2``)
through the just-updated critic, then both targets move ``tau``. From the same weights and batch
it gives :class:`marl_note.agents.torch.DDPG`'s weights to float32 rounding.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.ddpg import DDPGBatch, DDPGConfig, DDPGCore
from marl_note.agents.numpy.networks import NumpyNetworks
from marl_note.agents.torsos import conv_of

__all__ = ["DDPG", "DDPGNetworks"]


class DDPGNetworks(NumpyNetworks):
    """``actor``, ``critic``, ``actor_target``, ``critic_target`` and their two Adam optimisers.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.numpy import DDPG
        >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)), hidden_sizes=(8,), seed=0)
        >>> agent.nets.weight_names, agent.nets.actions(np.zeros((2, 3), np.float32)).shape
        (('actor', 'critic', 'actor_target', 'critic_target'), (2, 1))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], cfg: DDPGConfig, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        if conv_of(cfg):
            self.refuse_torso("DDPG", "conv")
        self.cfg = cfg
        self.actor = self.mlp("actor", weights, cfg.activation)
        self.critic = self.mlp("critic", weights, cfg.activation)
        self.actor_target = self.mlp("actor_target", weights, cfg.activation)
        self.critic_target = self.mlp("critic_target", weights, cfg.activation)
        self.adam("actor_optimizer", ["actor"], cfg.actor_lr)
        self.adam("critic_optimizer", ["critic"], cfg.critic_lr)

    @staticmethod
    def _joined(x: np.ndarray, a: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(x, np.float32), np.asarray(a, np.float32)], axis=1)

    def actions(self, obs: np.ndarray) -> np.ndarray:
        return np.tanh(self.actor(np.asarray(obs, np.float32)))

    def q_values(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        return self.critic(self._joined(obs, act))[:, 0]

    def target(self, b: DDPGBatch) -> np.ndarray:
        next_x = np.asarray(b.next_obs, np.float32)
        next_q = self.critic_target(self._joined(next_x, np.tanh(self.actor_target(next_x))))[:, 0]
        f32 = np.float32
        y = np.asarray(b.rew, f32) + np.asarray(b.discount, f32) * np.asarray(b.alive, f32) * next_q
        return y if self.cfg.target_clip is None else np.clip(y, *self.cfg.target_clip).astype(np.float32)

    def td_target(self, b: DDPGBatch) -> np.ndarray:
        return self.target(b)

    def _critic_loss(self, b: DDPGBatch, y: np.ndarray) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
        q_all, cache = self.critic.forward(self._joined(b.obs, b.act))
        q = q_all[:, 0]
        w = np.asarray(b.weights, np.float32)
        n = len(q)
        grads = self.grads("critic_optimizer")
        self.critic.backward((2.0 * w * (q - y) / n)[:, None].astype(q.dtype), cache, grads)
        return float((w * (q - y) ** 2).sum() / n), q, grads

    def _actor_loss(self, obs: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        x = np.asarray(obs, np.float32)
        out, cache = self.actor.forward(x)
        mu = np.tanh(out)
        q, c_cache = self.critic.forward(self._joined(x, mu))
        n, dim = mu.shape
        # through the critic to its action input (the critic's own gradients: not this step's)
        grad_in = self.critic.backward(np.full_like(q, -1.0 / n), c_cache, {}, need_input=True, params=False)
        assert grad_in is not None
        grad_mu = grad_in[:, -dim:]
        loss = float(-q.sum() / n)
        if self.cfg.action_l2 > 0:
            loss += self.cfg.action_l2 * float((mu * mu).sum() / mu.size)
            grad_mu = grad_mu + self.cfg.action_l2 * 2.0 * mu / mu.size
        grads = self.grads("actor_optimizer")
        self.actor.backward((grad_mu * (1.0 - mu * mu)).astype(out.dtype, copy=False), cache, grads)
        return loss, grads

    def grad_sq_norm(self, b: DDPGBatch) -> float:
        """``|G_B|^2`` of the critic loss over the critic's parameters (float64; nothing written)."""
        grads = self._critic_loss(b, self.target(b))[2]
        return float(sum(np.square(g, dtype=np.float64).sum() for g in grads.values()))

    def train_step(self, b: DDPGBatch, who: str, update: int) -> tuple[dict[str, float], np.ndarray]:
        """Critic step, actor step, then both targets move ``tau``; metrics and the TD errors."""
        y = self.target(b)
        critic_loss, q, grads = self._critic_loss(b, y)
        self.step("critic_optimizer", critic_loss, grads, self.cfg.max_grad_norm, who, update, "critic loss")
        actor_loss, grads = self._actor_loss(b.obs)
        self.step("actor_optimizer", actor_loss, grads, self.cfg.max_grad_norm, who, update, "actor loss")
        self.sync("actor_target", "actor", self.cfg.tau)
        self.sync("critic_target", "critic", self.cfg.tau)
        metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss, "q_mean": float(q.mean())}
        return metrics, y - q


class DDPG(DDPGCore):
    """DDPG in numpy (MLP networks); every argument and behaviour is :class:`~marl_note.agents.ddpg.DDPGCore`'s
    (conv torsos: the torch or tf ``DDPG``). Checkpoints are the other backends'.

    Example:
        >>> import gymnasium as gym
        >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((2, 3))).shape, type(agent.nets.actor).__name__
        ((2, 1), 'MLP')
    """

    Networks = DDPGNetworks
