"""Write your own PyTorch agent on :class:`RL`: networks, ``action``, a loss, ``update_param``.

The contract (what ``action``, ``__call__`` and ``update_param`` receive and return) and everything
numpy (acting, replay, the update schedule, saving) are :mod:`marl_note.compat.rl`'s. Here: the
networks are the ``nn.Module`` attributes and the optimisers the ``torch.optim`` attribute (or the
list ``self.optimizers``), found by name, so ``state_dict()`` keys read ``q.0.weight``,
``optimizer.0.exp_avg``, ... ``RL(..., device="cuda")`` puts the batches on that device.

Several optimisers: set ``self.optimizers = [opt_a, opt_b]`` and return ``[loss_a, loss_b]``. The
gradients of every loss are taken on the same forward pass, loss ``i`` only with respect to the
parameters of optimiser ``i`` (or of ``self.param_groups[i]``, a module or a list of parameters,
when you set it), and then all optimisers step. So an actor loss that goes through the critic
does not move the critic.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.torch.common import check_finite_update, grad_norm
from marl_note.agents.torch.networks import TorchNetworks
from marl_note.compat.rl import RLCore
from marl_note.compat.rl_config import discover, loss_list
from marl_note.compat.workflow import Workflow

__all__ = ["RL", "RLNetworks"]


class RLNetworks(TorchNetworks):
    """The user's modules and optimisers (attributes of the agent) behind the numpy seam.

    ``modules`` / ``optimizers`` are re-read from the agent's attributes whenever state is read or
    written, so ``state_dict()`` holds ``<attribute>.<parameter>`` and ``<optimizer>.<i>.<slot>``.
    """

    module_kind = "nn.Module"

    def __init__(self, device: Any = "cpu"):
        super().__init__(device)

    def discover(self, agent: RLCore) -> None:
        self.modules, self.optimizers = discover(agent, nn.Module, torch.optim.Optimizer)

    def setup(self, agent: RLCore) -> None:
        """Nothing to build: PyTorch modules have their parameters from the start."""

    def set_groups(self, agent: RLCore) -> None:
        """Nothing to fix: each optimiser knows its parameters (``param_groups`` is read at every step)."""

    @staticmethod
    @torch.no_grad()
    def blend(target: nn.Module, source: nn.Module, tau: float | None) -> None:
        """Copy ``source`` into ``target`` (``tau=None``, buffers included) or move it ``tau`` of the way."""
        if tau is None:
            target.load_state_dict(source.state_dict())
        else:
            for t, s in zip(target.parameters(), source.parameters()):
                t.lerp_(s, tau)

    def tensor(self, x: Any, dtype: Any = None) -> torch.Tensor:
        """A numpy array on the device, keeping its dtype unless ``dtype`` is given."""
        out = torch.as_tensor(np.asarray(x), device=self.device)
        return out if dtype is None else out.to(dtype)

    def forward(self, agent: RLCore, s: np.ndarray) -> Any:
        """``agent.action(s)`` as numpy (a tuple of arrays where it returns a tuple or list)."""
        with torch.no_grad():
            return _numpy(agent.action(self.tensor(s)))

    def call(self, fn: Any, arrays: tuple[np.ndarray, ...]) -> Any:
        """``fn`` of the batch's tensors, without gradients, as numpy (e.g. ``td_error``)."""
        with torch.no_grad():
            return _numpy(fn(*(self.tensor(x) for x in arrays)))

    def _param_lists(self, agent: RLCore) -> list[list[torch.Tensor]]:
        groups = getattr(agent, "param_groups", None)
        if groups is None:
            return [self.optimized_params(name) for name in self.optimizers]
        return [list(g.parameters()) if isinstance(g, nn.Module) else list(g) for g in groups]

    def train_step(self, agent: RLCore, arrays: tuple[np.ndarray, ...]) -> list[float]:
        """One gradient step of the user's loss(es) on the numpy batch; the losses as floats."""
        who, update = type(agent).__name__, agent.updates + 1
        losses = loss_list(agent, agent(*(self.tensor(x) for x in arrays)), len(self.optimizers))
        for i, loss in enumerate(losses):
            if not torch.is_tensor(loss) or loss.numel() != 1:
                raise ValueError(f"loss {i} must be a scalar tensor, got {type(loss).__name__} "
                                 f"{tuple(loss.shape) if torch.is_tensor(loss) else ''}")
        if len(losses) == 1 and getattr(agent, "param_groups", None) is None:
            self.step(next(iter(self.optimizers)), losses[0], agent.max_grad_norm, who, update)
            return [losses[0].item()]
        groups = self._param_lists(agent)
        grads = [torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
                 for loss, params in zip(losses, groups)]
        for params, gs in zip(groups, grads):
            for p, g in zip(params, gs):
                p.grad = g
        if self.grad_hook is not None:  # averaged over ranks before the checks, as in step()
            self.grad_hook(list({id(p): p for params in groups for p in params}.values()))
        checks = {}  # every loss and gradient norm is checked before any optimiser writes a weight
        for i, (loss, params) in enumerate(zip(losses, groups)):
            name = "loss" if len(losses) == 1 else f"loss {i}"
            checks[name], checks[f"{name} gradient norm"] = loss, grad_norm(params, agent.max_grad_norm)
        check_finite_update(who, update, checks)
        for name in self.optimizers:
            self.optimizer(name).step()
        return [loss.item() for loss in losses]


