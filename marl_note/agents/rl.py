"""Write your own agent the way the original library asked: networks, ``action``, a loss, ``update_param``.

Subclass ``marl_note.agents.torch.RL`` or ``marl_note.agents.tf.RL``, build the networks and
optimiser(s) in ``__init__`` after calling ``super().__init__(observation_space, action_space,
policy=..., noise=..., buffer_size=..., learning_starts=..., update_steps=..., gamma=..., seed=...)``,
and define:

- ``action(s)``: the forward pass for acting. ``s`` is a float32 tensor ``[B, *obs_shape]``
  (Discrete observations one-hot ``[B, n]``); return Q-values or logits ``[B, n]`` for a Discrete
  action space, actions ``[B, *action_shape]`` for a Box one.
- ``__call__(s, a, next_s, r, d)``: the loss on a replay batch. ``a`` is int64 ``[B]`` (0-based)
  for Discrete actions, float32 ``[B, *action_shape]`` for Box; ``r`` and ``d`` (terminated, as
  float) are float32 ``[B]``. Return one scalar loss for ``self.optimizer``, or a list with one
  loss per optimiser when you set ``self.optimizers = [...]``. The sampled numpy batch is
  ``self.batch`` (for ``next_mask``, importance ``weights``, ...).
- ``update_param()`` (optional): called after every gradient step, e.g. to sync a target network
  with ``hard_update`` / ``soft_update``; ``self.updates`` counts the steps.

:class:`RLCore` is everything of that base class that is numpy: ``act`` (greedy: masked argmax
for Discrete, the raw output for Box; exploring: the ``policy`` from
:mod:`marl_note.agents.exploration.policies` for Discrete, the ``noise`` process from
:mod:`marl_note.agents.exploration.noise` added and clipped to the bounds for Box), ``observe`` (into a
:class:`~marl_note.replay.ReplayBuffer`), ``update(batch_size)`` (``update_steps`` gradient steps
once ``learning_starts`` transitions are stored, mean losses and policy metrics), the exploration
state in ``state_dict`` and saving. Its ``self.nets`` is the backend's adapter over the user's own
networks and optimisers (found by attribute name): it turns numpy into tensors, calls ``action``
and ``__call__``, takes the checked optimiser steps and reads and writes their numpy state.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note import validation
from marl_note.agents.checkpoints.restoring import backend_of
from marl_note.agents.core import AgentCore
from marl_note.agents.exploration.masked import masked_argmax
from marl_note.agents.exploration.noise import GaussianWhiteNoiseProcess
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.schedule import run_update_schedule
from marl_note.agents.spaces import ObsEncoder, check_mask, check_transitions
from marl_note.types import Transitions

__all__ = ["RLConfig", "RLCore", "discover", "loss_list"]

_SIGNATURES = {"action": "action(self, s)", "__call__": "__call__(self, s, a, next_s, r, d) returning the loss"}


@dataclass(frozen=True)
class RLConfig:
    """The hyperparameters the RL base class itself uses (the user's class adds its own).

    Example:
        >>> RLConfig(learning_starts=8).update_steps
        1
        >>> RLConfig(gamma=1.5)
        Traceback (most recent call last):
        ...
        ValueError: gamma must be in [0, 1] (the discount factor), got 1.5
    """

    buffer_size: int = 100_000
    learning_starts: int = 1000
    update_steps: int = 1
    gamma: float = 0.99
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        checked = {
            "buffer_size": validation.positive_int("buffer_size", self.buffer_size, "transitions the replay holds"),
            "learning_starts": validation.non_negative_int("learning_starts", self.learning_starts,
                                                           "stored transitions before the first update"),
            "update_steps": validation.non_negative_int("update_steps", self.update_steps,
                                                        "gradient steps per update() call"),
            "gamma": validation.unit_interval("gamma", self.gamma, "the discount factor"),
            "max_grad_norm": validation.optional(validation.positive_float, "max_grad_norm", self.max_grad_norm,
                                                 "the gradient norm clip"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


def discover(agent: Any, module_type: type, optimizer_type: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """The user's networks and optimisers on ``agent``: ``({attribute: module}, {name: optimizer})``.

    Optimisers are one attribute (any name) or a list ``agent.optimizers``, named ``optimizers.<i>``.

    Example:
        >>> from types import SimpleNamespace
        >>> discover(SimpleNamespace(q=1.0, target=2.0, optimizer="adam", n=3), float, str)
        ({'q': 1.0, 'target': 2.0}, {'optimizer': 'adam'})
    """
    nets = {k: v for k, v in vars(agent).items() if isinstance(v, module_type)}
    optims = {k: v for k, v in vars(agent).items() if isinstance(v, optimizer_type)}
    many = getattr(agent, "optimizers", None)
    if many is not None:
        if not isinstance(many, (list, tuple)) or not all(isinstance(o, optimizer_type) for o in many):
            raise TypeError(f"self.optimizers must be a list of {optimizer_type.__module__.split('.')[0]} optimizers")
        if optims:
            raise TypeError(f"set either self.optimizers or single optimizer attributes, not both "
                            f"(found {sorted(optims)})")
        optims = {f"optimizers.{i}": o for i, o in enumerate(many)}
    elif len(optims) > 1:
        raise TypeError(f"several optimizer attributes {sorted(optims)}: put them in a list "
                        f"self.optimizers = [...] and return one loss per optimizer")
    return nets, optims


class RLCore(AgentCore):
    """The numpy half of the RL base class; use ``marl_note.agents.torch.RL`` or ``marl_note.agents.tf.RL``.

    Keyword arguments: ``policy`` (Discrete actions; default ``EpsGreedyQPolicy(1.0, 0.05,
    n_steps_annealing=10_000)``), ``noise`` (Box actions; default Gaussian, sigma 0.1), the
    :class:`RLConfig` fields, ``seed``, and the backend's own options (``device`` for torch,
    ``tf_function`` for TF).

    Example (the same user code on either backend's ``RL``):
        >>> import numpy as np, gymnasium as gym, torch
        >>> from marl_note.agents.torch import RL
        >>> class Linear(RL):
        ...     def __init__(self, observation_space, action_space, seed=None):
        ...         super().__init__(observation_space, action_space, learning_starts=4, seed=seed)
        ...         self.q = torch.nn.Linear(self.obs_dim, self.n_actions)
        ...         self.optimizer = torch.optim.SGD(self.q.parameters(), lr=0.1)
        ...     def action(self, s):
        ...         return self.q(s)
        ...     def __call__(self, s, a, next_s, r, d):
        ...         return (self.q(s).gather(1, a[:, None]).squeeze(1) - r).pow(2).mean()
        >>> agent = Linear(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), seed=0)
        >>> isinstance(agent, RLCore), agent.cfg.learning_starts, agent
        (True, 4, Linear(nets=['q'], agent_steps=0, updates=0))
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> RLCore:
        missing = [name for name in ("action", "__call__") if getattr(cls, name) is getattr(RLCore, name)]
        if missing:
            raise TypeError(f"{cls.__name__} must define {' and '.join(_SIGNATURES[m] for m in missing)} "
                            f"to subclass marl_note.agents.{backend_of(cls)}.RL")
        return super().__new__(cls)

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, policy: Any = None,
                 noise: Any = None, buffer_size: int = 100_000, learning_starts: int = 1000, update_steps: int = 1,
                 gamma: float = 0.99, max_grad_norm: float | None = None, seed: int | None = None, **backend: Any):
        super().__init__(observation_space, action_space, seed=seed)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"RL agents support Discrete and Box action spaces, got {action_space!r}")
        self.cfg = RLConfig(buffer_size=buffer_size, learning_starts=learning_starts, update_steps=update_steps,
                            gamma=gamma, max_grad_norm=max_grad_norm)
        self._check_explorers(policy, noise)
        accepted = inspect.signature(self.Networks).parameters
        unknown = sorted(set(backend) - set(accepted))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected argument(s) {unknown}; the "
                            f"{backend_of(type(self))} RL takes {sorted(accepted)} besides {sorted(vars(self.cfg))}")
        self.gamma, self.max_grad_norm = self.cfg.gamma, self.cfg.max_grad_norm
        self.learning_starts, self.update_steps = self.cfg.learning_starts, self.cfg.update_steps
        self.encoder = ObsEncoder(observation_space)
        self.obs_dim = self.encoder.dim
        self.policy: Any = None
        self.noise: Any = None
        if isinstance(action_space, gym.spaces.Discrete):
            self.n_actions, self.action_start = int(action_space.n), int(action_space.start)
            self.policy = policy if policy is not None else EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000)
        else:
            self.noise = noise if noise is not None else GaussianWhiteNoiseProcess(
                sigma=0.1, size=action_space.shape, seed=int(self.rng.integers(0, 2**63 - 1)))
        from marl_note.replay import ReplayBuffer
        self.replay = ReplayBuffer(self.cfg.buffer_size, observation_space, action_space,
                                   seed=int(self.rng.integers(0, 2**63 - 1)))
        self.batch: Transitions | None = None
        self.nets = self.Networks(**backend)
        self.device = self.nets.device
        self._rl_initialised = True

    def _check_explorers(self, policy: Any, noise: Any) -> None:
        if policy is not None and not self.discrete:
            raise TypeError("policy= is for Discrete action spaces; use noise= for Box actions")
        if noise is not None and self.discrete:
            raise TypeError("noise= is for Box action spaces; use policy= for Discrete actions")
        if policy is not None and not callable(getattr(policy, "select", None)):
            raise TypeError(f"policy must have select(values, mask, rng), got {type(policy).__name__}")
        if noise is not None and not callable(getattr(noise, "sample", None)):
            raise TypeError(f"noise must have sample(), got {type(noise).__name__}")

    # -- to be defined by subclasses --------------------------------------------------------------
    def action(self, s: Any) -> Any:
        """Q-values / logits ``[B, n]`` (Discrete) or actions ``[B, *shape]`` (Box) for observations ``s``."""
        raise NotImplementedError

    def __call__(self, s: Any, a: Any, next_s: Any, r: Any, d: Any) -> Any:
        """The loss (or one loss per optimiser) on a replay batch."""
        raise NotImplementedError

    def update_param(self) -> None:
        """Called after each gradient step (target network sync); nothing by default."""

    # -- helpers for subclasses ------------------------------------------------------------------------
    @classmethod
    def hard_update(cls, target: Any, source: Any) -> None:
        """Copy the network ``source``'s weights into the network ``target``."""
        networks: Any = cls.Networks
        networks.blend(target, source, None)

    @classmethod
    def soft_update(cls, target: Any, source: Any, tau: float) -> None:
        """``target <- (1 - tau) * target + tau * source`` (Polyak averaging)."""
        networks: Any = cls.Networks
        networks.blend(target, source, float(tau))

    # -- construction checks ---------------------------------------------------------------------------
    def _after_init(self) -> None:
        name = type(self).__name__
        if not self.__dict__.get("_rl_initialised"):
            raise TypeError(f"{name}.__init__ must call super().__init__(observation_space, action_space, ...)")
        if not isinstance(self.__dict__.get("nets"), self.Networks):
            raise TypeError(f"{name}: self.nets is the RL base class's own attribute; give your network another name")
        self.nets.discover(self)
        if not self.nets.weight_names:
            raise TypeError(f"{name}.__init__ must build its networks as {self.nets.module_kind} attributes "
                            f"(self.q = ...)")
        self.nets.setup(self)
        if not self.nets.optimizers:
            raise TypeError(f"{name}.__init__ must create self.optimizer (or a list self.optimizers)")
        groups = getattr(self, "param_groups", None)
        if groups is not None and len(groups) != len(self.nets.optimizers):
            raise TypeError(f"{name}: self.param_groups has {len(groups)} entries for "
                            f"{len(self.nets.optimizers)} optimizers")
        self.nets.set_groups(self)

    # -- numpy in ---------------------------------------------------------------------------------------
    def obs_array(self, obs: Any, name: str = "obs") -> np.ndarray:
        """Observations as float32 ``[B, *obs_shape]`` (one-hot ``[B, n]`` for Discrete observations)."""
        arr = self.encoder.check(obs, name)
        if isinstance(self.observation_space, gym.spaces.Discrete):
            return self.encoder(arr, name)
        return np.asarray(arr, np.float32)

    def batch_arrays(self, batch: Transitions) -> tuple[np.ndarray, ...]:
        """``(s, a, next_s, r, d)`` of a replay batch as the numpy arrays ``__call__`` receives as tensors."""
        a: np.ndarray
        if self.discrete:
            a = np.asarray(batch.act, np.int64) - self.action_start
        else:
            a = np.asarray(batch.act, np.float32).reshape(len(batch), *self._box.shape)
        return (self.obs_array(batch.obs), a, self.obs_array(batch.next_obs, "next_obs"),
                np.asarray(batch.rew, np.float32), np.asarray(batch.terminated, np.float32))

    # -- acting ----------------------------------------------------------------------------------------
    def act(self, obs: Any, mask: Any = None, explore: bool = False) -> np.ndarray:
        s = self.obs_array(obs)
        return self._select(self.nets.forward(self, s), len(s), mask, explore)

    def _select(self, out: np.ndarray, batch: int, mask: Any, explore: bool) -> np.ndarray:
        """Greedy or exploring actions from the forward pass ``out`` of ``action(s)``."""
        name = type(self).__name__
        if self.discrete:
            if out.shape != (batch, self.n_actions):
                raise ValueError(f"{name}.action returned shape {out.shape}; expected ({batch}, {self.n_actions}) "
                                 f"values for {self.action_space}")
            mask = check_mask(mask, batch, self.n_actions)
            a = self.policy.select(out, mask, self.rng) if explore else masked_argmax(out, mask)
            return a + self.action_start
        space = self._box
        if out.size != batch * math.prod(space.shape):
            raise ValueError(f"{name}.action returned shape {out.shape}; expected {(batch, *space.shape)} for {space}")
        out = out.reshape(batch, *space.shape).astype(np.float64)
        if explore:
            size = tuple(self.noise.size)
            if size == (batch, *space.shape):
                out = out + self.noise.sample()
            elif size == tuple(space.shape):
                out = out + np.stack([self.noise.sample() for _ in range(batch)])
            else:
                raise ValueError(f"noise of size {size} fits neither one action {space.shape} nor the batch "
                                 f"{(batch, *space.shape)}")
            out = np.clip(out, np.where(np.isfinite(space.low), space.low, -np.inf),
                          np.where(np.isfinite(space.high), space.high, np.inf))
        return out.astype(space.dtype)

    @property
    def _box(self) -> gym.spaces.Box:
        """The action space of a continuous-action agent."""
        assert isinstance(self.action_space, gym.spaces.Box)
        return self.action_space

    # -- storing ---------------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        check_transitions(transitions, self.encoder)
        self.replay.add(transitions)
        self.agent_steps += len(transitions)
        if self.policy is not None and hasattr(self.policy, "step"):
            self.policy.step(len(transitions))

    # -- learning --------------------------------------------------------------------------------------
    def _gradient_step(self, batch_size: int) -> dict[int, float]:
        self.batch = self.replay.sample(batch_size)
        losses = self.nets.train_step(self, self.batch_arrays(self.batch))
        self.updates += 1
        self.update_param()
        return dict(enumerate(losses))

    def update(self, batch_size: int) -> dict[str, Any]:
        """``update_steps`` gradient steps (none before ``learning_starts`` transitions); mean losses."""
        return run_update_schedule(self, batch_size, self._gradient_step, extra=self._policy_metrics,
                                   summarise=_loss_metrics)

    def _policy_metrics(self) -> dict[str, float]:
        return {} if self.policy is None else {k: float(v) for k, v in self.policy.metrics().items()}

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        self.nets.discover(self)
        return super().state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.nets.discover(self)
        super().load_state_dict(state)

    def _extra_state(self) -> dict[str, np.ndarray]:
        """``policy.<key>`` / ``noise.<key>`` arrays of the exploration state."""
        state = {}
        for prefix in ("policy", "noise"):
            obj = getattr(self, prefix)
            if obj is not None and hasattr(obj, "state_dict"):
                state.update({f"{prefix}.{k}": np.asarray(v) for k, v in obj.state_dict().items()})
        return state

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        for prefix in ("policy", "noise"):
            obj = getattr(self, prefix)
            part = {k[len(prefix) + 1:]: v for k, v in state.items() if k.startswith(prefix + ".")}
            if obj is not None and part and hasattr(obj, "load_state_dict"):
                obj.load_state_dict(part)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(nets={sorted(self._nets)}, agent_steps={self.agent_steps}, "
                f"updates={self.updates})")


def loss_list(agent: Any, out: Any, n_optimizers: int) -> list:
    """What ``agent.__call__`` returned as a list with one loss per optimiser, or a ValueError."""
    losses = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(losses) != n_optimizers:
        raise ValueError(f"{type(agent).__name__}.__call__ returned {len(losses)} losses for {n_optimizers} "
                         f"optimizers; return one loss per optimizer")
    return losses


def _loss_metrics(totals: dict[int, float], steps: int) -> dict[str, Any]:
    """``loss`` (the sum over optimisers, averaged over steps) and, with several, ``loss_<i>`` each."""
    losses = list(totals.values())
    metrics: dict[str, Any] = {}
    if steps:
        metrics["loss"] = sum(losses) / steps
        if len(losses) > 1:
            metrics.update({f"loss_{i}": t / steps for i, t in enumerate(losses)})
    return metrics
