"""Multi-agent DDPG (MADDPG) in numpy: the networks and one gradient step with hand-written backward passes.

Everything else (seats, exploration, the joint replay, batches, the schedule, state) is the numpy
core :class:`marl_note.agents.maddpg.MADDPGCore`. The step is the torch backend's, in its order:
for each trained agent, its critic's alive-weighted squared error against the target critics at the
target actors' legal greedy actions, then its actor's loss through the just-updated critic (a
straight-through Gumbel-softmax for Discrete agents, ``tanh`` units for Box ones, plus
``action_reg``); then the trained agents' targets move ``tau``. From the same weights and batch it
gives :class:`marl_note.agents.torch.MADDPG`'s weights to float32 rounding.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.maddpg import MADDPGConfig, MADDPGCore
from marl_note.agents.numpy.layers import MLP
from marl_note.agents.numpy.networks import NumpyNetworks

__all__ = ["MADDPG", "MADDPGNetworks"]


def masked_logits(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """``logits`` with illegal actions (``legal == 0``) at -1e9: no softmax probability, never the argmax.

    Example:
        >>> masked_logits(np.array([[1.0, 2.0]], np.float32), np.array([[1.0, 0.0]], np.float32)).tolist()
        [[1.0, -1000000000.0]]
    """
    return np.where(legal > 0, logits, logits.dtype.type(-1e9))


def _one_hot(idx: np.ndarray, n: int, dtype: Any) -> np.ndarray:
    out = np.zeros((len(idx), n), dtype)
    out[np.arange(len(idx)), idx] = 1
    return out


def straight_through(soft: np.ndarray) -> np.ndarray:
    """The forward value of torch's ``one_hot(argmax soft) - soft.detach() + soft``: the one-hot sample (to
    float rounding); the backward pass takes the gradient of ``soft`` as its own."""
    return (_one_hot(soft.argmax(axis=1), soft.shape[1], soft.dtype) - soft) + soft


class MADDPGNetworks(NumpyNetworks):
    """Per agent: ``actor``, ``critic`` and their targets (networks ``<agent>.<net>``), and an Adam each
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
        self.agents, self.discrete, self.cfg = tuple(agents), dict(discrete), config
        self.actor: dict[str, MLP] = {}
        self.critic: dict[str, MLP] = {}
        self.actor_target: dict[str, MLP] = {}
        self.critic_target: dict[str, MLP] = {}
        for a in self.agents:
            for name, nets in (("actor", self.actor), ("critic", self.critic), ("actor_target", self.actor_target),
                               ("critic_target", self.critic_target)):
                nets[a] = self.mlp(f"{a}.{name}", weights, config.activation)
            self.adam(f"{a}.actor_optimizer", [f"{a}.actor"], config.actor_lr)
            self.adam(f"{a}.critic_optimizer", [f"{a}.critic"], config.critic_lr)

    def actor_output(self, agent: str, obs: np.ndarray) -> np.ndarray:
        """Actor ``agent`` on encoded observations: logits (Discrete) or tanh units (Box)."""
        out = self.actor[agent](np.asarray(obs, np.float32))
        return out if self.discrete[agent] else np.tanh(out)

    def _target_actions(self, next_obs: Sequence[np.ndarray], next_mask: Sequence[np.ndarray],
                        next_live: np.ndarray) -> list[np.ndarray]:
        """The target actors' greedy legal actions (one-hot / tanh); zeros for agents gone at the next step."""
        acts = []
        for j, a in enumerate(self.agents):
            out = self.actor_target[a](next_obs[j])
            if self.discrete[a]:
                out = _one_hot(masked_logits(out, next_mask[j]).argmax(axis=1), out.shape[1], out.dtype)
            else:
                out = np.tanh(out)
            acts.append(out * next_live[:, j:j + 1])
        return acts

    def target_actions(self, batch: Mapping[str, Any]) -> list[np.ndarray]:
        """The next-step actions the target critics see for a batch of ``MADDPGCore.prepare_batch``."""
        p = self._arrays(batch)
        return self._target_actions(p["next_obs"], p["next_mask"], p["next_live"])

    @staticmethod
    def _arrays(batch: Mapping[str, Any]) -> dict[str, Any]:
        f32 = np.float32
        return {k: [np.asarray(x, f32) for x in v] if isinstance(v, list) else np.asarray(v, f32)
                for k, v in batch.items()}

    def _critic_in(self, i: int, obs: list, acts: list) -> np.ndarray:
        parts = obs + acts if self.cfg.centralized_critic else [obs[i], acts[i]]
        return np.concatenate(parts, axis=1)

    def _own_action_columns(self, i: int, obs: list, acts: list) -> slice:
        """Where agent ``i``'s action lies in its critic's input."""
        start = (sum(o.shape[1] for o in obs) + sum(x.shape[1] for x in acts[:i]) if self.cfg.centralized_critic
                 else obs[i].shape[1])
        return slice(start, start + acts[i].shape[1])

    def _critic_loss(self, a: str, i: int, p: Mapping[str, Any], next_acts: list
                     ) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
        """Agent ``a``'s critic loss, its Q values and the gradients of its critic."""
        w = p["alive"][:, i]
        denom = np.float32(max(float(w.sum()), 1.0))
        next_q = self.critic_target[a](self._critic_in(i, p["next_obs"], next_acts))[:, 0]
        target = p["rew"][:, i] + np.float32(self.cfg.gamma) * (np.float32(1.0) - p["terminated"][:, i]) * next_q
        q_all, cache = self.critic[a].forward(self._critic_in(i, p["obs"], p["act"]))
        q = q_all[:, 0]
        err = q - target
        grads = self.grads(f"{a}.critic_optimizer")
        self.critic[a].backward((np.float32(2.0) * w * err / denom)[:, None], cache, grads)
        return float((w * err * err).sum() / denom), q, grads

    def _actor_loss(self, a: str, i: int, p: Mapping[str, Any]) -> tuple[float, dict[str, np.ndarray]]:
        """Agent ``a``'s actor loss through its critic (whose own gradients are not this step's) and the
        gradients of its actor."""
        obs, acts = p["obs"], p["act"]
        w = p["alive"][:, i]
        denom = np.float32(max(float(w.sum()), 1.0))
        reg_coef = np.float32(self.cfg.action_reg)
        out, cache = self.actor[a].forward(obs[i])
        k = out.shape[1]
        if self.discrete[a]:  # straight-through Gumbel-softmax: one-hot forward, relaxed backward
            z = (masked_logits(out, p["mask"][i]) + p["gumbel"][i]) / p["temperature"][i]
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            soft = e / e.sum(axis=1, keepdims=True)
            own = straight_through(soft)
            reg = (out * out).mean(axis=1)
        else:
            own = np.tanh(out)
            reg = (own * own).mean(axis=1)
        q_pi, c_cache = self.critic[a].forward(self._critic_in(i, obs, acts[:i] + [own] + acts[i + 1:]))
        loss = float((w * (reg_coef * reg - q_pi[:, 0])).sum() / denom)
        grad_in = self.critic[a].backward((-w / denom)[:, None], c_cache, {}, need_input=True, params=False)
        assert grad_in is not None
        grad_own = grad_in[:, self._own_action_columns(i, obs, acts)]
        grad_reg = (reg_coef * w / denom)[:, None] * np.float32(2.0 / k)
        if self.discrete[a]:
            grad_z = soft * (grad_own - (grad_own * soft).sum(axis=1, keepdims=True))
            grad_out = (grad_z / p["temperature"][i]) * (p["mask"][i] > 0) + grad_reg * out
        else:
            grad_out = (grad_own + grad_reg * own) * (np.float32(1.0) - own * own)
        grads = self.grads(f"{a}.actor_optimizer")
        self.actor[a].backward(grad_out.astype(np.float32, copy=False), cache, grads)
        return loss, grads

    def grad_sq_norm(self, batch: Mapping[str, Any]) -> float:
        """``|G_B|^2`` of the sum of every agent's critic loss over the critics' parameters (float64;
        the critics are disjoint, so it is the sum of the agents' own squared norms; nothing written)."""
        p = self._arrays(batch)
        next_acts = self._target_actions(p["next_obs"], p["next_mask"], p["next_live"])
        return float(sum(np.square(g, dtype=np.float64).sum() for i, a in enumerate(self.agents)
                         for g in self._critic_loss(a, i, p, next_acts)[2].values()))

    def train_step(self, batch: Mapping[str, Any], *, who: str, update: int,
                   agents: Sequence[str] | None = None) -> dict[str, float]:
        """Critic then actor step of each of ``agents`` (default: all) on a numpy joint batch, then their
        targets' Polyak step; mean losses and Q over those agents."""
        cfg, p = self.cfg, self._arrays(batch)
        next_acts = self._target_actions(p["next_obs"], p["next_mask"], p["next_live"])
        trained = self.agents if agents is None else tuple(agents)
        totals = {"critic_loss": 0.0, "actor_loss": 0.0, "q_mean": 0.0}
        for a in trained:
            i = self.agents.index(a)
            critic_loss, q, grads = self._critic_loss(a, i, p, next_acts)
            self.step(f"{a}.critic_optimizer", critic_loss, grads, cfg.max_grad_norm, who, update,
                      f"agent {a!r} critic loss")
            actor_loss, grads = self._actor_loss(a, i, p)
            self.step(f"{a}.actor_optimizer", actor_loss, grads, cfg.max_grad_norm, who, update,
                      f"agent {a!r} actor loss")
            w = p["alive"][:, i]
            totals["critic_loss"] += critic_loss
            totals["actor_loss"] += actor_loss
            totals["q_mean"] += float((w * q).sum() / max(float(w.sum()), 1.0))
        for a in trained:
            self.sync(f"{a}.actor_target", f"{a}.actor", cfg.tau)
            self.sync(f"{a}.critic_target", f"{a}.critic", cfg.tau)
        return {k: v / len(trained) for k, v in totals.items()}


class MADDPG(MADDPGCore):
    """MADDPG in numpy (MLP networks; see :class:`~marl_note.agents.maddpg.MADDPGCore` for the algorithm).
    Checkpoints are the torch and tf backends'.

    Example:
        >>> import gymnasium as gym
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(8,), seed=0)
        >>> type(m.nets.critic["a"]).__name__, m.state_dict()["a.critic.0.weight"].shape  # Q(o_a, a_a): 2 + 3
        ('MLP', (8, 5))
    """

    Networks = MADDPGNetworks
