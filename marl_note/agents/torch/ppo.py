"""Proximal policy optimisation (clipped objective, GAE) with masked categorical or Gaussian actions.

No act-time extras are stored: collection never changes the network, so at the start of
``update()`` one batched forward pass over the stored (obs, act) gives exactly the behaviour
policy's log-probabilities and the value estimates GAE needs.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl_note.agents.checks import check_mask, check_transitions
from marl_note.agents.configs import (
    apply_ppo_config,
    apply_ppo_priority_config,
    ppo_action_output,
)
from marl_note.agents.policies import masked_argmax, masked_softmax, sample_categorical
from marl_note.agents.torch.common import TorchAgent, checked_step, mlp
from marl_note.agents.torch.compiling import maybe_compile
from marl_note.types import Transitions


class ActorCritic(nn.Module):
    """Policy head (logits or Gaussian mean) and value head over separate or shared MLP trunks.

    Example:
        >>> import torch
        >>> net = ActorCritic(3, 2, (8,), "tanh", shared=True, continuous=False, log_std_init=0.0,
        ...                   generator=torch.Generator().manual_seed(0))
        >>> [t.shape for t in net(torch.zeros(5, 3))]
        [torch.Size([5, 2]), torch.Size([5])]
    """

    def __init__(self, in_dim: int, out_dim: int, hidden_sizes, activation: str, shared: bool,
                 continuous: bool, log_std_init: float, generator: torch.Generator):
        super().__init__()
        last = int(hidden_sizes[-1]) if len(hidden_sizes) else in_dim
        self.shared = shared
        if shared:
            self.trunk = mlp(in_dim, hidden_sizes, None, activation, generator, init="orthogonal")
            self.pi = mlp(last, (), out_dim, activation, generator, init="orthogonal", out_gain=0.01)
            self.v = mlp(last, (), 1, activation, generator, init="orthogonal", out_gain=1.0)
        else:
            self.pi = mlp(in_dim, hidden_sizes, out_dim, activation, generator, init="orthogonal", out_gain=0.01)
            self.v = mlp(in_dim, hidden_sizes, 1, activation, generator, init="orthogonal", out_gain=1.0)
        self.log_std = nn.Parameter(torch.full((out_dim,), float(log_std_init))) if continuous else None

    def policy_out(self, x: torch.Tensor) -> torch.Tensor:
        return self.pi(self.trunk(x) if self.shared else x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.shared:
            h = self.trunk(x)
            return self.pi(h), self.v(h).squeeze(-1)
        return self.pi(x), self.v(x).squeeze(-1)


class PPO(TorchAgent):
    """PPO with a clipped surrogate, GAE(lambda), advantage normalisation and gradient clipping.

    Discrete actions use a masked categorical (illegal logits are ``-inf``; exploring samples,
    ``explore=False`` takes the best legal logit). Box actions use a diagonal Gaussian with a
    state-independent log-std; ``act`` returns the raw sample (the caller clips to the bounds).
    ``update(batch_size)`` does nothing until ``n_steps`` transitions are stored, then runs
    ``n_epochs`` passes of minibatches of ``batch_size`` over all of them and clears the rollout.
    ``compile=True`` runs the minibatch loss through ``torch.compile`` (eager, with a warning,
    where that fails).

    ``PR=True`` draws each epoch's minibatches (as many as a plain epoch has) with replacement
    from a :class:`~marl_note.replay.PrioritizedReplayBuffer` over the rollout instead of a
    permutation: priorities ``lambda_ * |return - V(s)| + (1 - lambda_) * |ratio - 1|`` are fed
    back after every minibatch, items start at ``lambda_ * initial_TD + (1 - lambda_) *
    initial_ratio``, ``alpha`` is the prioritization exponent and the importance weights'
    ``beta`` anneals linearly to 1 over 100k gradient steps; both loss terms are weighted.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), n_steps=4, n_epochs=2, seed=0)
        >>> a = agent.act(np.zeros((4, 3)), explore=True)
        >>> agent.observe(Transitions(obs=np.zeros((4, 3)), act=a, rew=np.ones(4), next_obs=np.zeros((4, 3)),
        ...     terminated=np.array([0, 0, 0, 1], bool), truncated=np.zeros(4, bool), stream=np.zeros(4, int)))
        >>> agent.update(batch_size=2)["gradient_steps"]
        4
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "tanh", shared: bool = False,
                 lr: float = 3e-4, gamma: float = 0.99, gae_lambda: float = 0.95, clip_range: float = 0.2,
                 ent_coef: float = 0.0, vf_coef: float = 0.5, n_epochs: int = 10, n_steps: int = 2048,
                 max_grad_norm: float | None = 0.5, normalize_advantage: bool = True,
                 target_kl: float | None = None, log_std_init: float = 0.0,
                 seed: int | None = None, device: str | torch.device = "cpu", compile: bool = False,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 lambda_: float = 0.5, initial_ratio: float = 1.0):
        continuous, out_dim = ppo_action_output(action_space)
        self.continuous = continuous
        super().__init__(observation_space, action_space, seed, device)
        apply_ppo_config(self, observation_space, action_space, continuous, out_dim, gamma=gamma,
                         gae_lambda=gae_lambda, clip_range=clip_range, ent_coef=ent_coef, vf_coef=vf_coef,
                         n_epochs=n_epochs, n_steps=n_steps, max_grad_norm=max_grad_norm,
                         normalize_advantage=normalize_advantage, target_kl=target_kl)
        self.net = ActorCritic(self.encoder.dim, out_dim, tuple(hidden_sizes), activation, shared,
                               self.continuous, log_std_init, self.generator).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=lr, eps=1e-5)
        self._nets = {"net": self.net}
        self._optims = {"optimizer": self.optimizer}
        self.compile = bool(compile)
        self._loss_fn = maybe_compile(self._minibatch_loss, self.compile, "PPO loss")
        apply_ppo_priority_config(self, PR=PR, alpha=alpha, beta=beta, initial_TD=initial_TD, lambda_=lambda_,
                                  initial_ratio=initial_ratio)

    # -- acting ------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        x = self.encoder(obs)
        with torch.inference_mode():
            out = self.net.policy_out(x).cpu().numpy().astype(np.float64)
        if self.continuous:
            if explore:
                std = np.exp(self.net.log_std.detach().cpu().numpy().astype(np.float64))
                out = out + std * self.rng.standard_normal(out.shape)
            return out.reshape(len(out), *self.action_space.shape).astype(self.action_space.dtype)
        mask = check_mask(mask, len(out), self.out_dim)
        a = sample_categorical(masked_softmax(out, mask), self.rng) if explore else masked_argmax(out, mask)
        return a + self.action_start

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        check_transitions(transitions, self.encoder)
        self.rollout.add(transitions)
        self.agent_steps += len(transitions)

    # -- distribution --------------------------------------------------------------------------------
    def _act_tensor(self, act: np.ndarray) -> torch.Tensor:
        act = np.asarray(act)
        if self.continuous:
            return torch.as_tensor(act.reshape(len(act), -1), dtype=torch.float32, device=self.device)
        return torch.as_tensor(act.astype(np.int64) - self.action_start, device=self.device)

    def evaluate(self, x: torch.Tensor, act: torch.Tensor, mask: torch.Tensor | None):
        """Log-probabilities of ``act``, entropies and values for encoded observations ``x``."""
        out, values = self.net(x)
        if self.continuous:
            log_std = self.net.log_std.expand_as(out)
            z = (act - out) / log_std.exp()
            logp = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
            return logp, entropy, values
        if mask is not None:
            out = out.masked_fill(~mask, -torch.inf)
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(1, act[:, None]).squeeze(1)
        safe = logp_all if mask is None else torch.where(mask, logp_all, torch.zeros_like(logp_all))
        entropy = -(logp_all.exp() * safe).sum(-1)
        return logp, entropy, values

    def log_prob(self, obs: np.ndarray, act: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Log-probabilities of ``act`` under the current policy (numpy in, numpy out)."""
        x = self.encoder(obs)
        m = None if mask is None else torch.as_tensor(check_mask(mask, len(x), self.out_dim), device=self.device)
        with torch.inference_mode():
            return self.evaluate(x, self._act_tensor(act), m)[0].cpu().numpy()

    # -- learning ----------------------------------------------------------------------------------
    def _minibatch_loss(self, x, act, mask, old_logp, adv, ret):
        logp, entropy, v = self.evaluate(x, act, mask)
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1.0 - self.clip_range, 1.0 + self.clip_range)
        policy_loss = -torch.min(ratio * adv, clipped * adv).mean()
        value_loss = nn.functional.mse_loss(v, ret)
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy.mean()
        return loss, policy_loss, value_loss, entropy, ratio, log_ratio

    def update(self, batch_size: int) -> dict[str, Any]:
        """Train on the stored rollout once it holds ``n_steps`` transitions, then clear it."""
        if len(self.rollout) < self.n_steps:
            return {"gradient_steps": 0}
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        from marl_note.replay import compute_gae
        data = self.rollout.get()
        n = len(data)
        x = self.encoder(data.obs)
        act = self._act_tensor(data.act)
        mask = None
        if data.mask is not None and not self.continuous:
            mask = torch.as_tensor(np.asarray(data.mask, bool), device=self.device)
        with torch.no_grad():
            old_logp, _, values = self.evaluate(x, act, mask)
            next_values = self.net(self.encoder(data.next_obs, "next_obs"))[1]
        adv, ret = compute_gae(data.rew, values.cpu().numpy(), next_values.cpu().numpy(), data.terminated,
                               data.truncated, data.stream, self.gamma, self.gae_lambda)
        adv = torch.as_tensor(adv, device=self.device)
        ret = torch.as_tensor(ret, device=self.device)

        sums = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clip_fraction": 0.0}
        steps = 0
        per = self._prioritized_rollout(data) if self.PR else None
        for _ in range(self.n_epochs):
            epoch_kl = []
            for idx, w in self._minibatches(n, batch_size, per):
                a = adv[idx]
                if self.normalize_advantage and len(idx) > 1:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                if w is None:
                    loss, policy_loss, value_loss, entropy, ratio, log_ratio = self._loss_fn(
                        x[idx], act[idx], None if mask is None else mask[idx], old_logp[idx], a, ret[idx])
                else:
                    loss, policy_loss, value_loss, entropy, ratio, log_ratio, v = self._weighted_loss(
                        x[idx], act[idx], None if mask is None else mask[idx], old_logp[idx], a, ret[idx], w)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                checked_step(self.optimizer, self.net.parameters(), loss, self.max_grad_norm, type(self).__name__,
                             self.updates + 1)
                self.updates += 1
                steps += 1
                if per is not None:
                    per.update_priorities(idx.cpu().numpy(), (ret[idx] - v).detach().cpu().numpy(),
                                          ratios=ratio.detach().cpu().numpy(), lambda_=self.lambda_)
                with torch.no_grad():
                    kl = ((ratio - 1) - log_ratio).mean().item()
                    sums["clip_fraction"] += ((ratio - 1).abs() > self.clip_range).float().mean().item()
                epoch_kl.append(kl)
                sums["policy_loss"] += policy_loss.item()
                sums["value_loss"] += value_loss.item()
                sums["entropy"] += entropy.mean().item()
                sums["approx_kl"] += kl
            if self.target_kl is not None and np.mean(epoch_kl) > 1.5 * self.target_kl:
                break
        self.rollout.clear()
        var = ret.var().item()
        metrics: dict[str, Any] = {k: v / steps for k, v in sums.items()}
        metrics["explained_variance"] = float("nan") if var == 0 else 1.0 - (ret - values).var().item() / var
        if per is not None:
            metrics["per_ess"] = per.effective_sample_size()
            metrics["per_beta"] = per.beta
        metrics["gradient_steps"] = steps
        return metrics

    # -- prioritized minibatches (PR=True) --------------------------------------------------------
    def _prioritized_rollout(self, data: Transitions):
        """A prioritized buffer holding this rollout in order (storage index == row)."""
        from marl_note.replay import PrioritizedReplayBuffer
        beta = self.beta + (1.0 - self.beta) * min(1.0, self.updates / 100_000)
        initial = self.lambda_ * self.initial_TD + (1.0 - self.lambda_) * self.initial_ratio
        per = PrioritizedReplayBuffer(len(data), self.observation_space, self.action_space, alpha=self.alpha,
                                      beta=beta, beta_final=beta, beta_annealing_steps=0, initial_TD=initial,
                                      seed=int(self.rng.integers(0, 2**63 - 1)))
        per.add(data)
        return per

    def _minibatches(self, n: int, batch_size: int, per):
        """``(indices, importance weights or None)`` for one epoch."""
        if per is None:
            perm = torch.as_tensor(self.rng.permutation(n), device=self.device)
            for start in range(0, n, batch_size):
                yield perm[start:start + batch_size], None
            return
        for _ in range(-(-n // batch_size)):
            b = per.sample(batch_size)
            yield (torch.as_tensor(b.indices, device=self.device),
                   torch.as_tensor(b.weights, device=self.device))

    def _weighted_loss(self, x, act, mask, old_logp, adv, ret, w):
        """The minibatch loss with per-item importance weights ``w`` (also returns the values)."""
        logp, entropy, v = self.evaluate(x, act, mask)
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1.0 - self.clip_range, 1.0 + self.clip_range)
        policy_loss = -(w * torch.min(ratio * adv, clipped * adv)).mean()
        value_loss = (w * (v - ret).pow(2)).mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy.mean()
        return loss, policy_loss, value_loss, entropy, ratio, log_ratio, v

    def __repr__(self) -> str:
        kind = "gaussian" if self.continuous else "categorical"
        return (f"PPO(obs_dim={self.encoder.dim}, {kind}[{self.out_dim}], agent_steps={self.agent_steps}, "
                f"updates={self.updates})")
