"""PPO in PyTorch: the actor-critic built from numpy weights and one clipped-objective step.

Everything else (acting, rollout, GAE, minibatches, priorities, epochs) is
:class:`marl_note.agents.ppo.PPOCore`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.ppo import PPOConfig, PPOCore
from marl_note.agents.torch.common import maybe_compile
from marl_note.agents.torch.networks import ACTIVATION_MODULES, TorchNetworks, conv_from_numpy, sequential_from_numpy

__all__ = ["PPO", "PPONetworks", "ActorCritic"]


class ActorCritic(nn.Module):
    """Policy head (logits or Gaussian mean) and value head over separate or shared MLP trunks.

    Holds ``log_std`` (Box actions), ``trunk`` (shared), ``pi`` and ``v`` from the arrays
    ``net.<name>...`` of ``weights``.

    Example:
        >>> import numpy as np, torch
        >>> from marl_note.agents.networks import mlp_weights
        >>> rng = np.random.default_rng(0)
        >>> w = {**mlp_weights("net.pi", 3, (8,), 2, rng), **mlp_weights("net.v", 3, (8,), 1, rng)}
        >>> [t.shape for t in ActorCritic(w, "tanh")(torch.zeros(5, 3))]
        [torch.Size([5, 2]), torch.Size([5])]
    """

    def __init__(self, weights: Mapping[str, np.ndarray], activation: str, shared: bool = False, conv=None):
        super().__init__()
        log_std = weights.get("net.log_std")
        self.log_std = None if log_std is None else nn.Parameter(torch.tensor(np.asarray(log_std, np.float32)))
        self.conv = conv_from_numpy("net.conv", weights, conv, activation) if conv else None  # images: one torso
        self.shared = shared
        if shared:  # Linear -> act -> ... -> act (no layers: the identity)
            trunk = sequential_from_numpy("net.trunk", weights, activation) if "net.trunk.0.weight" in weights else ()
            self.trunk = nn.Sequential(*trunk, *([ACTIVATION_MODULES[activation]()] if trunk else []))
        self.pi = sequential_from_numpy("net.pi", weights, activation)
        self.v = sequential_from_numpy("net.v", weights, activation)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        h = x if self.conv is None else self.conv(x)
        return self.trunk(h) if self.shared else h

    def policy_out(self, x: torch.Tensor) -> torch.Tensor:
        return self.pi(self.features(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(x)
        return self.pi(h), self.v(h).squeeze(-1)


class PPONetworks(TorchNetworks):
    """The actor-critic ``net`` and its Adam ``optimizer``; numpy in, numpy out.

    Example:
        >>> import numpy as np
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
        self.cfg, self.continuous = cfg, continuous
        self.net = ActorCritic(weights, cfg.activation, cfg.shared,
                               cfg.conv_layers if cfg.torso == "conv" else None).to(self.device)
        self.modules["net"] = self.net
        self.adam("optimizer", ["net"], lr=cfg.lr, eps=1e-5)
        self._loss = maybe_compile(self._losses, self.compile, "PPO loss")

    def _inputs(self, x, act, mask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (self.tensor(x), self.tensor(act, torch.float32 if self.continuous else torch.int64),
                self.tensor(mask, torch.bool))

    def _evaluate(self, x: torch.Tensor, act: torch.Tensor, mask: torch.Tensor):
        """Log-probabilities of ``act``, entropies and values (``mask``: bool ``[B, n]``, unused for Box)."""
        out, values = self.net(x)
        if self.net.log_std is not None:  # a Gaussian policy
            log_std = self.net.log_std.expand_as(out)
            z = (act - out) / log_std.exp()
            logp = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            return logp, (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1), values
        logp_all = torch.log_softmax(out.masked_fill(~mask, -torch.inf), dim=-1)
        legal = torch.where(mask, logp_all, torch.zeros_like(logp_all))  # 0 * -inf would be nan
        return logp_all.gather(1, act[:, None]).squeeze(1), -(logp_all.exp() * legal).sum(-1), values

    @torch.inference_mode()
    def policy(self, x: np.ndarray) -> np.ndarray:
        """Logits (Discrete) or Gaussian means (Box), ``[B, n]``."""
        return self.net.policy_out(self.tensor(x)).cpu().numpy()

    def log_std(self) -> np.ndarray:
        assert self.net.log_std is not None, "a categorical policy has no log-std"
        return self.net.log_std.detach().cpu().numpy()

    @torch.inference_mode()
    def values(self, x: np.ndarray) -> np.ndarray:
        return self.net(self.tensor(x))[1].cpu().numpy()

    @torch.inference_mode()
    def evaluate(self, x: np.ndarray, act: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(log-probabilities of act, values)``."""
        logp, _, values = self._evaluate(*self._inputs(x, act, mask))
        return logp.cpu().numpy(), values.cpu().numpy()

    def _losses(self, x, act, mask, old_logp, adv, ret, w):
        logp, entropy, v = self._evaluate(x, act, mask)
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1.0 - self.cfg.clip_range, 1.0 + self.cfg.clip_range)
        policy_loss = -(w * torch.min(ratio * adv, clipped * adv)).mean()
        value_loss = (w * (v - ret).pow(2)).mean()
        entropy = entropy.mean()
        loss = policy_loss + self.cfg.vf_coef * value_loss - self.cfg.ent_coef * entropy
        return loss, torch.stack([policy_loss, value_loss, entropy]), log_ratio, ret - v

    def grad_sq_norm(self, x, act, mask, old_logp, adv, ret, w) -> float:
        """``|G_B|^2`` of the minibatch loss over the actor-critic's parameters (float64; nothing written)."""
        loss = self._losses(*self._inputs(x, act, mask), *(self.tensor(a) for a in (old_logp, adv, ret, w)))[0]
        grads = torch.autograd.grad(loss, [p for p in self.net.parameters() if p.requires_grad])
        return float(sum(g.double().square().sum() for g in grads))

    def train_step(self, x, act, mask, old_logp, adv, ret, w, *, who: str, update: int) -> dict[str, Any]:
        """One clipped-objective step on a numpy minibatch (``w``: importance weights).

        Returns the mean policy loss, value loss and entropy, and per item ``log_ratio`` (new
        minus old log-probability) and ``td`` (return minus value) for the priorities.
        """
        loss, scalars, log_ratio, td = self._loss(*self._inputs(x, act, mask),
                                                  *(self.tensor(a) for a in (old_logp, adv, ret, w)))
        self.step("optimizer", loss, self.cfg.max_grad_norm, who, update)
        policy_loss, value_loss, entropy = scalars.detach().cpu().tolist()
        return {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                "log_ratio": log_ratio.detach().cpu().numpy(), "td": td.detach().cpu().numpy()}


class PPO(PPOCore):
    """PPO (:class:`~marl_note.agents.ppo.PPOCore`) on PyTorch.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((4, 3)), explore=True).shape, agent
        ((4, 2), PPO(obs_dim=3, gaussian[2], agent_steps=0, updates=0))
    """

    Networks = PPONetworks