def _numpy(out: Any) -> Any:
    if isinstance(out, (tuple, list)):
        return tuple(_numpy(o) for o in out)
    return out.detach().cpu().numpy() if torch.is_tensor(out) else np.asarray(out)


class RL(Workflow, RLCore):
    """Base class for user-defined PyTorch agents: define the networks, ``action``, ``__call__``.

    Example (a complete DQN):
        >>> import copy, gymnasium as gym, numpy as np, torch
        >>> from torch import nn
        >>> class MyDQN(RL):
        ...     def __init__(self, observation_space, action_space, lr=1e-3, seed=None):
        ...         super().__init__(observation_space, action_space, learning_starts=8, seed=seed)
        ...         self.q = nn.Sequential(nn.Linear(self.obs_dim, 32), nn.ReLU(), nn.Linear(32, action_space.n))
        ...         self.target = copy.deepcopy(self.q)
        ...         self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        ...     def action(self, s):
        ...         return self.q(s)
        ...     def __call__(self, s, a, next_s, r, d):
        ...         with torch.no_grad():
        ...             y = r + self.gamma * (1 - d) * self.target(next_s).max(1).values
        ...         return nn.functional.mse_loss(self.q(s).gather(1, a[:, None]).squeeze(1), y)
        ...     def update_param(self):
        ...         if self.updates % 100 == 0:
        ...             self.hard_update(self.target, self.q)
        >>> agent = MyDQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
        >>> agent.act(np.zeros((3, 4)), mask=np.array([[1, 0], [0, 1], [1, 1]], bool)).shape
        (3,)
        >>> from marl_note.types import Transitions
        >>> agent.observe(Transitions(obs=np.zeros((8, 4)), act=np.zeros(8, int), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 4)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"], sorted(agent._nets)
        (1, ['q', 'target'])
    """

    Networks = RLNetworks

    def __init__(self, observation_space: Any, action_space: Any, *args: Any, seed: int | None = None,
                 **kwargs: Any):
        if seed is not None:  # the modules the subclass builds next start from the seed (as SB3 seeds torch)
            torch.manual_seed(seed)
        super().__init__(observation_space, action_space, *args, seed=seed, **kwargs)

    def obs_tensor(self, obs: Any, name: str = "obs") -> torch.Tensor:
        """Observations as float32 ``[B, *obs_shape]`` (one-hot ``[B, n]`` for Discrete observations)."""
        return self.nets.tensor(self.obs_array(obs, name))
