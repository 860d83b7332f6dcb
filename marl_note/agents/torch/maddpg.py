"""Multi-agent DDPG (MADDPG, Lowe et al. 2017) in PyTorch: decentralised actors, centralised critics.

The numpy side (seats, exploration, storing joint rows, batch preparation, the update schedule)
lives in :mod:`marl_note.agents.maddpg_common` and is shared with the TF backend; this module
holds the networks and one gradient step (``learn``), readable top to bottom.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl_note.agents.maddpg_common import JointLearnerBase, MADDPGSeat, encode_obs
from marl_note.agents.torch.common import (checked_step, mlp, module_from_numpy, module_to_numpy,
                                           optimizer_from_numpy, optimizer_to_numpy)
from marl_note.types import JointTransitions

__all__ = ["MADDPG", "MADDPGSeat"]


def masked_logits(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """``logits`` with illegal actions (``legal == 0``) at -1e9: no softmax probability, never the argmax."""
    return logits.masked_fill(legal <= 0, -1e9)


class MADDPG(JointLearnerBase):
    """MADDPG: per-agent decentralised actors and centralised critics ``Q_i(all obs, all actions)``.

    Discrete actions: the actor outputs logits; acting samples from ``softmax(logits)`` when
    exploring (Gumbel-max, :class:`~marl_note.agents.policies.GumbelSoftmaxPolicy`) and takes the
    argmax otherwise; the actor loss differentiates through a straight-through Gumbel-softmax
    sample (hard one-hot forward, relaxed gradient, ``temperature``). Box actions: a ``tanh``
    actor scaled to the bounds with Gaussian exploration noise ``noise_sigma`` (half-range units;
    ``noise={agent: process}`` takes any process of :mod:`marl_note.agents.noise`, of one action's
    size; each env gets its own copy, and only an env whose episode ended has its copy reset).

    Critic ``i`` sees every agent's observation and action (one-hot for Discrete, [-1, 1] for
    Box; agents that did not act in a row are zeros) and regresses on
    ``r_i + gamma * (1 - terminated_i) * Q'_i(s', mu'(s'))`` with the target actors' greedy
    actions (masked by the stored ``next_mask``: an illegal action gets no probability); actor ``i``
    ascends ``Q_i`` with the other agents' stored actions (its own relaxed sample masked by ``mask``), minus
    ``action_reg`` times its mean squared logits (Box: actions). Rows where agent ``i`` did not
    act are masked out of its losses. Targets follow with rate ``tau`` after every gradient step.
    ``centralized_critic=False`` (alias ``MARL=False``) gives independent critics ``Q_i(o_i, a_i)``.

    The trainer plays :meth:`seat_agents` (one actor per seat) and hands this object the joint
    rows (``observe_joint``); ``update(batch_size)`` runs ``update_steps`` gradient steps, or
    ``max(1, round(replay_ratio * new rows))`` when that is None, none before ``learning_starts``
    rows. ``reward_done_func_ma(joint) -> (rew, terminated)`` (both ``[B, num_agents]``)
    reshapes rewards and dones before they are stored.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import JointTransitions
        >>> obs = {"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Box(-1, 1, (3,))}
        >>> acts = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,))}
        >>> m = MADDPG(obs, acts, learning_starts=4, seed=0)
        >>> [s.act(np.zeros((5, s.observation_space.shape[0]))).shape for s in m.seat_agents()]
        [(5,), (5, 2)]
        >>> m.observe_joint(JointTransitions(("a", "b"), obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))},
        ...     act={"a": np.array([0, 1, 2, 0]), "b": np.zeros((4, 2))}, rew=np.ones((4, 2)),
        ...     next_obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))}, terminated=np.zeros((4, 2), bool),
        ...     truncated=np.zeros((4, 2), bool), alive=np.ones((4, 2), bool)))
        >>> m.update(batch_size=4)["gradient_steps"]
        1
        >>> m.critic["a"][0].in_features  # all observations (2 + 3) and actions (3 + 2)
        10
    """

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "relu", actor_lr: float = 1e-2,
                 critic_lr: float = 1e-2, gamma: float = 0.95, tau: float = 0.01, buffer_size: int = 100_000,
                 learning_starts: int = 1024, replay_ratio: float = 0.05, update_steps: int | None = None,
                 temperature: float = 1.0, noise_sigma: float = 0.1, noise: Mapping[str, Any] | None = None,
                 action_reg: float = 1e-3, max_grad_norm: float | None = 0.5, centralized_critic: bool = True,
                 MARL: bool | None = None, reward_done_func_ma: Callable | None = None,
                 seed: int | None = None, device: str | torch.device = "cpu"):
        super().__init__(observation_spaces, action_spaces, gamma=gamma, tau=tau, buffer_size=buffer_size,
                         learning_starts=learning_starts, replay_ratio=replay_ratio, update_steps=update_steps,
                         temperature=temperature, noise_sigma=noise_sigma, noise=noise, action_reg=action_reg,
                         max_grad_norm=max_grad_norm, centralized_critic=centralized_critic, MARL=MARL,
                         reward_done_func_ma=reward_done_func_ma, seed=seed)
        self.device = torch.device(device)
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(self.init_seed)
        self.actor, self.critic, self.actor_target, self.critic_target = {}, {}, {}, {}
        self.actor_optimizer, self.critic_optimizer = {}, {}
        for a in self.agents:
            actor_in, critic_in = self.obs_dim[a], self.critic_input_dim(a)
            for nets, in_dim, out in ((self.actor, actor_in, self.act_dim[a]), (self.critic, critic_in, 1),
                                      (self.actor_target, actor_in, self.act_dim[a]), (self.critic_target, critic_in, 1)):
                nets[a] = mlp(in_dim, hidden_sizes, out, activation, self.generator).to(self.device)
            for target, source in ((self.actor_target, self.actor), (self.critic_target, self.critic)):
                target[a].load_state_dict(source[a].state_dict())
                target[a].requires_grad_(False)
            self.actor_optimizer[a] = torch.optim.Adam(self.actor[a].parameters(), lr=actor_lr)
            self.critic_optimizer[a] = torch.optim.Adam(self.critic[a].parameters(), lr=critic_lr)
        pairs = [(t, s) for a in self.agents for target, source in ((self.actor_target[a], self.actor[a]),
                                                                    (self.critic_target[a], self.critic[a]))
                 for t, s in zip(target.parameters(), source.parameters())]
        self._target_params, self._source_params = [t for t, _ in pairs], [s for _, s in pairs]

    # -- acting ------------------------------------------------------------------------------------
    def actor_outputs(self, agent: str, obs: Any) -> np.ndarray:
        """Actor output ``[B, act_dim]``: logits (Discrete) or tanh units in [-1, 1] (Box)."""
        x = torch.as_tensor(encode_obs(self.observation_spaces[agent], obs), device=self.device)
        with torch.inference_mode():
            out = self.actor[agent](x)
            return (out if self.discrete[agent] else torch.tanh(out)).cpu().numpy()

    # -- learning ----------------------------------------------------------------------------------
    def _critic_in(self, i: int, obs: list, acts: list) -> torch.Tensor:
        return torch.cat(obs + acts, dim=1) if self.centralized_critic else torch.cat([obs[i], acts[i]], dim=1)

    def _target_action(self, agent: str, next_obs: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
        out = self.actor_target[agent](next_obs)
        if self.discrete[agent]:
            out = masked_logits(out, legal)
            return nn.functional.one_hot(out.argmax(dim=1), out.shape[1]).to(out.dtype)
        return torch.tanh(out)

    def learn(self, batch: JointTransitions) -> dict[str, float]:
        """One gradient step of every agent's critic, then its actor, on an explicit joint batch."""
        p = {k: [torch.as_tensor(x, device=self.device) for x in v] if isinstance(v, list)
             else torch.as_tensor(v, device=self.device) for k, v in self.prepare_batch(batch).items()}
        obs, acts, next_obs, alive = p["obs"], p["act"], p["next_obs"], p["alive"]
        with torch.no_grad():
            next_acts = [self._target_action(a, next_obs[j], p["next_mask"][j]) * p["next_live"][:, j:j + 1]
                         for j, a in enumerate(self.agents)]
        totals = {"critic_loss": 0.0, "actor_loss": 0.0, "q_mean": 0.0}
        for i, a in enumerate(self.agents):
            w = alive[:, i]
            denom = w.sum().clamp(min=1.0)
            with torch.no_grad():
                next_q = self.critic_target[a](self._critic_in(i, next_obs, next_acts)).squeeze(1)
                target = p["rew"][:, i] + self.gamma * (1.0 - p["terminated"][:, i]) * next_q
            q = self.critic[a](self._critic_in(i, obs, acts)).squeeze(1)
            critic_loss = (w * (q - target).pow(2)).sum() / denom
            self._step(self.critic_optimizer[a], self.critic[a], critic_loss, f"agent {a!r} critic loss")

            out = self.actor[a](obs[i])
            if self.discrete[a]:  # straight-through Gumbel-softmax: one-hot forward, relaxed backward
                soft = torch.softmax((masked_logits(out, p["mask"][i]) + p["gumbel"][i]) / p["temperature"][i], dim=1)
                own = nn.functional.one_hot(soft.argmax(dim=1), soft.shape[1]).to(soft.dtype) - soft.detach() + soft
                reg = out.pow(2).mean(dim=1)
            else:
                own = torch.tanh(out)
                reg = own.pow(2).mean(dim=1)
            q_pi = self.critic[a](self._critic_in(i, obs, acts[:i] + [own] + acts[i + 1:])).squeeze(1)
            actor_loss = (w * (self.action_reg * reg - q_pi)).sum() / denom
            self._step(self.actor_optimizer[a], self.actor[a], actor_loss, f"agent {a!r} actor loss")
            totals["critic_loss"] += critic_loss.item()
            totals["actor_loss"] += actor_loss.item()
            totals["q_mean"] += ((w * q.detach()).sum() / denom).item()
        self.updates += 1
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._source_params, self.tau)
        return {k: v / len(self.agents) for k, v in totals.items()}

    def _step(self, opt: torch.optim.Optimizer, net: nn.Module, loss: torch.Tensor, name: str) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        checked_step(opt, net.parameters(), loss, self.max_grad_norm, type(self).__name__, self.updates + 1, name)

    # -- state -------------------------------------------------------------------------------------
    def _modules(self):
        for a in self.agents:
            for name, nets in (("actor", self.actor), ("critic", self.critic), ("actor_target", self.actor_target),
                               ("critic_target", self.critic_target)):
                yield f"{a}.{name}", nets[a]

    def _optimizers(self):
        for a in self.agents:
            yield f"{a}.actor_optimizer", self.actor_optimizer[a]
            yield f"{a}.critic_optimizer", self.critic_optimizer[a]

    def _optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return {name: [tuple(p.shape) for g in opt.param_groups for p in g["params"]]
                for name, opt in self._optimizers()}

    def _net_state(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, net in self._modules():
            out.update(module_to_numpy(name, net))
        for name, opt in self._optimizers():
            out.update(optimizer_to_numpy(name, opt))
        out["torch_rng"] = self.generator.get_state().numpy().copy()
        return out

    def _load_net_state(self, state: Mapping[str, Any]) -> None:
        for name, net in self._modules():
            module_from_numpy(name, net, state)
        for name, opt in self._optimizers():
            optimizer_from_numpy(name, opt, state)
        if "torch_rng" in state:
            self.generator.set_state(torch.as_tensor(np.asarray(state["torch_rng"], np.uint8)))
