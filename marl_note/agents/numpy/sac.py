"""Soft actor-critic in numpy: the networks and one gradient step with hand-written backward passes
(the algorithm: :mod:`marl_note.agents.sac`).

The step is the torch backend's, in its order: the twin critics' weighted squared TD error against
the target critics' soft value, then the actor's loss ``-E[min(q1, q2) - alpha log pi]`` through the
just-updated critics (``torch.min``'s gradient split on ties), then the temperature, then the
Polyak targets. A discrete actor's soft value is an expectation over the legal actions; a Box
actor samples ``tanh(mean + std * noise)`` with the noise the core drew, its log std squashed into
``[LOG_STD_MIN, LOG_STD_MAX]``. From the same weights and batch it gives
:class:`marl_note.agents.torch.SAC`'s weights to float32 rounding.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.numpy.layers import MLP, Adam
from marl_note.agents.numpy.networks import NumpyNetworks
from marl_note.agents.sac import HALF_LOG_2PI, LOG_2, LOG_STD_MAX, LOG_STD_MIN, MASKED_LOGIT, SACCore

__all__ = ["SAC", "SACNetworks"]

_HALF_RANGE = 0.5 * (LOG_STD_MAX - LOG_STD_MIN)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x).astype(x.dtype, copy=False)


def _min_grads(q1: np.ndarray, q2: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradients ``torch.min(q1, q2)`` passes to each input (half each on a tie)."""
    tie = q1 == q2
    half = g / 2
    return np.where(tie, half, np.where(q1 < q2, g, 0)), np.where(tie, half, np.where(q2 < q1, g, 0))


