"""PPO in numpy: the actor-critic over named arrays and one clipped-objective step with a hand-written
backward pass; acting, rollouts, GAE, minibatches and epochs are :class:`~marl_note.agents.ppo.PPOCore`.

The loss is the torch backend's, term for term: the clipped surrogate (``torch.min``'s gradient
split on ties and ``clamp``'s pass-through inside the range included), the squared value error,
the entropy bonus, each weighted by the importance weights and averaged; a categorical policy
over the legal actions (log-softmax of the masked logits) or a diagonal Gaussian with a learned
``log_std``. From the same weights and minibatch it gives :class:`marl_note.agents.torch.PPO`'s
weights to float32 rounding.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.numpy.layers import MLP, mlp_keys
from marl_note.agents.numpy.networks import NumpyNetworks
from marl_note.agents.ppo import PPOConfig, PPOCore

__all__ = ["PPO", "PPONetworks", "ActorCritic"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class ActorCritic:
    """Policy head (logits or Gaussian means) and value head over separate or shared MLP trunks, over the
    arrays ``net.log_std`` (Box actions), ``net.trunk.*`` (shared), ``net.pi.*`` and ``net.v.*``.

    Example:
        >>> from marl_note.agents.networks import mlp_weights
        >>> rng = np.random.default_rng(0)
        >>> w = {**mlp_weights("net.pi", 3, (8,), 2, rng), **mlp_weights("net.v", 3, (8,), 1, rng)}
        >>> out, values, _ = ActorCritic(w, "tanh").forward(np.zeros((5, 3), np.float32))
        >>> out.shape, values.shape
        ((5, 2), (5,))
    """

    def __init__(self, params: Mapping[str, np.ndarray], activation: str, shared: bool = False):
        self.log_std = params.get("net.log_std")
        self.trunk = MLP(params, "net.trunk", activation, out_activation=True) \
            if shared and "net.trunk.0.weight" in params else None
        self.pi = MLP(params, "net.pi", activation)
        self.v = MLP(params, "net.v", activation)

    @staticmethod
    def param_keys(params: Mapping[str, np.ndarray], shared: bool) -> list[str]:
        """The array names in PyTorch's ``parameters()`` order (log_std, trunk, pi, v)."""
        keys = ["net.log_std"] if "net.log_std" in params else []
        nets = (["net.trunk"] if shared and "net.trunk.0.weight" in params else []) + ["net.pi", "net.v"]
        return keys + [f"{k}.{part}" for net in nets for k in mlp_keys(params, net) for part in ("weight", "bias")]

    def features(self, x: np.ndarray) -> tuple[np.ndarray, Any]:
        return (x, None) if self.trunk is None else self.trunk.forward(x)

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """``(policy output [B, n], values [B], cache)``."""
        h, trunk = self.features(x)
        out, pi = self.pi.forward(h)
        v, vc = self.v.forward(h)
        return out, v[:, 0], (trunk, pi, vc)

    def backward(self, grad_out: np.ndarray, grad_v: np.ndarray, cache: Any, grads: dict[str, np.ndarray]) -> None:
        trunk, pi, vc = cache
        need = self.trunk is not None
        g_pi = self.pi.backward(grad_out, pi, grads, need_input=need)
        g_v = self.v.backward(grad_v[:, None], vc, grads, need_input=need)
        if self.trunk is not None:
            assert g_pi is not None and g_v is not None
            self.trunk.backward(g_pi + g_v, trunk, grads)


