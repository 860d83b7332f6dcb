"""Write your own agent the way the original library asked: networks, ``action``, a loss, ``update_param``.

Subclass ``marl_note.compat.torch.RL`` or ``marl_note.compat.tf.RL``, build the networks and
optimiser(s) in ``__init__`` after calling ``super().__init__(observation_space, action_space,
policy=..., noise=..., buffer_size=..., learning_starts=..., update_steps=..., gamma=..., seed=...)``,
and define:

- ``action(s)``: the forward pass for acting. ``s`` is a float32 tensor ``[B, *obs_shape]``
  (Discrete observations one-hot ``[B, n]``; Dict and Tuple observations, nested at any depth,
  one flat vector ``[B, self.obs_dim]`` in the order of ``gymnasium.spaces.flatten``, Discrete
  parts one-hot: ``s``, ``next_s`` and replay all hold that vector); return Q-values or logits ``[B, n]`` for a Discrete
  action space, actions ``[B, *action_shape]`` for a Box one.
- ``__call__(s, a, next_s, r, d)``: the loss on a replay batch. ``a`` is int64 ``[B]`` (0-based)
  for Discrete actions, float32 ``[B, *action_shape]`` for Box; ``r`` and ``d`` (terminated, as
  float) are float32 ``[B]``. Return one scalar loss for ``self.optimizer``, or a list with one
  loss per optimiser when you set ``self.optimizers = [...]``. The sampled numpy batch is
  ``self.batch`` (for ``next_mask``, importance ``weights``, ...).
- ``update_param()`` (optional): called after every gradient step (or every
  ``update_param_steps`` agent steps / ``update_param_batches`` gradient steps), e.g. to sync a
  target network with ``hard_update`` / ``soft_update``; ``self.updates`` counts the steps.
- ``td_error(s, a, next_s, r, d)`` (with ``prioritized=True``): ``|TD|`` per batch item, the new
  priorities; called without gradients after each gradient step on the same batch.

The original library's options (see :class:`~marl_note.compat.rl_config.RLConfig`): ``num_steps``
(n-step rows, ``self.batch.discount``), ``prioritized`` (the original ``PR``: prioritized replay,
``self.batch.weights``),
``TRL`` (the loss gets ordered step triplets of one episode: every argument gains a pair axis,
``s`` ``[B, 2, ...]`` holding ``(s_i, s_k)``, ``next_s`` ``(s_k, s_j)``; see
:class:`~marl_note.compat.triplet.TripletReplayBuffer`) and ``IRL`` (``action(s)`` returns
``(output, aux)``: acting uses ``output``, ``self.aux`` holds the last acting batch's ``aux`` as
numpy, and the loss gets ``aux`` for its batch by calling ``self.action(s)``).

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

import dataclasses
import inspect
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.checkpoints.restoring import backend_of
from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import replay_space
from marl_note.agents.exploration.masked import masked_argmax
from marl_note.agents.exploration.noise import GaussianWhiteNoiseProcess
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.options import RENAMED
from marl_note.agents.schedule import run_update_schedule
from marl_note.agents.spaces import ObsEncoder, check_mask, check_transitions
from marl_note.compat.rl_config import REPLAY_FIELDS, RLConfig, discover, loss_list, loss_metrics
from marl_note.compat.triplet import TripletReplayBuffer
from marl_note.replay.feed import ReplayFeed, is_goal_space
from marl_note.types import Transitions

__all__ = ["RLConfig", "RLCore", "discover", "loss_list"]

_SIGNATURES = {"action": "action(self, s)", "__call__": "__call__(self, s, a, next_s, r, d) returning the loss"}
_KEEP: Any = object()  # "leave unchanged" for RLCore.reconfigure


class RLCore(AgentCore):
    """The numpy half of the RL base class; use ``marl_note.compat.torch.RL`` or ``marl_note.compat.tf.RL``.

    Keyword arguments: ``policy`` (Discrete actions; default ``EpsGreedyQPolicy(1.0, 0.05,
    n_steps_annealing=10_000)``), ``noise`` (Box actions; default Gaussian, sigma 0.1), the
    :class:`RLConfig` fields, ``seed``, and the backend's own options (``device`` for torch,
    ``tf_function`` for TF).

    Example (the same user code on either backend's ``RL``):
        >>> import numpy as np, gymnasium as gym, torch
        >>> from marl_note.compat.torch import RL
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
                            f"to subclass marl_note.compat.{backend_of(cls)}.RL")
        return super().__new__(cls)

    config_class = RLConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, config: RLConfig | None = None,
                 policy: Any = None, noise: Any = None, seed: int | None = None, **options: Any):
        super().__init__(observation_space, action_space, seed=seed)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"RL agents support Discrete and Box action spaces, got {action_space!r}")
        fields = set(RLConfig.field_names())
        named = fields | {old for old, new in RENAMED.items() if new in fields}  # the deprecated names too
        backend = {k: v for k, v in options.items() if k not in named}  # the backend's options (device, ...)
        cfg = self._resolve_config(config, {k: v for k, v in options.items() if k in named})
        self._check_explorers(policy, noise)
        self._check_td_error(cfg)
        accepted = inspect.signature(self.Networks).parameters
        unknown = sorted(set(backend) - set(accepted))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected argument(s) {unknown}; the "
                            f"{backend_of(type(self))} RL takes {sorted(accepted)} besides {sorted(vars(cfg))}")
        self._set_config(cfg)
        self.encoder = ObsEncoder(observation_space, "mlp")  # the user's networks read flat or raw arrays
        self.obs_dim = self.encoder.dim
        self._flat_obs = self.encoder.nested and not is_goal_space(observation_space)
        self._store_space = replay_space(observation_space, self.encoder)
        self.policy: Any = None
        self.noise: Any = None
        if isinstance(action_space, gym.spaces.Discrete):
            self.n_actions, self.action_start = int(action_space.n), int(action_space.start)
            self.policy = policy if policy is not None else EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000)
        else:
            self.noise = noise if noise is not None else GaussianWhiteNoiseProcess(
                sigma=0.1, size=action_space.shape, seed=int(self.rng.integers(0, 2**63 - 1)))
        self._build_replay()
        self.batch: Transitions | None = None
        self.aux: Any = None  # with IRL: the auxiliary output of the last acting batch
        self._param_block = 0  # with update_param_steps: agent_steps // update_param_steps at the last call
        self.nets = self.Networks(**backend)
        self.device = self.nets.device
        self._rl_initialised = True

    def _set_config(self, cfg: RLConfig) -> None:
        self.cfg = cfg
        self.gamma, self.max_grad_norm = cfg.gamma, cfg.max_grad_norm
        self.learning_starts, self.update_steps = cfg.learning_starts, cfg.update_steps

    def _build_replay(self) -> None:
        """``self.replay`` (and ``self._feed`` in front of it, None for TRL) from ``self.cfg``."""
        cfg, seed = self.cfg, int(self.rng.integers(0, 2**63 - 1))
        if cfg.TRL:
            self._feed: ReplayFeed | None = None
            self.replay: Any = TripletReplayBuffer(cfg.buffer_size, self._store_space, self.action_space,
                                                   seed=seed)
        else:
            self._feed = cfg.replay_feed(self._store_space, self.action_space, cfg.gamma, seed)
            self.replay = self._feed.replay

    def _check_explorers(self, policy: Any, noise: Any) -> None:
        if policy is not None and not self.discrete:
            raise TypeError("policy= is for Discrete action spaces; use noise= for Box actions")
        if noise is not None and self.discrete:
            raise TypeError("noise= is for Box action spaces; use policy= for Discrete actions")
        if policy is not None and not callable(getattr(policy, "select", None)):
            raise TypeError(f"policy must have select(values, mask, rng), got {type(policy).__name__}")
        if noise is not None and not callable(getattr(noise, "sample", None)):
            raise TypeError(f"noise must have sample(), got {type(noise).__name__}")

    def _check_td_error(self, cfg: RLConfig) -> None:
        if cfg.prioritized and type(self).td_error is RLCore.td_error:
            raise TypeError(f"prioritized=True: {type(self).__name__} must define td_error(self, s, a, next_s, r, d) "
                            f"returning |TD| per batch item (the new priorities)")

    def reconfigure(self, policy: Any = _KEEP, noise: Any = _KEEP, **changes: Any) -> None:
        """Change the base class's options in place (what ``set()`` does on an RL subclass).

        ``changes`` are :class:`RLConfig` fields. Everything is checked before anything changes; a
        change of a replay option rebuilds the replay buffer, which must still be empty.
        """
        cfg = dataclasses.replace(self.cfg, **changes)
        self._check_explorers(None if policy is _KEEP else policy, None if noise is _KEEP else noise)
        self._check_td_error(cfg)
        rebuild = any(getattr(cfg, f) != getattr(self.cfg, f) for f in REPLAY_FIELDS)
        held = len(self.replay) + int(getattr(self.replay, "num_pending", 0))
        if rebuild and held:
            raise ValueError(f"changing the replay options of {type(self).__name__} would discard the {held} "
                             f"transitions its replay buffer holds; change them before training")
        self._set_config(cfg)
        if rebuild:
            self._build_replay()
        if policy is not _KEEP and policy is not None:
            self.policy = policy
        if noise is not _KEEP and noise is not None:
            self.noise = noise
        self._param_block = self.agent_steps // cfg.update_param_steps if cfg.update_param_steps else 0

    # -- to be defined by subclasses --------------------------------------------------------------
    def action(self, s: Any) -> Any:
        """Q-values / logits ``[B, n]`` (Discrete) or actions ``[B, *shape]`` (Box) for observations ``s``."""
        raise NotImplementedError

    def __call__(self, s: Any, a: Any, next_s: Any, r: Any, d: Any) -> Any:
        """The loss (or one loss per optimiser) on a replay batch."""
        raise NotImplementedError

    def update_param(self) -> None:
        """Called after each gradient step (target network sync); nothing by default."""

    def td_error(self, s: Any, a: Any, next_s: Any, r: Any, d: Any) -> Any:
        """``|TD|`` per batch item, the priorities of prioritized replay (``prioritized=True``); define it to use it."""
        raise NotImplementedError

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
        """Observations as float32 ``[B, *obs_shape]`` (one-hot ``[B, n]`` for Discrete observations, the
        flat ``[B, obs_dim]`` vector of the encoder for Dict/Tuple ones)."""
        arr = self.encoder.check(obs, name)
        if isinstance(self.observation_space, gym.spaces.Discrete):
            return self.encoder(arr, name)
        return np.asarray(arr, np.float32)

    def batch_arrays(self, batch: Transitions) -> tuple[np.ndarray, ...]:
        """``(s, a, next_s, r, d)`` of a replay batch as the numpy arrays ``__call__`` receives as tensors.

        With ``TRL`` every array has a pair axis after the batch axis (see the module docstring).
        """
        lead = (len(batch), 2) if self.cfg.TRL else (len(batch),)
        n = math.prod(lead)

        def obs(x: Any, name: str) -> np.ndarray:
            arr = self.obs_array(np.asarray(x).reshape(n, *np.shape(x)[len(lead):]), name)
            return arr.reshape(*lead, *arr.shape[1:])

        a: np.ndarray
        if self.discrete:
            a = np.asarray(batch.act, np.int64).reshape(lead) - self.action_start
        else:
            a = np.asarray(batch.act, np.float32).reshape(*lead, *self._box.shape)
        return (obs(batch.obs, "obs"), a, obs(batch.next_obs, "next_obs"),
                np.asarray(batch.rew, np.float32).reshape(lead), np.asarray(batch.terminated, np.float32).reshape(lead))

    # -- acting ----------------------------------------------------------------------------------------
    def act(self, obs: Any, mask: Any = None, explore: bool = False) -> np.ndarray:
        s = self.obs_array(obs)
        out = self.nets.forward(self, s)
        name = type(self).__name__
        if self.cfg.IRL:
            if not isinstance(out, tuple) or len(out) != 2:
                raise ValueError(f"{name} has IRL=True: action(s) must return (output, aux), got "
                                 f"{type(out).__name__}")
            out, self.aux = out
        elif isinstance(out, tuple):
            raise ValueError(f"{name}.action returned a tuple of {len(out)}; return one output, or (output, aux) "
                             f"with IRL=True (set(IRL=True)) when the second entry is an auxiliary output")
        return self._select(np.asarray(out), len(s), mask, explore)

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
        if self._flat_obs and isinstance(transitions, Transitions):
            transitions = self.encoder.flat_transitions(transitions)
        check_transitions(transitions, self.encoder)
        (self.replay if self._feed is None else self._feed).add(transitions)
        self.agent_steps += len(transitions)
        if self.policy is not None and hasattr(self.policy, "step"):
            self.policy.step(len(transitions))

    # -- learning --------------------------------------------------------------------------------------
    def _gradient_step(self, batch_size: int) -> dict[int, float]:
        self.batch = batch = self.replay.sample(batch_size)
        arrays = self.batch_arrays(batch)
        losses = self.nets.train_step(self, arrays)
        self.updates += 1
        if self._feed is not None and self._feed.prioritized:
            td = np.asarray(self.nets.call(self.td_error, arrays), np.float64)
            if td.shape != (len(batch),) or not np.all(np.isfinite(td)):
                raise ValueError(f"{type(self).__name__}.td_error must return {len(batch)} finite numbers (one "
                                 f"per batch item), got shape {td.shape}")
            self._feed.update_priorities(batch, td)
        every = self.cfg.update_param_batches
        if self.cfg.update_param_steps is None and (every is None or self.updates % every == 0):
            self.update_param()
        return dict(enumerate(losses))

    def update(self, batch_size: int) -> dict[str, Any]:
        """``update_steps`` gradient steps (none before ``learning_starts`` transitions); mean losses."""
        metrics = run_update_schedule(self, batch_size, self._gradient_step, extra=self._policy_metrics,
                                      summarise=loss_metrics)
        period = self.cfg.update_param_steps
        if period is not None and metrics["gradient_steps"] and self.agent_steps // period > self._param_block:
            self._param_block = self.agent_steps // period
            self.update_param()
        return metrics

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
        """``policy.<key>`` / ``noise.<key>`` arrays of the exploration state (and the update_param clock)."""
        state = {}
        if self.cfg.update_param_steps is not None:
            state["update_param_block"] = np.asarray(self._param_block, np.int64)
        for prefix in ("policy", "noise"):
            obj = getattr(self, prefix)
            if obj is not None and hasattr(obj, "state_dict"):
                state.update({f"{prefix}.{k}": np.asarray(v) for k, v in obj.state_dict().items()})
        return state

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        if self.cfg.update_param_steps is not None:
            self._param_block = int(np.asarray(state.get("update_param_block", 0)))
        for prefix in ("policy", "noise"):
            obj = getattr(self, prefix)
            part = {k[len(prefix) + 1:]: v for k, v in state.items() if k.startswith(prefix + ".")}
            if obj is not None and part and hasattr(obj, "load_state_dict"):
                obj.load_state_dict(part)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(nets={sorted(self._nets)}, agent_steps={self.agent_steps}, "
                f"updates={self.updates})")

