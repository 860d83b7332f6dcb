"""Deep deterministic policy gradient (DDPG) for Box actions, in PyTorch, with HER for goal envs.

Read top to bottom: acting (``act``), storing (``observe``), the critic target (``td_target``),
one gradient step (``_gradient_step``) and the update schedule (``update``).
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl_note.agents.checks import check_transitions
from marl_note.agents.configs import apply_ddpg_config
from marl_note.agents.continuous import check_box_action_space
from marl_note.agents.replay_options import network_space
from marl_note.agents.rl_common import run_update_schedule
from marl_note.agents.torch.common import TorchAgent, checked_step, mlp
from marl_note.types import Transitions


class DDPG(TorchAgent):
    """DDPG: a deterministic tanh actor, a Q critic, Polyak-averaged target copies of both, replay.

    The actor outputs ``tanh`` values in [-1, 1] per action dimension, scaled affinely to the Box
    bounds (which must be finite); the critic sees the observation and the action rescaled to
    [-1, 1]. Exploring adds ``noise`` in those unit coordinates (default: Gaussian with
    ``sigma=0.1``, i.e. 10 % of the half range; any process from :mod:`marl_note.agents.noise`
    works, see :class:`~marl_note.agents.continuous.ExplorationNoise`) and clips to the bounds.
    The critic regresses on ``r + discount * (1 - terminated) * Q'(s', mu'(s'))`` (``discount`` =
    ``transitions.discount`` for n-step, else ``gamma``; optionally clipped to ``target_clip``);
    the actor ascends ``Q(s, mu(s))`` minus ``action_l2 * mean(mu(s)**2)``. Both targets follow
    with rate ``tau`` after every gradient step. The update schedule is DQN's: ``update_steps``
    gradient steps per ``update()`` call, or ``max(1, round(replay_ratio * new transitions))``
    when that is None, and none until ``learning_starts`` transitions are stored.

    Replay options (shared with DQN): ``PR=True, alpha, beta, initial_TD`` for prioritized replay
    (``|TD|`` is fed back after each step), ``num_steps=n`` for n-step returns, and for goal envs
    (Dict observations with ``observation``/``achieved_goal``/``desired_goal``)
    ``her=dict(strategy="future", k=4), compute_reward=env.compute_reward`` or
    ``replay=HERReplayBuffer(...)``. Goal observations are flattened to
    ``[observation, desired_goal]``; ``act`` takes the dict of batched arrays. ``augment=fn`` also
    stores ``fn(transitions)`` (e.g. mirrored states and actions) next to every stored batch.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(0.0, 2.0, (2,)), learning_starts=8, seed=0)
        >>> a = agent.act(np.zeros((4, 3)), explore=True)
        >>> a.shape, bool(((0 <= a) & (a <= 2)).all())
        ((4, 2), True)
        >>> agent.observe(Transitions(obs=np.zeros((8, 3)), act=np.ones((8, 2)), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 3)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"]
        8
        >>> sorted(k for k in agent.state_dict() if k.startswith("actor."))
        ['actor.0.bias', 'actor.0.weight', 'actor.2.bias', 'actor.2.weight', 'actor.4.bias', 'actor.4.weight']
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: tuple[int, ...] = (256, 256), activation: str = "relu",
                 actor_lr: float = 1e-3, critic_lr: float = 1e-3, gamma: float = 0.98, tau: float = 0.05,
                 buffer_size: int = 100_000, learning_starts: int = 1000, replay_ratio: float = 1.0,
                 update_steps: int | None = None, noise=None, action_l2: float = 0.0,
                 target_clip: tuple[float, float] | None = None, max_grad_norm: float | None = None,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 num_steps: int = 1, her=None, compute_reward=None, replay=None, augment=None,
                 seed: int | None = None, device: str | torch.device = "cpu"):
        check_box_action_space(action_space)
        super().__init__(network_space(observation_space), action_space, seed, device)
        self.observation_space = observation_space
        apply_ddpg_config(self, observation_space, action_space, gamma=gamma, tau=tau, buffer_size=buffer_size,
                          learning_starts=learning_starts, replay_ratio=replay_ratio, update_steps=update_steps,
                          noise=noise, action_l2=action_l2, target_clip=target_clip, max_grad_norm=max_grad_norm,
                          PR=PR, alpha=alpha, beta=beta, initial_TD=initial_TD, num_steps=num_steps, her=her,
                          compute_reward=compute_reward, replay=replay, augment=augment)

        obs_dim, act_dim = self.encoder.dim, self.scaler.dim
        self.actor = nn.Sequential(mlp(obs_dim, hidden_sizes, act_dim, activation, self.generator), nn.Tanh())
        self.actor = _flatten(self.actor).to(self.device)
        self.critic = mlp(obs_dim + act_dim, hidden_sizes, 1, activation, self.generator).to(self.device)
        self.actor_target = _flatten(nn.Sequential(mlp(obs_dim, hidden_sizes, act_dim, activation, self.generator),
                                                   nn.Tanh())).to(self.device)
        self.critic_target = mlp(obs_dim + act_dim, hidden_sizes, 1, activation, self.generator).to(self.device)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=critic_lr)
        self._nets = {"actor": self.actor, "critic": self.critic, "actor_target": self.actor_target,
                      "critic_target": self.critic_target}
        self._optims = {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer}
        self._new_transitions = 0

    @property
    def prioritized(self) -> bool:
        return self._feed.prioritized

    # -- acting ------------------------------------------------------------------------------------
    def unit_actions(self, obs: Any) -> np.ndarray:
        """Deterministic actor outputs in [-1, 1], ``[B, action_dim]`` float32."""
        x = self.encoder(self._feed.observation(obs))
        with torch.inference_mode():
            return self.actor(x).cpu().numpy()

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        """Actions within the Box bounds, ``[B, *action_shape]``; ``mask`` is ignored (Box actions)."""
        unit = self.unit_actions(obs).astype(np.float64)
        if explore:
            unit = self.noise(unit)
        return self.scaler.to_env(unit)

    def q_values(self, obs: Any, act: np.ndarray) -> np.ndarray:
        """Online critic values ``[B]`` for env-scale actions."""
        x = self.encoder(self._feed.observation(obs))
        a = torch.as_tensor(self.scaler.to_unit(act), device=self.device)
        with torch.inference_mode():
            return self.critic(torch.cat([x, a], dim=1)).squeeze(1).cpu().numpy()

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        act = np.asarray(flat.act)
        if act.shape[1:] != self.scaler.shape:
            raise ValueError(f"transitions.act has shape {act.shape}, expected (batch, *{self.scaler.shape})")
        self._feed.add(transitions, flat)
        n = len(transitions)
        self.agent_steps += n
        self._new_transitions += n
        self.noise.episodes_ended(transitions.stream, transitions.done)

    # -- learning ----------------------------------------------------------------------------------
    def td_target(self, batch: Transitions) -> torch.Tensor:
        """``r + discount * (1 - terminated) * Q_target(s', mu_target(s'))``, clipped to ``target_clip``."""
        next_x = self.encoder(batch.next_obs, "next_obs")
        rew = torch.as_tensor(np.asarray(batch.rew, np.float32), device=self.device)
        alive = torch.as_tensor(~np.asarray(batch.terminated, bool), device=self.device).to(rew.dtype)
        if batch.discount is not None:
            discount = torch.as_tensor(np.asarray(batch.discount, np.float32), device=self.device)
        else:
            discount = torch.full_like(rew, self.gamma)
        with torch.no_grad():
            next_q = self.critic_target(torch.cat([next_x, self.actor_target(next_x)], dim=1)).squeeze(1)
            target = rew + discount * alive * next_q
            if self.target_clip is not None:
                target = target.clamp(*self.target_clip)
        return target

    def _gradient_step(self, batch_size: int) -> dict[str, float]:
        batch = self._feed.sample(batch_size)
        x = self.encoder(batch.obs)
        a = torch.as_tensor(self.scaler.to_unit(batch.act), device=self.device)
        target = self.td_target(batch)
        q = self.critic(torch.cat([x, a], dim=1)).squeeze(1)
        losses = (q - target).pow(2)
        if batch.weights is not None:
            critic_loss = (torch.as_tensor(np.asarray(batch.weights, np.float32), device=self.device) * losses).mean()
        else:
            critic_loss = losses.mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        who, update = type(self).__name__, self.updates + 1
        checked_step(self.critic_optimizer, self.critic.parameters(), critic_loss, self.max_grad_norm, who, update,
                     "critic loss")

        mu = self.actor(x)
        actor_loss = -self.critic(torch.cat([x, mu], dim=1)).mean()
        if self.action_l2 > 0:
            actor_loss = actor_loss + self.action_l2 * mu.pow(2).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        checked_step(self.actor_optimizer, self.actor.parameters(), actor_loss, self.max_grad_norm, who, update,
                     "actor loss")
        self.updates += 1
        self._update_targets()
        td = (target - q).detach()
        self._feed.update_priorities(batch, td.cpu().numpy())
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(),
                "q_mean": q.detach().mean().item(), "td_abs": td.abs().mean().item()}

    def _update_targets(self) -> None:
        with torch.no_grad():
            for target, source in ((self.actor_target, self.actor), (self.critic_target, self.critic)):
                for t, s in zip(target.parameters(), source.parameters()):
                    t.lerp_(s, self.tau)

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        new, self._new_transitions = self._new_transitions, 0
        return run_update_schedule(self, batch_size, self._gradient_step, new=new, extra=self._noise_metrics)

    def _noise_metrics(self) -> dict[str, float]:
        sigma = getattr(self.noise.process, "current_sigma", None)
        return {} if sigma is None else {"noise_sigma": float(sigma)}

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        return {"new_transitions": np.asarray(self._new_transitions, np.int64), **self.noise.state_dict()}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new_transitions = int(np.asarray(state.get("new_transitions", 0)))
        self.noise.load_state_dict(state)

    def __repr__(self) -> str:
        return (f"DDPG(obs_dim={self.encoder.dim}, action_dim={self.scaler.dim}, her={self._feed.her}, "
                f"prioritized={self.prioritized}, agent_steps={self.agent_steps}, updates={self.updates})")


def _flatten(seq: nn.Sequential) -> nn.Sequential:
    """``Sequential(Sequential(Linear, act, ..., Linear), Tanh)`` -> one flat Sequential.

    Keeps state_dict keys ``actor.0.weight, actor.2.weight, ...`` (Linear layers at even indices),
    the layout the TF backend mirrors.
    """
    layers: list[nn.Module] = []
    for m in seq:
        layers.extend(m if isinstance(m, nn.Sequential) else [m])
    return nn.Sequential(*layers)
