"""Deep deterministic policy gradient (DDPG) for Box actions, the numpy half shared by both backends.

:class:`DDPGConfig` holds the hyperparameters (defaults and checks written once);
:class:`DDPGCore` acts (actor output, exploration noise, scaling to the Box bounds), stores
transitions in its replay feed (prioritized, n-step, HER, augmented), runs the update schedule and
keeps the counters and noise state. The backend networks (``DDPGNetworks`` in
:mod:`marl_note.agents.torch.ddpg` and :mod:`marl_note.agents.tf.ddpg`) hold the actor, the critic,
their Polyak targets and optimisers, and take one gradient step on a :class:`DDPGBatch`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import agent_encoder, replay_space
from marl_note.agents.exploration.noise import ExplorationNoise
from marl_note.agents.options import FeedOptions, TorsoOptions, UpdateCountOptions
from marl_note.agents.schedule import NewSteps, gradient_steps, mean_metrics
from marl_note.agents.spaces import ActionScaler, check_box_action_space, check_transitions
from marl_note.agents.torsos import head_weights
from marl_note.types import Transitions
from marl_note.validation import non_negative_float, open_unit_interval, optional, positive_float, unit_interval

__all__ = ["DDPGConfig", "DDPGBatch", "DDPGCore"]


def _target_clip(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        low, high = (float(v) for v in value)
        ordered = low <= high
    except (TypeError, ValueError):
        ordered = False
    if not ordered:
        raise ValueError(f"target_clip must be a (low, high) pair with low <= high, got {value!r}")
    return low, high


@dataclass(frozen=True)
class DDPGConfig(UpdateCountOptions, FeedOptions, TorsoOptions):
    """DDPG's hyperparameters, checked once (the constructor arguments of the same names).

    The network, replay and schedule options are the groups of :mod:`marl_note.agents.options`;
    the fields below are DDPG's own, and the defaults where DDPG differs from a group's.

    Example:
        >>> DDPGConfig(hidden_sizes=[64], target_clip=(-50, 0)).hidden_sizes
        (64,)
        >>> DDPGConfig(tau=0.0)
        Traceback (most recent call last):
        ...
        ValueError: tau must be in (0, 1] (the rate at which the target networks follow), got 0.0
    """

    hidden_sizes: tuple[int, ...] = (256, 256)
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    gamma: float = 0.98
    tau: float = 0.05
    action_l2: float = 0.0
    target_clip: tuple[float, float] | None = None
    max_grad_norm: float | None = None
    noise: Any = None

    def _check(self) -> None:
        checked = dict(
            actor_lr=positive_float("actor_lr", self.actor_lr),
            critic_lr=positive_float("critic_lr", self.critic_lr),
            gamma=unit_interval("gamma", self.gamma, "the discount"),
            tau=open_unit_interval("tau", self.tau, "the rate at which the target networks follow"),
            action_l2=non_negative_float("action_l2", self.action_l2),
            target_clip=_target_clip(self.target_clip),
            max_grad_norm=optional(positive_float, "max_grad_norm", self.max_grad_norm))
        for name, value in checked.items():
            self._put(name, value)


class DDPGBatch(NamedTuple):
    """One gradient step's inputs as float32 arrays: what the backend networks train on."""

    obs: np.ndarray  # [B, obs_dim] encoded observations ([B, H, W, C] images for a conv torso)
    act: np.ndarray  # [B, action_dim] actions rescaled to [-1, 1]
    next_obs: np.ndarray  # like obs
    rew: np.ndarray  # [B]
    alive: np.ndarray  # [B] 1 - terminated
    discount: np.ndarray  # [B] gamma, or gamma**k for n-step transitions
    weights: np.ndarray  # [B] importance weights (ones without prioritized replay)


