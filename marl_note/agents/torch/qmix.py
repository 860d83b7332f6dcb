"""Value decomposition (VDN, QMIX) in PyTorch: the agents' Q-networks, the mixer and one gradient step.

Everything else (seats, exploration, the joint replay, batches, the schedule, state) is the numpy
core :class:`marl_note.agents.qmix.QMIXCore`.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.qmix import MIXER_PARTS, QMIXConfig, QMIXCore, VDNCore
from marl_note.agents.torch.networks import TorchNetworks

__all__ = ["QMIX", "QMIXNetworks", "VDN"]


class QMIXNetworks(TorchNetworks):
    """The agents' Q-networks (``q_net`` shared, or ``<agent>.q_net`` per seat) and their targets
    (``target_net``), QMIX's hypernetworks (``mixer.<part>``, ``target_mixer.<part>``) and one Adam
    (``optimizer``) over the online Q-networks and mixer.

    Example (the core builds them; forward passes take and return numpy):
        >>> import gymnasium as gym
        >>> q = QMIX({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,))
        >>> q.nets.q_values("q_net", np.zeros((5, 3), np.float32)).shape, q.nets.weight_names[:2]
        ((5, 3), ('q_net', 'target_net'))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, agents: Sequence[str], net_of: Mapping[str, str],
                 config: QMIXConfig, device: Any = "cpu", compile: bool = False):
        super().__init__(device, compile)
        if compile:
            warnings.warn("QMIX's PyTorch networks run eagerly: compile=True has no effect", stacklevel=3)
        self.agents, self.cfg = tuple(agents), config
        self.online = [net_of[a] for a in self.agents]
        self.target = [QMIXCore.target_name(name) for name in self.online]
        names = list(OrderedDict.fromkeys(self.online))
        for name in names:
            self.mlp(name, weights, config.activation)
            self.mlp(QMIXCore.target_name(name), weights, config.activation, trainable=False)
        self.pairs = [(QMIXCore.target_name(name), name) for name in names]
        if config.mixer == "qmix":
            for part in MIXER_PARTS:
                self.mlp(f"mixer.{part}", weights, "relu")
                self.mlp(f"target_mixer.{part}", weights, "relu", trainable=False)
                self.pairs.append((f"target_mixer.{part}", f"mixer.{part}"))
            names += [f"mixer.{part}" for part in MIXER_PARTS]
        self.adam("optimizer", names, config.lr)

    @torch.no_grad()
    def q_values(self, name: str, x: np.ndarray) -> np.ndarray:
        """Q-network ``name`` on its inputs (numpy ``[B, outputs]``)."""
        return self.modules[name](self.tensor(x)).cpu().numpy()

    def mix(self, q: torch.Tensor, state: torch.Tensor, target: bool = False) -> torch.Tensor:
        """``Q_tot`` ``[B]`` of the agents' chosen Q-values ``q`` ``[B, n]``: their sum (VDN) or QMIX's
        monotonic mixing on ``state`` (the online or ``target`` mixer)."""
        if self.cfg.mixer == "vdn":
            return q.sum(dim=1)
        prefix = "target_mixer" if target else "mixer"
        nets = {part: self.modules[f"{prefix}.{part}"] for part in MIXER_PARTS}
        b, n, e = q.shape[0], q.shape[1], self.cfg.mixing_embed
        w1 = nets["hyper_w1"](state).abs().view(b, n, e)
        b1 = nets["hyper_b1"](state).view(b, 1, e)
        hidden = nn.functional.elu(torch.bmm(q.view(b, 1, n), w1) + b1)
        w2 = nets["hyper_w2"](state).abs().view(b, e, 1)
        return (torch.bmm(hidden, w2).view(b) + nets["value"](state).view(b))

    def _tensors(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        return {k: [self.tensor(x) for x in v] if isinstance(v, list) else
                self.tensor(v, torch.int64 if k == "act" else torch.float32) for k, v in batch.items()}

    def _chosen(self, p: Mapping[str, Any]) -> torch.Tensor:
        """The online Q-values of the stored actions ``[B, n]``, zero where an agent did not act."""
        qs = [self.modules[name](x).gather(1, p["act"][:, j:j + 1]) for j, (name, x) in enumerate(zip(self.online,
                                                                                                         p["obs"]))]
        return torch.cat(qs, dim=1) * p["alive"]

    @torch.no_grad()
    def _target(self, p: Mapping[str, Any]) -> torch.Tensor:
        """``r + gamma * live * Q'_tot(s', a*)`` with ``a*`` legal, chosen online (double) or by the target."""
        picked = []
        for j, (name, tname) in enumerate(zip(self.online, self.target)):
            x, legal = p["next_obs"][j], p["next_legal"][j]
            q_next = self.modules[tname](x)
            chooser = self.modules[name](x) if self.cfg.double else q_next
            best = chooser.masked_fill(legal <= 0, -torch.inf).argmax(dim=1, keepdim=True)
            picked.append(q_next.gather(1, best))
        q_next = torch.cat(picked, dim=1) * p["next_live"]
        return p["rew"] + self.cfg.gamma * p["live"] * self.mix(q_next, p["next_state"], target=True)

    def _loss(self, p: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        target = self._target(p)
        q_tot = self.mix(self._chosen(p), p["state"])
        w = p["weight"]
        return (w * (q_tot - target).pow(2)).sum() / w.sum().clamp(min=1.0), q_tot, target

    def td_target(self, batch: Mapping[str, Any]) -> np.ndarray:
        return self._target(self._tensors(batch)).cpu().numpy()

    @torch.no_grad()
    def q_tot(self, batch: Mapping[str, Any]) -> np.ndarray:
        p = self._tensors(batch)
        return self.mix(self._chosen(p), p["state"]).cpu().numpy()

    def grad_sq_norm(self, batch: Mapping[str, Any]) -> float:
        """``|G_B|^2`` of the TD loss over the online Q-networks and mixer (float64; nothing written)."""
        loss, _, _ = self._loss(self._tensors(batch))
        params = self.optimized_params("optimizer")
        return float(sum(g.double().square().sum() for g in torch.autograd.grad(loss, params)))

    def train_step(self, batch: Mapping[str, Any], *, who: str, update: int) -> dict[str, float]:
        """One Adam step of the TD loss on a numpy batch of ``QMIXCore.prepare_batch``; mean loss, Q_tot and |TD|."""
        p = self._tensors(batch)
        loss, q_tot, target = self._loss(p)
        self.step("optimizer", loss, self.cfg.max_grad_norm, who, update, "TD loss")
        w = p["weight"]
        denom = w.sum().clamp(min=1.0)
        q_mean = (w * q_tot.detach()).sum() / denom
        td = (w * (target - q_tot.detach()).abs()).sum() / denom
        loss_v, q_v, td_v = torch.stack([loss.detach(), q_mean, td]).tolist()
        return {"loss": loss_v, "q_tot_mean": q_v, "td_abs": td_v}

    def sync_targets(self, tau: float | None) -> None:
        """Copy the online Q-networks and mixer into their targets (``tau=None``) or move them ``tau`` of the way."""
        for target, source in self.pairs:
            self.sync(target, source, tau)


class QMIX(QMIXCore):
    """QMIX (and VDN with ``mixer="vdn"``) in PyTorch; see :class:`~marl_note.agents.qmix.QMIXCore`.

    Example:
        >>> import gymnasium as gym
        >>> q = QMIX({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Box(-1, 1, (2,))},
        ...          {"a": gym.spaces.Discrete(3), "b": gym.spaces.Discrete(3)}, share_weights=False, hidden_sizes=(8,))
        >>> sorted(q.nets.weight_names)[:3]
        ['a.q_net', 'a.target_net', 'b.q_net']
    """

    Networks = QMIXNetworks


class VDN(VDNCore):
    """VDN in PyTorch: :class:`QMIX` with the sum mixer by default (see :class:`~marl_note.agents.qmix.VDNCore`).

    Example:
        >>> import gymnasium as gym
        >>> VDN({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,)).mixer
        'vdn'
    """

    Networks = QMIXNetworks