class PPONetworks(NumpyNetworks):
    """The actor-critic ``net`` and its Adam ``optimizer`` (eps 1e-5, as torch's PPO); numpy in, numpy out.

    Example:
        >>> from marl_note.agents.networks import mlp_weights
        >>> rng = np.random.default_rng(0)
        >>> w = {**mlp_weights("net.pi", 3, (8,), 2, rng), **mlp_weights("net.v", 3, (8,), 1, rng)}
        >>> nets = PPONetworks(w, PPOConfig(), continuous=False)
        >>> x, act, mask = np.zeros((4, 3), np.float32), np.zeros(4, np.int64), np.ones((4, 2), bool)
        >>> [a.shape for a in nets.evaluate(x, act, mask)]
        [(4,), (4,)]
        >>> out = nets.train_step(x, act, mask, np.log(np.full(4, 0.5, np.float32)), np.ones(4, np.float32),
        ...                       np.zeros(4, np.float32), np.ones(4, np.float32), who="PPO", update=1)
        >>> sorted(out)
        ['entropy', 'log_ratio', 'policy_loss', 'td', 'value_loss']
    """

    def __init__(self, weights: Mapping[str, np.ndarray], cfg: PPOConfig, continuous: bool, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        if cfg.torso == "conv":
            self.refuse_torso("PPO", "conv")
        self.cfg, self.continuous = cfg, continuous
        params = self.add("net", weights, ActorCritic.param_keys(weights, cfg.shared))
        self.net = ActorCritic(params, cfg.activation, cfg.shared)
        self.adam("optimizer", ["net"], lr=cfg.lr, eps=1e-5)

    # -- forward passes ----------------------------------------------------------------------------
    def policy(self, x: np.ndarray) -> np.ndarray:
        """Logits (Discrete) or Gaussian means (Box), ``[B, n]``."""
        return self.net.pi(self.net.features(np.asarray(x, np.float32))[0])

    def log_std(self) -> np.ndarray:
        assert self.net.log_std is not None, "a categorical policy has no log-std"
        return self.net.log_std.copy()

    def values(self, x: np.ndarray) -> np.ndarray:
        return self.net.forward(np.asarray(x, np.float32))[1]

    def _evaluate(self, out: np.ndarray, act: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        """Log-probabilities of ``act``, entropies, and what their gradients need."""
        if self.net.log_std is not None:  # a diagonal Gaussian
            log_std = self.net.log_std
            z = (act - out) / np.exp(log_std)
            logp = (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(-1)
            entropy = np.full(len(out), (0.5 + _HALF_LOG_2PI + log_std).sum(), out.dtype)
            return {"logp": logp, "entropy": entropy, "z": z}
        masked = np.where(mask, out, -np.inf)
        shifted = masked - masked.max(axis=1, keepdims=True)
        logp_all = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        legal = np.where(mask, logp_all, 0.0)
        probs = np.exp(logp_all)
        rows = np.arange(len(out))
        return {"logp": logp_all[rows, act], "entropy": -(probs * legal).sum(-1), "probs": probs, "legal": legal}

    def evaluate(self, x: np.ndarray, act: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(log-probabilities of act, values)``."""
        out, values, _ = self.net.forward(np.asarray(x, np.float32))
        return self._evaluate(out, self._act(act), np.asarray(mask, bool))["logp"], values

    def _act(self, act: np.ndarray) -> np.ndarray:
        return np.asarray(act, np.float32) if self.continuous else np.asarray(act, np.int64)

    # -- the loss and its gradient -----------------------------------------------------------------
    def _losses(self, x, act, mask, old_logp, adv, ret, w) -> tuple[float, dict[str, Any], dict[str, np.ndarray]]:
        """``(loss, metrics, gradients by array name)`` of one minibatch."""
        cfg = self.cfg
        dtype = self.net.v.layers[0].weight.dtype  # float32 (float64 in the gradient checks)
        x, act, mask = np.asarray(x, dtype), self._act(act), np.asarray(mask, bool)
        old_logp, adv, ret, w = (np.asarray(a, dtype) for a in (old_logp, adv, ret, w))
        out, v, cache = self.net.forward(x)
        ev = self._evaluate(out, act, mask)
        n = len(out)
        log_ratio = ev["logp"] - old_logp
        ratio = np.exp(log_ratio)
        lo, hi = 1.0 - cfg.clip_range, 1.0 + cfg.clip_range
        clipped = np.clip(ratio, lo, hi)
        surr, surr_clipped = ratio * adv, clipped * adv
        policy_loss = float(-(w * np.minimum(surr, surr_clipped)).sum() / n)
        value_loss = float((w * (v - ret) ** 2).sum() / n)
        entropy = float(ev["entropy"].sum() / n)
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        # d loss / d logp through min(ratio * adv, clamp(ratio) * adv): ties split the gradient (torch.min)
        g = -w / n
        tie = surr == surr_clipped
        g_first = np.where(surr < surr_clipped, g, 0) + np.where(tie, g / 2, 0)
        g_second = np.where(surr_clipped < surr, g, 0) + np.where(tie, g / 2, 0)
        inside = (ratio >= lo) & (ratio <= hi)
        g_logp = (g_first * adv + g_second * adv * inside) * ratio
        g_ent = -cfg.ent_coef / n  # d loss / d entropy_i
        grads = self.grads("optimizer")
        if self.net.log_std is not None:
            z, sigma = ev["z"], np.exp(self.net.log_std)
            grad_out = g_logp[:, None] * z / sigma
            grads.put("net.log_std", (g_logp[:, None] * (z * z - 1.0)).sum(axis=0) + g_ent * n)
        else:
            probs, legal = ev["probs"], ev["legal"]
            rows = np.arange(n)
            grad_out = -g_logp[:, None] * probs
            grad_out[rows, act] += g_logp
            # d entropy / d logit_j = -p_j (log p_j + H) over the legal actions
            grad_out -= g_ent * probs * (legal + ev["entropy"][:, None])
            grad_out = np.where(mask, grad_out, 0.0)
        grad_v = cfg.vf_coef * 2.0 * w * (v - ret) / n
        self.net.backward(grad_out.astype(out.dtype, copy=False), grad_v.astype(v.dtype, copy=False), cache, grads)
        metrics = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                   "log_ratio": log_ratio, "td": ret - v}
        return loss, metrics, grads

    def grad_sq_norm(self, x, act, mask, old_logp, adv, ret, w) -> float:
        """``|G_B|^2`` of the minibatch loss over the actor-critic's parameters (float64; nothing written)."""
        grads = self._losses(x, act, mask, old_logp, adv, ret, w)[2]
        return float(sum(np.square(g, dtype=np.float64).sum() for g in grads.values()))

    def train_step(self, x, act, mask, old_logp, adv, ret, w, *, who: str, update: int) -> dict[str, Any]:
        """One clipped-objective step on a numpy minibatch (``w``: importance weights).

        Returns the mean policy loss, value loss and entropy, and per item ``log_ratio`` (new
        minus old log-probability) and ``td`` (return minus value) for the priorities.
        """
        loss, metrics, grads = self._losses(x, act, mask, old_logp, adv, ret, w)
        self.step("optimizer", loss, grads, self.cfg.max_grad_norm, who, update)
        return metrics


class PPO(PPOCore):
    """PPO (:class:`~marl_note.agents.ppo.PPOCore`) in numpy: MLP actor-critics (separate or shared), Discrete
    and Box actions; conv torsos: the torch or tf ``PPO``. Checkpoints are the other backends'.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((4, 3)), explore=True).shape, agent
        ((4, 2), PPO(obs_dim=3, gaussian[2], agent_steps=0, updates=0))
    """

    Networks = PPONetworks
