"""Multi-agent DDPG (MADDPG, Lowe et al. 2017) in PyTorch: the networks and one gradient step.

Everything else (seats, exploration, the joint replay, batches, the schedule, state) is the numpy
core :class:`marl_note.agents.maddpg.MADDPGCore`.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.maddpg import MADDPGConfig, MADDPGCore
from marl_note.agents.torch.networks import TorchNetworks

__all__ = ["MADDPG", "MADDPGNetworks"]


def masked_logits(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """``logits`` with illegal actions (``legal == 0``) at -1e9: no softmax probability, never the argmax."""
    return logits.masked_fill(legal <= 0, -1e9)


class MADDPGNetworks(TorchNetworks):
    """Per agent: ``actor``, ``critic`` and their targets (modules ``<agent>.<net>``), and an Adam each
    for actor and critic (``<agent>.actor_optimizer``, ``<agent>.critic_optimizer``).

    Example (the core builds them; forward passes take and return numpy):
        >>> import gymnasium as gym
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Box(-1, 1, (1,))}, hidden_sizes=(4,))
        >>> m.nets.actor_output("a", np.zeros((3, 2), np.float32)).shape, m.nets.weight_names[:2]
        ((3, 1), ('a.actor', 'a.critic'))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, agents: Sequence[str], discrete: Mapping[str, bool],
                 config: MADDPGConfig, device: Any = "cpu", compile: bool = False):
        super().__init__(device, compile)
        if compile:
            warnings.warn("MADDPG's PyTorch networks run eagerly: compile=True has no effect", stacklevel=3)
        self.agents, self.discrete, self.cfg = tuple(agents), dict(discrete), config
        self.actor: dict[str, nn.Module] = {}
        self.critic: dict[str, nn.Module] = {}
        self.actor_target: dict[str, nn.Module] = {}
        self.critic_target: dict[str, nn.Module] = {}
        for a in self.agents:
            for name, nets in (("actor", self.actor), ("critic", self.critic), ("actor_target", self.actor_target),
                               ("critic_target", self.critic_target)):
                nets[a] = self.mlp(f"{a}.{name}", weights, config.activation, trainable="target" not in name)
            self.adam(f"{a}.actor_optimizer", [f"{a}.actor"], config.actor_lr)
            self.adam(f"{a}.critic_optimizer", [f"{a}.critic"], config.critic_lr)

    @torch.no_grad()
    def actor_output(self, agent: str, obs: np.ndarray) -> np.ndarray:
        """Actor ``agent`` on encoded observations: logits (Discrete) or tanh units (Box)."""
        out = self.actor[agent](self.tensor(obs))
        return (out if self.discrete[agent] else torch.tanh(out)).cpu().numpy()

    def _target_actions(self, next_obs: list, next_mask: list, next_live: torch.Tensor) -> list[torch.Tensor]:
        """The target actors' greedy legal actions (one-hot / tanh); zeros for agents gone at the next step."""
        acts = []
        for j, a in enumerate(self.agents):
            out = self.actor_target[a](next_obs[j])
            if self.discrete[a]:
                out = nn.functional.one_hot(masked_logits(out, next_mask[j]).argmax(dim=1), out.shape[1]).to(out.dtype)
            else:
                out = torch.tanh(out)
            acts.append(out * next_live[:, j:j + 1])
        return acts

    @torch.no_grad()
    def target_actions(self, batch: Mapping[str, Any]) -> list[np.ndarray]:
        """The next-step actions the target critics see for a batch of ``MADDPGCore.prepare_batch``."""
        p = self._tensors(batch)
        return [x.cpu().numpy() for x in self._target_actions(p["next_obs"], p["next_mask"], p["next_live"])]

    def _tensors(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        return {k: [self.tensor(x) for x in v] if isinstance(v, list) else self.tensor(v) for k, v in batch.items()}

    def _critic_in(self, i: int, obs: list, acts: list) -> torch.Tensor:
        return torch.cat(obs + acts, dim=1) if self.cfg.centralized_critic else torch.cat([obs[i], acts[i]], dim=1)

    def grad_sq_norm(self, batch: Mapping[str, Any]) -> float:
        """``|G_B|^2`` of the sum of every agent's critic loss over the critics' parameters (float64;
        the critics are disjoint, so it is the sum of the agents' own squared norms; nothing written)."""
        p = self._tensors(batch)
        obs, acts, next_obs, alive = p["obs"], p["act"], p["next_obs"], p["alive"]
        total: Any = 0.0
        params: list[nn.Parameter] = []
        with torch.no_grad():
            next_acts = self._target_actions(next_obs, p["next_mask"], p["next_live"])
        for i, a in enumerate(self.agents):
            w = alive[:, i]
            with torch.no_grad():
                next_q = self.critic_target[a](self._critic_in(i, next_obs, next_acts)).squeeze(1)
                target = p["rew"][:, i] + self.cfg.gamma * (1.0 - p["terminated"][:, i]) * next_q
            q = self.critic[a](self._critic_in(i, obs, acts)).squeeze(1)
            total = total + (w * (q - target).pow(2)).sum() / w.sum().clamp(min=1.0)
            params += list(self.critic[a].parameters())
        grads = torch.autograd.grad(total, params)
        return float(sum(g.double().square().sum() for g in grads))

    def train_step(self, batch: Mapping[str, Any], *, who: str, update: int,
                   agents: Sequence[str] | None = None) -> dict[str, float]:
        """Critic then actor step of each of ``agents`` (default: all) on a numpy joint batch, then their
        targets' Polyak step; mean losses and Q over those agents."""
        cfg, p = self.cfg, self._tensors(batch)
        obs, acts, next_obs, alive = p["obs"], p["act"], p["next_obs"], p["alive"]
        with torch.no_grad():
            next_acts = self._target_actions(next_obs, p["next_mask"], p["next_live"])
        trained = self.agents if agents is None else tuple(agents)
        totals = {"critic_loss": 0.0, "actor_loss": 0.0, "q_mean": 0.0}
        for a in trained:
            i = self.agents.index(a)
            w = alive[:, i]
            denom = w.sum().clamp(min=1.0)
            with torch.no_grad():
                next_q = self.critic_target[a](self._critic_in(i, next_obs, next_acts)).squeeze(1)
                target = p["rew"][:, i] + cfg.gamma * (1.0 - p["terminated"][:, i]) * next_q
            q = self.critic[a](self._critic_in(i, obs, acts)).squeeze(1)
            critic_loss = (w * (q - target).pow(2)).sum() / denom
            self.step(f"{a}.critic_optimizer", critic_loss, cfg.max_grad_norm, who, update, f"agent {a!r} critic loss")

            out = self.actor[a](obs[i])
            if self.discrete[a]:  # straight-through Gumbel-softmax: one-hot forward, relaxed backward
                soft = torch.softmax((masked_logits(out, p["mask"][i]) + p["gumbel"][i]) / p["temperature"][i], dim=1)
                own = nn.functional.one_hot(soft.argmax(dim=1), soft.shape[1]).to(soft.dtype) - soft.detach() + soft
                reg = out.pow(2).mean(dim=1)
            else:
                own = torch.tanh(out)
                reg = own.pow(2).mean(dim=1)
            q_pi = self.critic[a](self._critic_in(i, obs, acts[:i] + [own] + acts[i + 1:])).squeeze(1)
            actor_loss = (w * (cfg.action_reg * reg - q_pi)).sum() / denom
            self.step(f"{a}.actor_optimizer", actor_loss, cfg.max_grad_norm, who, update, f"agent {a!r} actor loss")
            totals["critic_loss"] += critic_loss.item()
            totals["actor_loss"] += actor_loss.item()
            totals["q_mean"] += ((w * q.detach()).sum() / denom).item()
        for a in trained:
            self.sync(f"{a}.actor_target", f"{a}.actor", cfg.tau)
            self.sync(f"{a}.critic_target", f"{a}.critic", cfg.tau)
        return {k: v / len(trained) for k, v in totals.items()}


class MADDPG(MADDPGCore):
    """MADDPG in PyTorch (see :class:`~marl_note.agents.maddpg.MADDPGCore` for the algorithm).

    Example:
        >>> import gymnasium as gym
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(8,), seed=0)
        >>> type(m.nets.critic["a"]).__name__, m.nets.critic["a"][0].in_features  # Q(o_a, a_a): 2 + 3
        ('Sequential', 5)
    """

    Networks = MADDPGNetworks
