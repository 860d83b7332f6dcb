"""Write your own agent the way the original library asked: networks, ``action``, a loss, ``update_param``.

Subclass :class:`RL`, build the networks and optimiser(s) in ``__init__`` after calling
``super().__init__(observation_space, action_space, policy=..., noise=..., buffer_size=...,
learning_starts=..., update_steps=..., gamma=..., seed=...)``, and define:

- ``action(s)``: the forward pass for acting. ``s`` is a float32 tensor ``[B, *obs_shape]``
  (Discrete observations one-hot ``[B, n]``); return Q-values or logits ``[B, n]`` for a Discrete
  action space, actions ``[B, *action_shape]`` for a Box one.
- ``__call__(s, a, next_s, r, d)``: the loss on a replay batch. ``a`` is int64 ``[B]`` (0-based)
  for Discrete actions, float32 ``[B, *action_shape]`` for Box; ``r`` and ``d`` (terminated, as
  float) are float32 ``[B]``. Return one scalar loss for ``self.optimizer``, or a list with one
  loss per optimiser when you set ``self.optimizers = [...]`` (see below). The sampled numpy batch
  is ``self.batch`` (for ``next_mask``, importance ``weights``, ...).
- ``update_param()`` (optional): called after every gradient step, e.g. to sync a target network
  with :meth:`RL.hard_update` / :meth:`RL.soft_update`; ``self.updates`` counts the steps.

The base class supplies ``act`` (greedy: masked argmax for Discrete, the raw output for Box;
exploring: the ``policy`` from :mod:`marl_note.agents.policies` for Discrete, the ``noise``
process from :mod:`marl_note.agents.noise` added and clipped to the bounds for Box), ``observe``
(into a :class:`~marl_note.replay.ReplayBuffer`), ``update(batch_size)`` (``update_steps``
gradient steps once ``learning_starts`` transitions are stored) and saving (``save`` /
``restore`` / ``save_param`` / ``restore_param``). Networks (``nn.Module`` attributes) and
optimisers are found by attribute name, so ``state_dict()`` keys read ``q.0.weight``,
``optimizer.0.exp_avg``, ...

Several optimisers: set ``self.optimizers = [opt_a, opt_b]`` and return ``[loss_a, loss_b]``. The
gradients of every loss are taken on the same forward pass, loss ``i`` only with respect to the
parameters of optimiser ``i`` (or of ``self.param_groups[i]``, a module or a list of parameters,
when you set it), and then all optimisers step. So an actor loss that goes through the critic
does not move the critic.
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl_note.agents.checks import check_transitions
from marl_note.agents.noise import GaussianWhiteNoiseProcess
from marl_note.agents.policies import EpsGreedyQPolicy
from marl_note.agents.rl_common import explorer_state, load_explorer_state, run_updates, select_actions
from marl_note.agents.torch.common import TorchAgent, check_finite_update, grad_norm
from marl_note.types import Transitions

__all__ = ["RL"]


class RL(TorchAgent):
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

    def __new__(cls, *args, **kwargs):
        missing = [name for name in ("action", "__call__") if getattr(cls, name) is getattr(RL, name)]
        if missing:
            raise TypeError(f"{cls.__name__} must define {' and '.join(_SIGNATURES[m] for m in missing)} "
                            f"to subclass marl_note.agents.torch.RL")
        return super().__new__(cls)

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, policy=None, noise=None,
                 buffer_size: int = 100_000, learning_starts: int = 1000, update_steps: int = 1,
                 gamma: float = 0.99, max_grad_norm: float | None = None, seed: int | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(observation_space, action_space, seed, device)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"RL agents support Discrete and Box action spaces, got {action_space!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if int(update_steps) < 0 or int(learning_starts) < 0 or int(buffer_size) <= 0:
            raise ValueError("update_steps and learning_starts must be non-negative, buffer_size positive")
        if policy is not None and not self.discrete:
            raise TypeError("policy= is for Discrete action spaces; use noise= for Box actions")
        if noise is not None and self.discrete:
            raise TypeError("noise= is for Box action spaces; use policy= for Discrete actions")
        if policy is not None and not callable(getattr(policy, "select", None)):
            raise TypeError(f"policy must have select(values, mask, rng), got {type(policy).__name__}")
        if noise is not None and not callable(getattr(noise, "sample", None)):
            raise TypeError(f"noise must have sample(), got {type(noise).__name__}")
        self.gamma = float(gamma)
        self.learning_starts = int(learning_starts)
        self.update_steps = int(update_steps)
        self.max_grad_norm = max_grad_norm
        self.obs_dim = self.encoder.dim
        self.policy = self.noise = None
        if self.discrete:
            self.n_actions, self.action_start = int(action_space.n), int(action_space.start)
            self.policy = policy if policy is not None else EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000)
        else:
            self.noise = noise if noise is not None else GaussianWhiteNoiseProcess(
                sigma=0.1, size=action_space.shape, seed=int(self.rng.integers(0, 2**63 - 1)))
        from marl_note.replay import ReplayBuffer
        self.replay = ReplayBuffer(int(buffer_size), observation_space, action_space,
                                   seed=int(self.rng.integers(0, 2**63 - 1)))
        self.batch: Transitions | None = None
        self._rl_initialised = True

    # -- to be defined by subclasses --------------------------------------------------------------
    def action(self, s: torch.Tensor) -> torch.Tensor:
        """Q-values / logits ``[B, n]`` (Discrete) or actions ``[B, *shape]`` (Box) for observations ``s``."""
        raise NotImplementedError

    def __call__(self, s, a, next_s, r, d):
        """The loss (or one loss per optimiser) on a replay batch."""
        raise NotImplementedError

    def update_param(self) -> None:
        """Called after each gradient step (target network sync); nothing by default."""

    # -- helpers for subclasses ------------------------------------------------------------------------
    @staticmethod
    def hard_update(target: nn.Module, source: nn.Module) -> None:
        """Copy ``source``'s weights into ``target``."""
        target.load_state_dict(source.state_dict())

    @staticmethod
    def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
        """``target <- (1 - tau) * target + tau * source`` (Polyak averaging)."""
        with torch.no_grad():
            for t, s in zip(target.parameters(), source.parameters()):
                t.lerp_(s, float(tau))

    # -- construction checks ---------------------------------------------------------------------------
    def _after_init(self) -> None:
        name = type(self).__name__
        if not self.__dict__.get("_rl_initialised"):
            raise TypeError(f"{name}.__init__ must call super().__init__(observation_space, action_space, ...)")
        self._discover()
        if not self._nets:
            raise TypeError(f"{name}.__init__ must build its networks as nn.Module attributes (self.q = ...)")
        if not self._optims:
            raise TypeError(f"{name}.__init__ must create self.optimizer (or a list self.optimizers)")
        groups = getattr(self, "param_groups", None)
        if groups is not None and len(groups) != len(self._optims):
            raise TypeError(f"{name}: self.param_groups has {len(groups)} entries for {len(self._optims)} optimisers")

    def _discover(self) -> None:
        nets, optims = {}, {}
        for attr, value in vars(self).items():
            if isinstance(value, nn.Module):
                nets[attr] = value
            elif isinstance(value, torch.optim.Optimizer):
                optims[attr] = value
        many = getattr(self, "optimizers", None)
        if many is not None:
            if not isinstance(many, (list, tuple)) or not all(isinstance(o, torch.optim.Optimizer) for o in many):
                raise TypeError("self.optimizers must be a list of torch optimizers")
            if optims:
                raise TypeError(f"set either self.optimizers or single optimizer attributes, not both "
                                f"(found {sorted(optims)})")
            optims = {f"optimizers.{i}": o for i, o in enumerate(many)}
        elif len(optims) > 1:
            raise TypeError(f"several optimizer attributes {sorted(optims)}: put them in a list "
                            f"self.optimizers = [...] and return one loss per optimizer")
        self._nets, self._optims = nets, optims

    # -- tensors ---------------------------------------------------------------------------------------
    def obs_tensor(self, obs: Any, name: str = "obs") -> torch.Tensor:
        """Observations as float32 ``[B, *obs_shape]`` (one-hot ``[B, n]`` for Discrete observations)."""
        arr = self.encoder.check(obs, name)
        if isinstance(self.observation_space, gym.spaces.Discrete):
            return self.encoder(arr, name)
        return torch.as_tensor(np.asarray(arr, np.float32), device=self.device)

    def _batch_tensors(self, batch: Transitions):
        if self.discrete:
            a = torch.as_tensor(np.asarray(batch.act, np.int64) - self.action_start, device=self.device)
        else:
            a = torch.as_tensor(np.asarray(batch.act, np.float32).reshape(len(batch), *self.action_space.shape),
                                device=self.device)
        r = torch.as_tensor(np.asarray(batch.rew, np.float32), device=self.device)
        d = torch.as_tensor(np.asarray(batch.terminated, np.float32), device=self.device)
        return self.obs_tensor(batch.obs), a, self.obs_tensor(batch.next_obs, "next_obs"), r, d

    # -- acting ----------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        s = self.obs_tensor(obs)
        with torch.no_grad():
            out = self.action(s)
        out = out.detach().cpu().numpy() if torch.is_tensor(out) else np.asarray(out)
        return select_actions(self, out, len(s), mask, explore)

    # -- storing ---------------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        check_transitions(transitions, self.encoder)
        self.replay.add(transitions)
        self.agent_steps += len(transitions)
        if self.policy is not None and hasattr(self.policy, "step"):
            self.policy.step(len(transitions))

    # -- learning --------------------------------------------------------------------------------------
    def _param_lists(self) -> list[list[torch.Tensor]]:
        groups = getattr(self, "param_groups", None)
        if groups is None:
            return [[p for g in opt.param_groups for p in g["params"]] for opt in self._optims.values()]
        return [list(g.parameters()) if isinstance(g, nn.Module) else list(g) for g in groups]

    def _gradient_step(self, batch_size: int) -> list[float]:
        self.batch = self.replay.sample(batch_size)
        out = self(*self._batch_tensors(self.batch))
        losses = list(out) if isinstance(out, (list, tuple)) else [out]
        opts = list(self._optims.values())
        if len(losses) != len(opts):
            raise ValueError(f"{type(self).__name__}.__call__ returned {len(losses)} losses for {len(opts)} "
                             f"optimizers; return one loss per optimizer")
        for i, loss in enumerate(losses):
            if not torch.is_tensor(loss) or loss.numel() != 1:
                raise ValueError(f"loss {i} must be a scalar tensor, got {type(loss).__name__} "
                                 f"{tuple(loss.shape) if torch.is_tensor(loss) else ''}")
        groups = self._param_lists()
        if len(opts) == 1 and getattr(self, "param_groups", None) is None:
            opts[0].zero_grad(set_to_none=True)
            losses[0].backward()
        else:
            grads = [torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
                     for loss, params in zip(losses, groups)]
            for params, gs in zip(groups, grads):
                for p, g in zip(params, gs):
                    p.grad = g
        checks = {}  # every loss and gradient norm is checked before any optimiser writes a weight
        for i, (loss, params) in enumerate(zip(losses, groups)):
            name = "loss" if len(losses) == 1 else f"loss {i}"
            checks[name], checks[f"{name} gradient norm"] = loss, grad_norm(params, self.max_grad_norm)
        check_finite_update(type(self).__name__, self.updates + 1, checks)
        for opt in opts:
            opt.step()
        self.updates += 1
        self.update_param()
        return [loss.item() for loss in losses]

    def update(self, batch_size: int) -> dict[str, Any]:
        """``update_steps`` gradient steps (none before ``learning_starts`` transitions); mean losses."""
        return run_updates(self, batch_size)

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        self._discover()
        return super().state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._discover()
        super().load_state_dict(state)

    def _extra_state(self) -> dict[str, np.ndarray]:
        return explorer_state(self)

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        load_explorer_state(self, state)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(nets={sorted(self._nets)}, agent_steps={self.agent_steps}, "
                f"updates={self.updates})")


_SIGNATURES = {"action": "action(self, s)", "__call__": "__call__(self, s, a, next_s, r, d) returning the loss"}
