"""Soft actor-critic in PyTorch: the networks and one gradient step (the algorithm: :mod:`marl_note.agents.sac`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from marl_note.agents.sac import HALF_LOG_2PI, LOG_2, LOG_STD_MAX, LOG_STD_MIN, MASKED_LOGIT, TRAIN_INPUTS, SACCore
from marl_note.agents.torch.common import maybe_compile
from marl_note.agents.torch.critics import register_critic
from marl_note.agents.torch.networks import TorchNetworks

__all__ = ["SAC", "SACNetworks"]


class SACNetworks(TorchNetworks):
    """The actor, the twin critics ``qf1``/``qf2`` with their targets, and the temperature ``log_alpha``.

    ``aux`` is a bool legal-action mask (Discrete) or the standard normal noise of the
    reparameterised actions (Box); see :data:`marl_note.agents.sac.TRAIN_INPUTS`.
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, discrete: bool, activation: str, actor_lr: float,
                 critic_lr: float, temperature_lr: float, log_alpha: float, autotune: bool, tau: float,
                 max_grad_norm: float | None, device: Any = "cpu", compile: bool = False, conv: Any = None):
        super().__init__(device, compile)
        self.discrete, self.tau, self.max_grad_norm = discrete, tau, max_grad_norm
        self.actor = self.mlp("actor", weights, activation, conv=conv)  # images: a conv torso under each network

        def critic(name: str, trainable: bool = True) -> nn.Module:  # Box actions join after the torso
            if discrete:
                return self.mlp(name, weights, activation, trainable, conv)
            return register_critic(self, name, weights, activation, conv, trainable)

        self.qf1, self.qf2 = critic("qf1"), critic("qf2")
        self.qf1_target, self.qf2_target = critic("qf1_target", False), critic("qf2_target", False)
        self.log_alpha = nn.Parameter(torch.tensor(float(log_alpha), device=self.device), requires_grad=autotune)
        self.adam("actor_optimizer", ["actor"], actor_lr)
        self.adam("critic_optimizer", ["qf1", "qf2"], critic_lr)
        if autotune:
            self.adam_over("alpha_optimizer", [self.log_alpha], temperature_lr)
        self._critic_loss = maybe_compile(self.critic_loss, self.compile, "SAC critic loss")
        self._actor_loss = maybe_compile(self.actor_loss, self.compile, "SAC actor loss")

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name == "tau":
            self.tau = value

    # -- forward passes ------------------------------------------------------------------------------
    @torch.inference_mode()
    def policy(self, obs: np.ndarray) -> np.ndarray:
        """Raw actor outputs: logits ``[B, n]`` or Gaussian mean and unsquashed log std ``[B, 2 * dim]``."""
        return self.actor(self.tensor(obs)).cpu().numpy()

    def log_alpha_value(self) -> float:
        return float(self.log_alpha.detach().cpu())

    def soft_value(self, obs, aux, q1: nn.Module, q2: nn.Module, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        """``E_pi[min(q1, q2)(obs, a) - alpha * log pi(a|obs)]`` and the policy's entropy, per row."""
        out = self.actor(obs)
        if self.discrete:
            log_p = torch.log_softmax(out.masked_fill(~aux, MASKED_LOGIT), dim=1)
            p = log_p.exp()
            q = torch.min(q1(obs), q2(obs))
            return (p * (q - alpha * log_p)).sum(1), -(p * log_p).sum(1)
        mean, raw = out.chunk(2, dim=1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        u = mean + log_std.exp() * aux
        # Gaussian log-density of u, minus log |d tanh(u)/du| = log(1 - tanh(u)^2), written stably
        log_prob = (-0.5 * aux.square() - log_std - HALF_LOG_2PI - 2.0 * (LOG_2 - u - F.softplus(-2.0 * u))).sum(1)
        a = torch.tanh(u)
        return torch.min(q1(obs, a), q2(obs, a)).squeeze(1) - alpha * log_prob, -log_prob

    def q(self, net: nn.Module, obs, act) -> torch.Tensor:
        if self.discrete:
            return net(obs).gather(1, act[:, None]).squeeze(1)
        return net(obs, act).squeeze(1)

    # -- losses and one gradient step ----------------------------------------------------------------
    def critic_loss(self, obs, act, next_obs, rew, alive, discount, weights, next_aux, alpha):
        with torch.no_grad():
            next_v, _ = self.soft_value(next_obs, next_aux, self.qf1_target, self.qf2_target, alpha)
            target = rew + discount * alive * next_v
        q1, q2 = self.q(self.qf1, obs, act), self.q(self.qf2, obs, act)
        loss = 0.5 * (weights * ((q1 - target).square() + (q2 - target).square())).mean()
        return loss, q1.detach(), q2.detach(), target

    def actor_loss(self, obs, aux, alpha):
        value, entropy = self.soft_value(obs, aux, self.qf1, self.qf2, alpha)
        return -value.mean(), entropy.detach()

    def grad_sq_norm(self, batch: Mapping[str, np.ndarray]) -> float:
        """``|G_B|^2`` of the critic loss over ``qf1`` and ``qf2`` (float64; nothing written)."""
        b = {k: torch.as_tensor(np.asarray(batch[k]), device=self.device) for k in TRAIN_INPUTS}
        loss = self.critic_loss(b["obs"], b["act"], b["next_obs"], b["rew"], b["alive"], b["discount"], b["weights"],
                                b["next_aux"], self.log_alpha.detach().exp())[0]
        grads = torch.autograd.grad(loss, [*self.qf1.parameters(), *self.qf2.parameters()])
        return float(sum(g.double().square().sum() for g in grads))

    def train_step(self, batch: Mapping[str, np.ndarray], who: str, update: int) -> tuple[dict[str, float], np.ndarray]:
        """Critics, actor, temperature, targets; returns metrics and the mean |TD| of the critics."""
        b = {k: torch.as_tensor(np.asarray(batch[k]), device=self.device) for k in TRAIN_INPUTS}
        alpha = self.log_alpha.detach().exp()
        critic_loss, q1, q2, target = self._critic_loss(b["obs"], b["act"], b["next_obs"], b["rew"], b["alive"],
                                                        b["discount"], b["weights"], b["next_aux"], alpha)
        self.step("critic_optimizer", critic_loss, self.max_grad_norm, who, update, "critic loss")
        actor_loss, entropy = self._actor_loss(b["obs"], b["aux"], alpha)
        self.step("actor_optimizer", actor_loss, self.max_grad_norm, who, update, "actor loss")
        metrics = {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": alpha.item(),
                   "entropy": entropy.mean().item(), "q_mean": (0.5 * (q1 + q2)).mean().item()}
        if "alpha_optimizer" in self.optimizers:
            alpha_loss = (self.log_alpha.exp() * (entropy - b["target_entropy"])).mean()
            self.step("alpha_optimizer", alpha_loss, None, who, update, "alpha loss")
            metrics["alpha_loss"] = alpha_loss.item()
        self.sync("qf1_target", "qf1", self.tau)
        self.sync("qf2_target", "qf2", self.tau)
        td = (0.5 * ((q1 - target).abs() + (q2 - target).abs())).cpu().numpy()
        metrics["td_abs"] = float(td.mean())
        return metrics, td

    # -- numpy state: the modules' and optimisers' arrays plus log_alpha -----------------------------
    @property
    def weight_names(self) -> tuple[str, ...]:
        return (*self.modules, "log_alpha")

    def state_dict(self) -> dict[str, np.ndarray]:
        return {**super().state_dict(), "log_alpha": self.log_alpha.detach().cpu().numpy().copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "log_alpha" not in state:
            raise KeyError("state_dict is missing ['log_alpha']")
        log_alpha = np.asarray(state["log_alpha"], np.float32)
        if log_alpha.shape != ():
            raise ValueError(f"log_alpha has shape {log_alpha.shape}, this network expects ()")
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(log_alpha))


class SAC(SACCore):
    """Soft actor-critic in PyTorch: see :class:`~marl_note.agents.sac.SACCore` for the algorithm and arguments.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = SAC(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((2, 3))).shape, sorted(k for k in agent.state_dict() if k.startswith("qf1."))
        ((2,), ['qf1.0.bias', 'qf1.0.weight', 'qf1.2.bias', 'qf1.2.weight'])
    """

    Networks = SACNetworks
