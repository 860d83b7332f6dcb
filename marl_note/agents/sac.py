"""Soft actor-critic (SAC) for Discrete and Box actions: the numpy half shared by both backends.

:class:`SACConfig` holds every hyperparameter (defaults and checks written once); :class:`SACCore`
acts, stores transitions, runs the update schedule and draws the Gaussian noise of each gradient
step in numpy, and hands numpy batches to its backend's ``SACNetworks`` (actor, twin critics,
their Polyak targets and the entropy temperature ``log_alpha``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

import gymnasium as gym
import numpy as np

from marl_note import validation as check
from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import agent_encoder, replay_space
from marl_note.agents.exploration.masked import masked_argmax, masked_softmax, sample_categorical, uniform_legal
from marl_note.agents.options import FeedOptions, TorsoOptions, UpdateCountOptions
from marl_note.agents.schedule import NewSteps, gradient_steps, mean_metrics
from marl_note.agents.spaces import ActionScaler, check_box_action_space, check_mask, check_transitions
from marl_note.agents.torsos import conv_of, head_weights
from marl_note.types import Transitions

__all__ = ["SACConfig", "SACCore", "LOG_STD_MIN", "LOG_STD_MAX", "MASKED_LOGIT", "TRAIN_INPUTS", "squash_log_std"]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # a Box policy's log standard deviation lives in this range
MASKED_LOGIT = -1e9  # the logit an illegal action gets: probability 0, and 0 * logit stays finite
HALF_LOG_2PI, LOG_2 = 0.5 * math.log(2.0 * math.pi), math.log(2.0)
# the arrays of one gradient step, in the order the networks take them (see SACCore.train_inputs);
# aux/next_aux: legal-action masks at obs/next_obs (Discrete) or the standard normal noise of the
# reparameterised actions sampled there (Box)
TRAIN_INPUTS = ("obs", "act", "next_obs", "rew", "alive", "discount", "weights", "aux", "next_aux", "target_entropy")


def squash_log_std(raw: np.ndarray) -> np.ndarray:
    """The actor's raw second half -> log std in [LOG_STD_MIN, LOG_STD_MAX] (smoothly, via tanh).

    Example:
        >>> squash_log_std(np.array([-50.0, 0.0, 50.0])).tolist()
        [-5.0, -1.5, 2.0]
    """
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(raw) + 1.0)


@dataclass(frozen=True)
class SACConfig(UpdateCountOptions, FeedOptions, TorsoOptions):
    """SAC's hyperparameters, checked once (see :class:`SACCore` for what each one does).

    The network, replay and schedule options are the groups of :mod:`marl_note.agents.options`;
    the fields below are SAC's own, and the defaults where SAC differs from a group's.

    Example:
        >>> SACConfig(tau=0.01).tau
        0.01
        >>> SACConfig(target_entropy_scale=1.5)
        Traceback (most recent call last):
        ...
        ValueError: target_entropy_scale must be in [0, 1] (Discrete target entropy / log(legal actions)), got 1.5
    """

    hidden_sizes: tuple[int, ...] = (256, 256)
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    init_temperature: float = 1.0
    autotune: bool = True
    target_entropy: float | None = None
    target_entropy_scale: float = 0.98
    max_grad_norm: float | None = None

    def _check(self) -> None:
        def put(name, check_fn, meaning=""):
            self._put(name, check_fn(name, getattr(self, name), meaning))

        for name in ("actor_lr", "critic_lr", "temperature_lr"):
            put(name, check.positive_float, "a learning rate")
        put("gamma", check.unit_interval, "the discount")
        put("tau", check.open_unit_interval, "the Polyak rate of the target critics")
        put("init_temperature", check.positive_float, "the entropy coefficient alpha before any update")
        if not isinstance(self.autotune, (bool, np.bool_)):
            raise TypeError(f"autotune must be True or False, got {self.autotune!r}")
        put("target_entropy", partial(check.optional, _finite))
        put("target_entropy_scale", check.unit_interval, "Discrete target entropy / log(legal actions)")
        put("max_grad_norm", partial(check.optional, check.positive_float))


def _finite(name: str, value: Any, meaning: str = "") -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


class SACCore(AgentCore):
    """Soft actor-critic: a stochastic actor, twin Q critics with Polyak targets, a tuned temperature.

    The critics regress on ``r + discount * (1 - terminated) * V(s')`` with the soft value
    ``V(s') = min(Q1', Q2')(s', a') - alpha * log pi(a'|s')`` of the target critics
    (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"); the actor minimises
    ``alpha * log pi(a|s) - min(Q1, Q2)(s, a)``; with ``autotune=True`` the temperature
    ``alpha = exp(log_alpha)`` (starting at ``init_temperature``) follows the gradient of
    ``alpha * (entropy - target_entropy)``, so the policy keeps about ``target_entropy`` nats.
    Targets move by ``tau`` after every gradient step; ``discount`` is ``transitions.discount``
    for n-step returns, else ``gamma``.

    - Box actions: a tanh-squashed Gaussian (log std squashed into [-5, 2]) with the log-prob
      correction ``-sum log(1 - tanh(u)^2)``, scaled affinely to the Box bounds (which must be
      finite); the critics see actions rescaled to [-1, 1] and entropies are those of the [-1, 1]
      actions. ``target_entropy`` defaults to ``-action_dim``.
    - Discrete actions (SAC-discrete, Christodoulou 2019, "Soft Actor-Critic for Discrete Action
      Settings"): a categorical policy; soft values and losses are exact expectations over the
      actions, so no sampling is needed. Masks give illegal actions probability 0, at ``s``
      (``mask``) and at ``s'`` (``next_mask``; a row with no legal next action does not
      bootstrap). ``target_entropy`` defaults to ``target_entropy_scale * log(k)`` per row,
      ``k`` being the number of legal actions there (0.98 of the maximum entropy, as that paper).

    Acting: ``explore=True`` samples from the policy (uniformly over legal actions / the Box
    while fewer than ``learning_starts`` transitions are stored); otherwise the greedy action
    (the most likely legal one, or ``tanh`` of the Gaussian mean). ``update(batch_size)`` runs
    ``update_steps`` gradient steps, or ``max(1, round(replay_ratio * new transitions))`` when
    that is None, and none before ``learning_starts`` transitions are stored.

    Replay options are DQN's and DDPG's (:class:`~marl_note.agents.options.FeedOptions`):
    ``prioritized=True, alpha, beta, initial_td`` (prioritized
    replay; the mean ``|TD|`` of the twin critics is fed back; ``alpha`` here is the
    prioritization exponent, the temperature is ``init_temperature``), ``num_steps=n``,
    ``her=..., compute_reward=...`` for goal envs, ``replay=<buffer>`` and ``augment=fn``.
    ``compile=True`` runs the TF step under XLA and the torch losses through ``torch.compile``.
    Observations go through :class:`~marl_note.agents.encoders.ObsEncoder` as DQN's and PPO's do
    (Dict/Tuple flattened; ``torso="auto" | "mlp" | "conv"`` and ``conv_layers``): with a conv
    torso, images go through the actor's ``actor.conv`` and each critic's own ``qf1.conv`` /
    ``qf2.conv``; a Box critic joins the action after its torso (see :mod:`marl_note.agents.torsos`).
    Acting goes through a numpy copy of the actor (:class:`~marl_note.agents.numpy_policy.NumpyPolicy`,
    refreshed after every weight change, equal to the framework's output to float32 rounding);
    ``numpy_acting=False`` acts through the framework instead (and a conv actor acts in PyTorch
    itself, as DQN's and PPO's do).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import SAC
        >>> from marl_note.types import Transitions
        >>> agent = SAC(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(0.0, 2.0, (2,)), hidden_sizes=(16,),
        ...             learning_starts=8, seed=0)
        >>> a = agent.act(np.zeros((4, 3)), explore=True)
        >>> a.shape, bool(((0 <= a) & (a <= 2)).all())
        ((4, 2), True)
        >>> agent.observe(Transitions(obs=np.zeros((8, 3)), act=np.ones((8, 2)), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 3)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"], agent.target_entropy
        (8, -2.0)
        >>> discrete = SAC(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(3), hidden_sizes=(16,), seed=0)
        >>> discrete.act(np.zeros((2, 3)), mask=np.array([[0, 1, 0], [1, 0, 0]], bool)).tolist()
        [1, 0]
    """

    config_class = SACConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, config: SACConfig | None = None,
                 seed: int | None = None, device: Any = "cpu", compile: bool = False, numpy_acting: bool = True,
                 **overrides: Any):
        cfg = self._resolve_config(config, overrides)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"SAC needs a Discrete or Box action space, got {action_space!r}")
        if not self.discrete:
            check_box_action_space(action_space, "SAC")
        super().__init__(observation_space, action_space, seed=seed, device=device, compile=compile)
        # Dict/Tuple flattened, images to a conv torso, goal dicts as HER reads them
        self.encoder = agent_encoder(observation_space, cfg.torso, cfg.conv_layers)
        self.cfg = cfg = replace(cfg, torso=self.encoder.torso, conv_layers=self.encoder.conv_layers or None)
        self._feed = cfg.replay_feed(replay_space(observation_space, self.encoder), action_space, cfg.gamma,
                                     seed=int(self.rng.integers(0, 2**63 - 1)))
        self.replay = self._feed.replay
        if isinstance(action_space, gym.spaces.Discrete):
            self.n_actions, self.action_start = int(action_space.n), int(action_space.start)
            self.action_dim, out_dim, critic_in, critic_out = 1, self.n_actions, 0, self.n_actions
            default_target = cfg.target_entropy_scale * math.log(self.n_actions)
        else:
            self.scaler = ActionScaler(cast(gym.spaces.Box, action_space), "SAC")
            self.action_dim = self.scaler.dim
            out_dim, critic_in, critic_out = 2 * self.action_dim, self.action_dim, 1
            default_target = -float(self.action_dim)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else default_target
        self._new = NewSteps(cfg.update_count)  # what replay_ratio multiplies

        weights = head_weights("actor", self.encoder, cfg.hidden_sizes, out_dim, self.init_rng)
        for q in ("qf1", "qf2"):
            w = head_weights(q, self.encoder, cfg.hidden_sizes, critic_out, self.init_rng, extra_in=critic_in)
            weights.update(w)
            weights.update({f"{q}_target{k[len(q):]}": v.copy() for k, v in w.items()})
        self.nets = self.Networks(weights, discrete=self.discrete, activation=cfg.activation,
                                  actor_lr=cfg.actor_lr, critic_lr=cfg.critic_lr, temperature_lr=cfg.temperature_lr,
                                  log_alpha=math.log(cfg.init_temperature), autotune=cfg.autotune, tau=cfg.tau,
                                  max_grad_norm=cfg.max_grad_norm, device=self.device, compile=self.compile,
                                  conv=conv_of(cfg))
        self._publish_numpy(numpy_acting, {"actor": ("mlp", "actor")}, cfg.activation, conv=cfg.conv_layers)

    @property
    def prioritized(self) -> bool:
        return self._feed.prioritized

    @property
    def temperature(self) -> float:
        """The entropy coefficient alpha = exp(log_alpha) now."""
        return float(np.exp(self.nets.log_alpha_value()))

    # -- acting ------------------------------------------------------------------------------------
    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        """Actions ``[B]`` (Discrete, legal under ``mask``) or ``[B, *shape]`` within the Box bounds."""
        x = self.encoder(self._feed.observation(obs))
        n = len(x)
        warmup = explore and len(self._feed) < self.cfg.learning_starts
        if self.discrete:
            mask = check_mask(mask, n, self.n_actions)
            if warmup:
                return uniform_legal(mask, (n, self.n_actions), self.rng) + self.action_start
            logits = self._policy_out(x)
            a = sample_categorical(masked_softmax(logits, mask), self.rng) if explore else \
                masked_argmax(logits, mask)
            return a + self.action_start
        if warmup:
            return self.scaler.to_env(self.rng.uniform(-1.0, 1.0, (n, self.action_dim)))
        out = self._policy_out(x).astype(np.float64)
        mean, raw = out[:, :self.action_dim], out[:, self.action_dim:]
        if explore:
            mean = mean + np.exp(squash_log_std(raw)) * self.rng.standard_normal(mean.shape)
        return self.scaler.to_env(np.tanh(mean))

    def policy_probs(self, obs: Any, mask: np.ndarray | None = None) -> np.ndarray:
        """The actor's softmax over the legal actions ``[B, n]`` (what ``act(explore=True)`` samples after
        warm-up); Discrete actions only."""
        if not self.discrete:
            raise TypeError("policy_probs needs a Discrete action space; this SAC has Box actions")
        x = self.encoder(self._feed.observation(obs))
        return masked_softmax(self._policy_out(x), check_mask(mask, len(x), self.n_actions))

    def _policy_out(self, x: np.ndarray) -> np.ndarray:
        """Raw actor outputs, through the numpy copy of the actor unless ``numpy_acting=False``."""
        policy = self.numpy_policy()
        return self.nets.policy(x) if policy is None else policy.forward("actor", x)

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        transitions = self.encoder.flat_transitions(transitions)  # nested observations: stored flat
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        act = np.asarray(flat.act)
        want = () if self.discrete else self.scaler.shape
        if act.shape[1:] != want:
            raise ValueError(f"transitions.act has shape {act.shape}, expected (batch, *{want}) for "
                             f"{self.action_space}")
        self._feed.add(transitions, flat)
        self.agent_steps += len(transitions)
        self._new.observed(len(transitions))

    def observe_env_steps(self, env_steps: int) -> None:
        """The trainer reports the env steps this agent acted in since its last batch (see ``update_count``)."""
        self._new.env_stepped(env_steps)

    # -- learning ----------------------------------------------------------------------------------
    def train_inputs(self, batch: Transitions, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """The numpy arrays of one gradient step on ``batch`` (draws the step's Gaussian noise from
        ``rng``, by default the agent's generator)."""
        n = len(batch)
        f32 = np.float32
        alive = ~np.asarray(batch.terminated, bool)
        inputs = {"obs": self.encoder(batch.obs), "next_obs": self.encoder(batch.next_obs, "next_obs"),
                  "rew": np.asarray(batch.rew, f32),
                  "discount": np.full(n, self.cfg.gamma, f32) if batch.discount is None
                  else np.asarray(batch.discount, f32),
                  "weights": np.ones(n, f32) if batch.weights is None else np.asarray(batch.weights, f32)}
        if self.discrete:
            every = np.ones((n, self.n_actions), bool)
            mask = check_mask(batch.mask, n, self.n_actions)
            next_mask = check_mask(batch.next_mask, n, self.n_actions, "next_mask")
            inputs["aux"] = every if mask is None else mask
            inputs["next_aux"] = every if next_mask is None else next_mask
            alive &= inputs["next_aux"].any(axis=1)
            inputs["act"] = np.asarray(batch.act, np.int64) - self.action_start
            if self.cfg.target_entropy is None:
                legal = np.maximum(inputs["aux"].sum(axis=1), 1)
                inputs["target_entropy"] = (self.cfg.target_entropy_scale * np.log(legal)).astype(f32)
            else:
                inputs["target_entropy"] = np.full(n, self.target_entropy, f32)
        else:
            inputs["act"] = self.scaler.to_unit(batch.act)
            rng = self.rng if rng is None else rng
            inputs["aux"] = rng.standard_normal((n, self.action_dim)).astype(f32)
            inputs["next_aux"] = rng.standard_normal((n, self.action_dim)).astype(f32)
            inputs["target_entropy"] = np.full(n, self.target_entropy, f32)
        inputs["alive"] = alive.astype(f32)
        return inputs

    def _config_knobs(self) -> tuple[str, ...]:
        return ("tau", "gamma")

    def _gradient_inputs(self, batch: Transitions) -> dict[str, np.ndarray]:
        # the twin critics' soft TD loss of learn(); the next actions' noise from a generator of its own
        return self.train_inputs(batch, np.random.default_rng(len(batch)))

    def learn(self, batch: Transitions) -> dict[str, float]:
        """One gradient step on ``batch`` (critics, actor, temperature, then the targets)."""
        metrics, td = self.nets.train_step(self.train_inputs(batch), type(self).__name__, self.updates + 1)
        self.updates += 1
        self._feed.update_priorities(batch, td)
        return metrics

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        new = self._new.take()
        cfg = self.cfg
        steps = gradient_steps(len(self._feed), new, cfg.learning_starts, cfg.update_steps, cfg.replay_ratio)
        if not steps:
            return {"gradient_steps": 0}
        return mean_metrics(lambda: self.learn(self._feed.sample(int(batch_size))), steps)

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        return {"new_transitions": np.asarray(self._new.transitions, np.int64)}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new.transitions = int(np.asarray(state.get("new_transitions", 0)))

    def __repr__(self) -> str:
        actions = f"n_actions={self.n_actions}" if self.discrete else f"action_dim={self.action_dim}"
        return (f"{type(self).__name__}(obs_dim={self.encoder.dim}, {actions}, temperature={self.temperature:.4g}, "
                f"target_entropy={self.target_entropy:.4g}, agent_steps={self.agent_steps}, updates={self.updates})")