class SACNetworks(NumpyNetworks):
    """The actor, the twin critics ``qf1``/``qf2`` with their targets, and the temperature ``log_alpha``.

    ``aux`` is a bool legal-action mask (Discrete) or the standard normal noise of the
    reparameterised actions (Box); see :data:`marl_note.agents.sac.TRAIN_INPUTS`.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.numpy import SAC
        >>> agent = SAC(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), hidden_sizes=(8,), seed=0)
        >>> type(agent.nets).__name__, agent.nets.weight_names[-1], agent.temperature
        ('SACNetworks', 'log_alpha', 1.0)
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, discrete: bool, activation: str, actor_lr: float,
                 critic_lr: float, temperature_lr: float, log_alpha: float, autotune: bool, tau: float,
                 max_grad_norm: float | None, device: Any = "cpu", compile: bool = False, conv: Any = None):
        super().__init__(device, compile)
        if conv:
            self.refuse_torso("SAC", "conv")
        self.discrete, self.tau, self.max_grad_norm = discrete, tau, max_grad_norm
        self.actor = self.mlp("actor", weights, activation)
        self.qf1, self.qf2 = self.mlp("qf1", weights, activation), self.mlp("qf2", weights, activation)
        self.qf1_target = self.mlp("qf1_target", weights, activation)
        self.qf2_target = self.mlp("qf2_target", weights, activation)
        self.log_alpha = np.asarray(np.float32(log_alpha)).copy()  # a 0-d array: Adam writes it in place
        self.adam("actor_optimizer", ["actor"], actor_lr)
        self.adam("critic_optimizer", ["qf1", "qf2"], critic_lr)
        if autotune:
            self.optimizers["alpha_optimizer"] = Adam([self.log_alpha], lr=temperature_lr, eps=1e-8)
            self._optimizer_keys["alpha_optimizer"] = ["log_alpha"]

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name == "tau":
            self.tau = value

    # -- forward passes ------------------------------------------------------------------------------
    def policy(self, obs: np.ndarray) -> np.ndarray:
        """Raw actor outputs: logits ``[B, n]`` or Gaussian mean and unsquashed log std ``[B, 2 * dim]``."""
        return self.actor(np.asarray(obs, np.float32))

    def log_alpha_value(self) -> float:
        return float(self.log_alpha)

    def _q(self, net: MLP, obs: np.ndarray, act: np.ndarray) -> tuple[np.ndarray, Any]:
        """``(Q [B, n] or [B, 1], cache)`` of critic ``net``: Box actions join the observation."""
        return net.forward(obs if self.discrete else np.concatenate([obs, act], axis=1))

    def _policy_terms(self, out: np.ndarray, aux: np.ndarray) -> dict[str, np.ndarray]:
        """The actor's distribution at ``out``: log-probabilities (Discrete) or the sampled action (Box)."""
        if self.discrete:
            masked = np.where(aux, out, np.float32(MASKED_LOGIT))
            shifted = masked - masked.max(axis=1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            return {"log_p": log_p, "p": np.exp(log_p)}
        dim = out.shape[1] // 2
        mean, raw = out[:, :dim], out[:, dim:]
        tanh_raw = np.tanh(raw)
        log_std = LOG_STD_MIN + _HALF_RANGE * (tanh_raw + 1.0)
        std = np.exp(log_std)
        u = mean + std * aux
        log_prob = (-0.5 * aux * aux - log_std - HALF_LOG_2PI - 2.0 * (LOG_2 - u - _softplus(-2.0 * u))).sum(1)
        return {"u": u, "a": np.tanh(u), "std": std, "tanh_raw": tanh_raw, "log_prob": log_prob}

    def _soft_value(self, obs: np.ndarray, aux: np.ndarray, q1: MLP, q2: MLP, alpha: float) -> np.ndarray:
        """``E_pi[min(q1, q2)(obs, a) - alpha * log pi(a|obs)]`` per row (no gradient: the TD target)."""
        t = self._policy_terms(self.actor(obs), aux)
        if self.discrete:
            q = np.minimum(q1(obs), q2(obs))
            return (t["p"] * (q - alpha * t["log_p"])).sum(1)
        return np.minimum(self._q(q1, obs, t["a"])[0], self._q(q2, obs, t["a"])[0])[:, 0] - alpha * t["log_prob"]

    # -- losses and their gradients ------------------------------------------------------------------
    def _critic(self, b: Mapping[str, np.ndarray], alpha: float):
        obs, act, n = b["obs"], b["act"], len(b["obs"])
        target = b["rew"] + b["discount"] * b["alive"] * self._soft_value(b["next_obs"], b["next_aux"], self.qf1_target,
                                                                         self.qf2_target, alpha)
        grads = self.grads("critic_optimizer")
        out, q = [], []
        for net in (self.qf1, self.qf2):
            values, cache = self._q(net, obs, act)
            qa = values[np.arange(n), act] if self.discrete else values[:, 0]
            out.append((values, cache, qa))
            q.append(qa)
        loss = float(0.5 * (b["weights"] * ((q[0] - target) ** 2 + (q[1] - target) ** 2)).sum() / n)
        for net, (values, cache, qa) in zip((self.qf1, self.qf2), out):
            g = (b["weights"] * (qa - target) / n).astype(values.dtype)
            grad = np.zeros_like(values)
            if self.discrete:
                grad[np.arange(n), act] = g
            else:
                grad[:, 0] = g
            net.backward(grad, cache, grads)
        return loss, q[0], q[1], target, grads

    def _actor(self, b: Mapping[str, np.ndarray], alpha: float):
        obs, aux, n = b["obs"], b["aux"], len(b["obs"])
        out, cache = self.actor.forward(obs)
        t = self._policy_terms(out, aux)
        g = -1.0 / n  # d loss / d value_i
        if self.discrete:
            p, log_p = t["p"], t["log_p"]
            q = np.minimum(self.qf1(obs), self.qf2(obs))
            f = q - alpha * log_p
            value = (p * f).sum(1)
            entropy = -(p * log_p).sum(1)
            grad_out = np.where(aux, g * p * (f - value[:, None]), 0.0)  # d value / d logit_k = p_k (f_k - value)
        else:
            a, std = t["a"], t["std"]
            q1, c1 = self._q(self.qf1, obs, a)
            q2, c2 = self._q(self.qf2, obs, a)
            value = np.minimum(q1, q2)[:, 0] - alpha * t["log_prob"]
            entropy = -t["log_prob"]
            g1, g2 = _min_grads(q1, q2, np.full_like(q1, g))
            dim = a.shape[1]  # through the critics to their action input (their own gradients: not this step's)
            grad_a = (self.qf1.backward(g1, c1, {}, need_input=True, params=False)[:, -dim:]  # type: ignore[index]
                      + self.qf2.backward(g2, c2, {}, need_input=True, params=False)[:, -dim:])  # type: ignore[index]
            # d log_prob / d u = 2 tanh(u) (the tanh correction); d a / d u = 1 - a^2
            grad_u = grad_a * (1.0 - a * a) - g * alpha * 2.0 * a
            grad_log_std = grad_u * std * aux + g * alpha  # log_prob has -log_std
            grad_raw = grad_log_std * _HALF_RANGE * (1.0 - t["tanh_raw"] ** 2)
            grad_out = np.concatenate([grad_u, grad_raw], axis=1)
        grads = self.grads("actor_optimizer")
        self.actor.backward(grad_out.astype(out.dtype, copy=False), cache, grads)
        return float(-value.sum() / n), entropy, grads

    def grad_sq_norm(self, batch: Mapping[str, np.ndarray]) -> float:
        """``|G_B|^2`` of the critic loss over ``qf1`` and ``qf2`` (float64; nothing written)."""
        grads = self._critic(batch, float(np.exp(self.log_alpha)))[4]
        return float(sum(np.square(g, dtype=np.float64).sum() for g in grads.values()))

    def train_step(self, batch: Mapping[str, np.ndarray], who: str, update: int) -> tuple[dict[str, float], np.ndarray]:
        """Critics, actor, temperature, targets; returns metrics and the mean |TD| of the critics."""
        alpha = float(np.exp(self.log_alpha))
        critic_loss, q1, q2, target, grads = self._critic(batch, alpha)
        self.step("critic_optimizer", critic_loss, grads, self.max_grad_norm, who, update, "critic loss")
        actor_loss, entropy, grads = self._actor(batch, alpha)
        self.step("actor_optimizer", actor_loss, grads, self.max_grad_norm, who, update, "actor loss")
        metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha": float(np.float32(alpha)),
                   "entropy": float(entropy.mean()), "q_mean": float((0.5 * (q1 + q2)).mean())}
        if "alpha_optimizer" in self.optimizers:
            gap = entropy - batch["target_entropy"]
            scale = np.exp(self.log_alpha)
            alpha_loss = float((scale * gap).mean())
            self.step("alpha_optimizer", alpha_loss, {"log_alpha": np.asarray(scale * gap.mean(), np.float32)},
                      None, who, update, "alpha loss")
            metrics["alpha_loss"] = alpha_loss
        self.sync("qf1_target", "qf1", self.tau)
        self.sync("qf2_target", "qf2", self.tau)
        td = 0.5 * (np.abs(q1 - target) + np.abs(q2 - target))
        metrics["td_abs"] = float(td.mean())
        return metrics, td

    # -- numpy state: the networks' and optimisers' arrays plus log_alpha ----------------------------
    @property
    def weight_names(self) -> tuple[str, ...]:
        return (*self.modules, "log_alpha")

    def state_dict(self) -> dict[str, np.ndarray]:
        return {**super().state_dict(), "log_alpha": self.log_alpha.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "log_alpha" not in state:
            raise KeyError("state_dict is missing ['log_alpha']")
        log_alpha = np.asarray(state["log_alpha"], np.float32)
        if log_alpha.shape != ():
            raise ValueError(f"log_alpha has shape {log_alpha.shape}, this network expects ()")
        super().load_state_dict(state)
        self.log_alpha[...] = log_alpha


class SAC(SACCore):
    """Soft actor-critic in numpy (MLP networks): see :class:`~marl_note.agents.sac.SACCore` for the algorithm
    and arguments; conv torsos: the torch or tf ``SAC``. Checkpoints are the other backends'.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = SAC(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((2, 3))).shape, sorted(k for k in agent.state_dict() if k.startswith("qf1."))
        ((2,), ['qf1.0.bias', 'qf1.0.weight', 'qf1.2.bias', 'qf1.2.weight'])
    """

    Networks = SACNetworks
