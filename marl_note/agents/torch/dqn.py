"""Deep Q-learning (double DQN by default) with masked actions, in PyTorch.

Read top to bottom: acting (``act``), storing (``observe``), the TD target (``td_target``), one
gradient step (``_gradient_step``) and the update schedule (``update``).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl_note.agents.checks import check_mask, check_transitions
from marl_note.agents.configs import DQNSharedMethods, apply_dqn_config
from marl_note.agents.policies import masked_argmax
from marl_note.agents.replay_options import network_space
from marl_note.agents.torch.common import TorchAgent, checked_step, mlp
from marl_note.agents.torch.compiling import maybe_compile
from marl_note.types import Transitions


class DQN(DQNSharedMethods, TorchAgent):
    """DQN over a Discrete action space: MLP Q-network, target network, replay, masked actions.

    Exploration uses any policy from :mod:`marl_note.agents.policies` (default: epsilon-greedy
    annealed from 1.0 to 0.05 over 10k agent steps); greedy actions are the best legal action.
    The TD target ``r + discount * (1 - terminated) * Q_target(s', a*)`` takes ``a*`` among the
    actions legal at ``s'`` (``next_mask``), chosen by the online network when ``double=True``;
    ``discount`` is ``transitions.discount`` when present (n-step), else ``gamma``. Truncation
    still bootstraps. Each ``update()`` call does ``update_steps`` gradient steps, or
    ``max(1, round(replay_ratio * new transitions since the last call))`` when that is None,
    and none until ``learning_starts`` transitions are stored. With ``tau`` set the target
    network follows by Polyak averaging after every step; otherwise it is copied every
    ``target_update`` steps. A ``replay`` with prioritized sampling (batches carrying
    ``weights``) gets importance-weighted losses and ``update_priorities`` calls.
    ``compile=True`` runs the loss (forward and backward) through ``torch.compile``, falling back
    to eager mode with a warning where that fails.

    Replay options (shared with DDPG, see :class:`~marl_note.agents.replay_options.ReplayFeed`):
    ``PR=True, alpha, beta, initial_TD`` builds a prioritized buffer (``|TD|`` fed back after each
    gradient step); ``num_steps=n`` stores n-step transitions (their ``discount`` is ``gamma**k``);
    for goal envs (Dict observations with ``observation``/``achieved_goal``/``desired_goal``)
    ``her=dict(strategy="future", k=4), compute_reward=env.compute_reward`` (or
    ``replay=HERReplayBuffer(...)``) relabels goals, and ``act`` takes the dict of batched arrays.
    ``augment=fn`` also stores ``fn(transitions)`` (a batch or a list of batches: e.g. mirrored
    boards with mirrored actions and masks) next to every stored batch; ``agent_steps`` and the
    ``replay_ratio`` schedule still count only the real transitions.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), learning_starts=8, seed=0)
        >>> agent.act(np.zeros((2, 4)), mask=np.array([[0, 1, 0], [1, 0, 0]], bool)).tolist()
        [1, 0]
        >>> agent.observe(Transitions(obs=np.zeros((8, 4)), act=np.zeros(8, int), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 4)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"]
        2
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: tuple[int, ...] = (128, 128), activation: str = "relu",
                 lr: float = 1e-3, gamma: float = 0.99, buffer_size: int = 100_000,
                 learning_starts: int = 1000, double: bool = True, target_update: int = 100,
                 tau: float | None = None, criterion: str = "huber", max_grad_norm: float | None = 10.0,
                 replay_ratio: float = 0.25, update_steps: int | None = None, policy=None, replay=None,
                 seed: int | None = None, device: str | torch.device = "cpu", compile: bool = False,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 num_steps: int = 1, her=None, compute_reward=None, augment=None):
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"DQN needs a Discrete action space, got {action_space!r}; "
                            f"use a continuous-control agent for Box actions")
        super().__init__(network_space(observation_space), action_space, seed, device)
        self.observation_space = observation_space  # a goal env's Dict space; the networks see the flat one
        apply_dqn_config(self, observation_space, action_space, gamma=gamma, buffer_size=buffer_size,
                         learning_starts=learning_starts, double=double, target_update=target_update, tau=tau,
                         criterion=criterion, max_grad_norm=max_grad_norm, replay_ratio=replay_ratio,
                         update_steps=update_steps, policy=policy, replay=replay, PR=PR, alpha=alpha, beta=beta,
                         initial_TD=initial_TD, num_steps=num_steps, her=her, compute_reward=compute_reward,
                         augment=augment)

        self.q_net = mlp(self.encoder.dim, hidden_sizes, self.n_actions, activation, self.generator).to(self.device)
        self.target_net = mlp(self.encoder.dim, hidden_sizes, self.n_actions, activation,
                              self.generator).to(self.device)
        self.target_net.load_state_dict(self.q_net.state_dict())
        self.target_net.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_net.parameters(), lr=lr)
        self._nets = {"q_net": self.q_net, "target_net": self.target_net}
        self._optims = {"optimizer": self.optimizer}
        self._new_transitions = 0
        self.compile = bool(compile)
        self._loss_fn = maybe_compile(self._loss, self.compile, "DQN loss")

    # -- acting ------------------------------------------------------------------------------------
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Online Q-values ``[B, n]`` as float32 numpy."""
        x = self.encoder(self._feed.observation(obs))
        with torch.inference_mode():
            return self.q_net(x).cpu().numpy()

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        q = self.q_values(obs)
        mask = check_mask(mask, len(q), self.n_actions)
        a = self.policy.select(q, mask, self.rng) if explore else masked_argmax(q, mask)
        return a + self.action_start

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        self._feed.add(transitions, flat)  # n-step accumulation / HER episode storage happen here
        n = len(transitions)
        self.agent_steps += n
        self._new_transitions += n
        if hasattr(self.policy, "step"):
            self.policy.step(n)

    # -- learning ----------------------------------------------------------------------------------
    def td_target(self, batch: Transitions) -> torch.Tensor:
        """``r + discount * (1 - terminated) * Q_target(s', a*)`` with ``a*`` legal at ``s'``.

        Rows whose ``next_mask`` has no legal action do not bootstrap.
        """
        next_obs = self.encoder(batch.next_obs, "next_obs")
        rew = torch.as_tensor(np.asarray(batch.rew, np.float32), device=self.device)
        alive = torch.as_tensor(~np.asarray(batch.terminated, bool), device=self.device)
        if batch.discount is not None:
            discount = torch.as_tensor(np.asarray(batch.discount, np.float32), device=self.device)
        else:
            discount = torch.full_like(rew, self.gamma)
        with torch.no_grad():
            q_target = self.target_net(next_obs)
            chooser = self.q_net(next_obs) if self.double else q_target
            if batch.next_mask is not None:
                legal = torch.as_tensor(check_mask(batch.next_mask, len(rew), self.n_actions, "next_mask"),
                                        device=self.device)
                chooser = chooser.masked_fill(~legal, -torch.inf)
                alive = alive & legal.any(dim=1)
            best = chooser.argmax(dim=1, keepdim=True)
            next_v = q_target.gather(1, best).squeeze(1)
            return rew + discount * alive.to(rew.dtype) * next_v

    def _loss(self, obs: torch.Tensor, act: torch.Tensor, target: torch.Tensor,
              weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q_net(obs).gather(1, act[:, None]).squeeze(1)
        if self.criterion == "huber":
            losses = nn.functional.smooth_l1_loss(q, target, reduction="none")
        else:
            losses = nn.functional.mse_loss(q, target, reduction="none")
        return ((weights * losses).mean() if weights is not None else losses.mean()), q

    def _gradient_step(self, batch_size: int) -> dict[str, float]:
        batch = self.replay.sample(batch_size)
        obs = self.encoder(batch.obs)
        act = torch.as_tensor(np.asarray(batch.act, np.int64) - self.action_start, device=self.device)
        target = self.td_target(batch)
        weights = (None if batch.weights is None
                   else torch.as_tensor(np.asarray(batch.weights, np.float32), device=self.device))
        loss, q = self._loss_fn(obs, act, target, weights)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        checked_step(self.optimizer, self.q_net.parameters(), loss, self.max_grad_norm, type(self).__name__,
                     self.updates + 1)
        self.updates += 1
        self._update_target()
        td = (target - q).detach()
        if batch.weights is not None and hasattr(self.replay, "update_priorities"):
            self.replay.update_priorities(batch.indices, td.abs().cpu().numpy())
        return {"loss": loss.item(), "q_mean": q.detach().mean().item(), "td_abs": td.abs().mean().item()}

    def _update_target(self) -> None:
        with torch.no_grad():
            if self.tau is not None:
                for t, s in zip(self.target_net.parameters(), self.q_net.parameters()):
                    t.lerp_(s, self.tau)
            elif self.updates % self.target_update == 0:
                self.target_net.load_state_dict(self.q_net.state_dict())