class DDPGCore(AgentCore):
    """DDPG: a deterministic tanh actor, a Q critic, Polyak-averaged target copies of both, replay.

    The actor outputs ``tanh`` values in [-1, 1] per action dimension, scaled affinely to the Box
    bounds (which must be finite); the critic sees the observation and the action rescaled to
    [-1, 1]. Exploring adds ``noise`` in those unit coordinates (default: Gaussian with
    ``sigma=0.1``, i.e. 10 % of the half range; any process from :mod:`marl_note.agents.exploration.noise`
    works, see :class:`~marl_note.agents.exploration.noise.ExplorationNoise`) and clips to the bounds.
    The critic regresses on ``r + discount * (1 - terminated) * Q'(s', mu'(s'))`` (``discount`` =
    ``transitions.discount`` for n-step, else ``gamma``; optionally clipped to ``target_clip``);
    the actor ascends ``Q(s, mu(s))`` minus ``action_l2 * mean(mu(s)**2)``. Both targets follow
    with rate ``tau`` after every gradient step. The update schedule is DQN's: ``update_steps``
    gradient steps per ``update()`` call, or ``max(1, round(replay_ratio * new transitions))``
    when that is None, and none until ``learning_starts`` transitions are stored.

    Replay options (shared with DQN and SAC, see :class:`~marl_note.agents.options.FeedOptions`):
    ``prioritized=True, alpha, beta, initial_td`` for prioritized replay
    (``|TD|`` is fed back after each step), ``num_steps=n`` for n-step returns, and for goal envs
    (Dict observations with ``observation``/``achieved_goal``/``desired_goal``)
    ``her=dict(strategy="future", k=4), compute_reward=env.compute_reward`` or
    ``replay=HERReplayBuffer(...)``. Goal observations are flattened to
    ``[observation, desired_goal]``; ``act`` takes the dict of batched arrays. ``augment=fn`` also
    stores ``fn(transitions)`` (e.g. mirrored states and actions) next to every stored batch.
    ``compile=True`` runs the losses through ``torch.compile`` (PyTorch) or the step under XLA
    (TensorFlow). ``self.cfg`` is the checked :class:`DDPGConfig`.
    Observations go through :class:`~marl_note.agents.encoders.ObsEncoder` as DQN's and PPO's do
    (Dict/Tuple flattened; ``torso="auto" | "mlp" | "conv"`` and ``conv_layers``): with a conv
    torso, images go through the actor's own ``actor.conv`` and the critic's own ``critic.conv``,
    and the critic joins the action after its torso (see :mod:`marl_note.agents.torsos`).
    Acting goes through a numpy copy of the actor (:class:`~marl_note.agents.numpy_policy.NumpyPolicy`,
    refreshed after every weight change, equal to the framework's output to float32 rounding);
    ``numpy_acting=False`` acts through the framework instead (and a conv actor acts in PyTorch
    itself, as DQN's and PPO's do).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import DDPG
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

    config_class = DDPGConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, config: DDPGConfig | None = None,
                 seed: int | None = None, device: Any = "cpu", compile: bool = False, numpy_acting: bool = True,
                 **overrides: Any):
        super().__init__(observation_space, action_space, seed=seed, device=device, compile=compile)
        box = check_box_action_space(action_space, "DDPG")
        cfg = self._resolve_config(config, overrides)
        # Dict/Tuple flattened, images to a conv torso, goal dicts as HER reads them
        self.encoder = agent_encoder(observation_space, cfg.torso, cfg.conv_layers)
        self.cfg = cfg = replace(cfg, torso=self.encoder.torso, conv_layers=self.encoder.conv_layers or None)
        self.scaler = ActionScaler(box, "DDPG")
        self._feed = cfg.replay_feed(replay_space(observation_space, self.encoder), action_space, cfg.gamma,
                                     seed=int(self.rng.integers(0, 2**63 - 1)))
        self.replay = self._feed.replay
        self.noise = ExplorationNoise(cfg.noise, (self.scaler.dim,), sigma=0.1,
                                      seed=int(self.rng.integers(0, 2**63 - 1)))
        self._new = NewSteps(cfg.update_count)  # what replay_ratio multiplies

        act_dim = self.scaler.dim
        weights = {**head_weights("actor", self.encoder, cfg.hidden_sizes, act_dim, self.init_rng),
                   **head_weights("critic", self.encoder, cfg.hidden_sizes, 1, self.init_rng, extra_in=act_dim)}
        weights.update({k.replace(".", "_target.", 1): v.copy() for k, v in weights.items()})
        self.nets = self.Networks(weights, cfg, device=self.device, compile=self.compile)
        self._publish_numpy(numpy_acting, {"actor": ("mlp", "actor")}, cfg.activation, conv=cfg.conv_layers)

    @property
    def prioritized(self) -> bool:
        return self._feed.prioritized

    # -- acting ------------------------------------------------------------------------------------
    def unit_actions(self, obs: Any) -> np.ndarray:
        """Deterministic actor outputs in [-1, 1], ``[B, action_dim]`` float32 (through the numpy copy
        of the actor unless ``numpy_acting=False``)."""
        x = self.encoder(self._feed.observation(obs))
        policy = self.numpy_policy()
        return self.nets.actions(x) if policy is None else np.tanh(policy.forward("actor", x))

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        """Actions within the Box bounds, ``[B, *action_shape]``; ``mask`` is ignored (Box actions)."""
        unit = self.unit_actions(obs).astype(np.float64)
        if explore:
            unit = self.noise(unit)
        return self.scaler.to_env(unit)

    def q_values(self, obs: Any, act: np.ndarray) -> np.ndarray:
        """Online critic values ``[B]`` for env-scale actions."""
        return self.nets.q_values(self.encoder(self._feed.observation(obs)), self.scaler.to_unit(act))

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        transitions = self.encoder.flat_transitions(transitions)  # nested observations: stored flat
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        act = np.asarray(flat.act)
        if act.shape[1:] != self.scaler.shape:
            raise ValueError(f"transitions.act has shape {act.shape}, expected (batch, *{self.scaler.shape})")
        self._feed.add(transitions, flat)
        n = len(transitions)
        self.agent_steps += n
        self._new.observed(n)
        self.noise.episodes_ended(transitions.stream, transitions.done)

    def observe_env_steps(self, env_steps: int) -> None:
        """The trainer reports the env steps this agent acted in since its last batch (see ``update_count``)."""
        self._new.env_stepped(env_steps)

    # -- learning ----------------------------------------------------------------------------------
    def _batch(self, batch: Transitions) -> DDPGBatch:
        n = len(batch)
        return DDPGBatch(
            obs=self.encoder(batch.obs), act=self.scaler.to_unit(batch.act),
            next_obs=self.encoder(batch.next_obs, "next_obs"), rew=np.asarray(batch.rew, np.float32),
            alive=(~np.asarray(batch.terminated, bool)).astype(np.float32),
            discount=(np.full(n, self.cfg.gamma, np.float32) if batch.discount is None
                      else np.asarray(batch.discount, np.float32)),
            weights=np.ones(n, np.float32) if batch.weights is None else np.asarray(batch.weights, np.float32))

    def td_target(self, batch: Transitions) -> np.ndarray:
        """``r + discount * (1 - terminated) * Q_target(s', mu_target(s'))``, clipped to ``target_clip``."""
        return self.nets.td_target(self._batch(batch))

    def _config_knobs(self) -> tuple[str, ...]:
        return ("tau", "gamma")

    def _gradient_inputs(self, batch: Transitions) -> DDPGBatch:
        return self._batch(batch)  # the critic's TD loss of learn()

    def learn(self, batch: Transitions) -> dict[str, float]:
        """One gradient step (critic, actor, then both targets) on an explicit batch; its metrics."""
        metrics, td = self.nets.train_step(self._batch(batch), type(self).__name__, self.updates + 1)
        self.updates += 1
        self._feed.update_priorities(batch, td)
        return {**metrics, "td_abs": float(np.abs(td).mean())}

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        new = self._new.take()
        cfg = self.cfg
        steps = gradient_steps(len(self.replay), new, cfg.learning_starts, cfg.update_steps, cfg.replay_ratio)
        if not steps:
            return {"gradient_steps": 0}
        metrics: dict[str, Any] = mean_metrics(lambda: self.learn(self._feed.sample(int(batch_size))), steps)
        sigma = getattr(self.noise.process, "current_sigma", None)
        if sigma is not None:
            metrics["noise_sigma"] = float(sigma)
        return metrics

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        return {"new_transitions": np.asarray(self._new.transitions, np.int64), **self.noise.state_dict()}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new.transitions = int(np.asarray(state.get("new_transitions", 0)))
        self.noise.load_state_dict(state)

    def __repr__(self) -> str:
        return (f"DDPG(obs_dim={self.encoder.dim}, action_dim={self.scaler.dim}, her={self._feed.her}, "
                f"prioritized={self.prioritized}, agent_steps={self.agent_steps}, updates={self.updates})")
