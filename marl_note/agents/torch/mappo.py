"""MAPPO / IPPO in PyTorch: the actors and critics built from numpy weights and one minibatch step.

Everything else (seats, acting, the joint rollout, critic inputs, GAE, value normalisation,
minibatches) is :class:`marl_note.agents.mappo.MAPPOCore`.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from marl_note.agents.mappo import IPPOCore, MAPPOConfig, MAPPOCore
from marl_note.agents.torch.networks import TorchNetworks

__all__ = ["IPPO", "MAPPO", "MAPPONetworks"]


class MAPPONetworks(TorchNetworks):
    """Per group (``""`` shared, or each agent): ``actor`` and ``critic`` MLPs; one Adam ``optimizer`` over all.

    Example (the core builds them; forward passes take and return numpy):
        >>> import gymnasium as gym
        >>> m = MAPPO({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,), seed=0)
        >>> m.nets.logits("", np.zeros((5, 2), np.float32)).shape, m.nets.weight_names
        ((5, 3), ('actor', 'critic'))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, groups: Sequence[str], config: MAPPOConfig,
                 device: Any = "cpu", compile: bool = False):
        super().__init__(device, compile)
        if compile:
            warnings.warn("MAPPO's PyTorch networks run eagerly: compile=True has no effect", stacklevel=3)
        self.groups, self.cfg = tuple(groups), config
        for g in self.groups:
            for net in ("actor", "critic"):
                self.mlp(MAPPOCore.net_name(g, net), weights, config.activation)
        self.adam("optimizer", list(self.modules), config.lr, eps=1e-5)

    @torch.no_grad()
    def logits(self, group: str, x: np.ndarray) -> np.ndarray:
        return self.modules[MAPPOCore.net_name(group, "actor")](self.tensor(x)).cpu().numpy()

    @torch.no_grad()
    def values(self, group: str, cx: np.ndarray) -> np.ndarray:
        return self.modules[MAPPOCore.net_name(group, "critic")](self.tensor(cx)).squeeze(1).cpu().numpy()

    @torch.no_grad()
    def log_prob(self, group: str, x: np.ndarray, act: np.ndarray, mask: np.ndarray) -> np.ndarray:
        logp = self._log_softmax(group, self.tensor(x), self.tensor(mask, torch.bool))
        return logp.gather(1, self.tensor(act, torch.int64)[:, None]).squeeze(1).cpu().numpy()

    def _log_softmax(self, group: str, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.modules[MAPPOCore.net_name(group, "actor")](x)
        return torch.log_softmax(out.masked_fill(~mask, -torch.inf), dim=-1)

    def loss(self, batch: Mapping[str, list]) -> tuple[torch.Tensor, dict[str, float]]:
        """The summed loss of every group and the mean metrics (see :class:`MAPPOCore`)."""
        cfg = self.cfg
        total: Any = 0.0
        sums = dict.fromkeys(("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"), 0.0)
        for k, g in enumerate(self.groups):
            x, cx = self.tensor(batch["x"][k]), self.tensor(batch["cx"][k])
            act, mask = self.tensor(batch["act"][k], torch.int64), self.tensor(batch["mask"][k], torch.bool)
            old_logp, adv, ret, old_v, w = (self.tensor(batch[n][k]) for n in ("old_logp", "adv", "ret", "old_v", "w"))
            denom = w.sum().clamp(min=1.0)
            logp_all = self._log_softmax(g, x, mask)
            logp = logp_all.gather(1, act[:, None]).squeeze(1)
            entropy = -(logp_all.exp() * torch.where(mask, logp_all, torch.zeros_like(logp_all))).sum(-1)
            log_ratio = logp - old_logp
            ratio = log_ratio.exp()
            clipped = ratio.clamp(1.0 - cfg.clip_range, 1.0 + cfg.clip_range)
            policy_loss = -(w * torch.min(ratio * adv, clipped * adv)).sum() / denom
            v = self.modules[MAPPOCore.net_name(g, "critic")](cx).squeeze(1)
            err = (v - ret).pow(2)
            if cfg.value_clip is not None:
                v_clip = old_v + (v - old_v).clamp(-cfg.value_clip, cfg.value_clip)
                err = torch.max(err, (v_clip - ret).pow(2))
            value_loss = (w * err).sum() / denom
            ent = (w * entropy).sum() / denom
            total = total + policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * ent
            with torch.no_grad():
                sums["policy_loss"] += policy_loss.item()
                sums["value_loss"] += value_loss.item()
                sums["entropy"] += ent.item()
                sums["approx_kl"] += ((w * ((ratio - 1.0) - log_ratio)).sum() / denom).item()
                sums["clip_fraction"] += ((w * ((ratio - 1.0).abs() > cfg.clip_range).float()).sum() / denom).item()
        return total, {k: v / len(self.groups) for k, v in sums.items()}

    def train_step(self, batch: Mapping[str, list], *, who: str, update: int) -> dict[str, float]:
        """One step of the summed loss on a numpy minibatch of :meth:`MAPPOCore.minibatch`; mean metrics."""
        loss, metrics = self.loss(batch)
        self.step("optimizer", loss, self.cfg.max_grad_norm, who, update)
        return metrics

    def grad_sq_norm(self, batch: Mapping[str, list]) -> float:
        """``|G_B|^2`` of the minibatch loss over every network's parameters (float64; nothing written)."""
        loss, _ = self.loss(batch)
        grads = torch.autograd.grad(loss, [p for m in self.modules.values() for p in m.parameters()])
        return float(sum(g.double().square().sum() for g in grads))


class MAPPO(MAPPOCore):
    """MAPPO / IPPO in PyTorch (see :class:`~marl_note.agents.mappo.MAPPOCore` for the algorithm).

    Example:
        >>> import gymnasium as gym
        >>> m = MAPPO({a: gym.spaces.Box(-1, 1, (2,)) for a in "ab"}, {a: gym.spaces.Discrete(3) for a in "ab"},
        ...           critic="local", hidden_sizes=(8,), seed=0)
        >>> m, m.nets.modules["critic"][0].in_features  # own observation (2) + one-hot id (2)
        (MAPPO(IPPO, agents=['a', 'b'], share_actor=True, updates=0), 4)
    """

    Networks = MAPPONetworks


class IPPO(IPPOCore):
    """IPPO: MAPPO with ``critic="local"`` by default (:class:`~marl_note.agents.mappo.IPPOCore`).

    Example:
        >>> import gymnasium as gym
        >>> IPPO({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,)).cfg.critic
        'local'
    """

    Networks = MAPPONetworks
