"""Deep Q-learning, the numpy half: hyperparameters, acting, storing, the update schedule, extra state.

:class:`DQNConfig` holds every hyperparameter (defaults written once, checked once);
:class:`DQNCore` acts, stores transitions, turns sampled batches into numpy arrays and runs the
update schedule. The backends (:mod:`marl_note.agents.torch.dqn`, :mod:`marl_note.agents.tf.dqn`)
add only the networks: forward passes, the TD target, one gradient step and target syncs.

Example:
    >>> DQNConfig(hidden_sizes=[32], dueling=True).hidden_sizes
    (32,)
    >>> DQNConfig(criterion="l1")
    Traceback (most recent call last):
    ...
    ValueError: criterion must be 'huber' or 'mse', got 'l1'
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import agent_encoder, replay_space, torso_factory
from marl_note.agents.exploration.masked import masked_argmax
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.networks import init_linear, mlp_weights, torso_weights
from marl_note.agents.options import FeedOptions, TorsoOptions, UpdateCountOptions
from marl_note.agents.schedule import NewSteps, gradient_steps, mean_metrics
from marl_note.agents.spaces import check_mask, check_transitions
from marl_note.types import Transitions
from marl_note.validation import open_unit_interval, optional, positive_float, positive_int, unit_interval

__all__ = ["DQNConfig", "DQNCore", "q_net_weights"]


@dataclass(frozen=True)
class DQNConfig(UpdateCountOptions, FeedOptions, TorsoOptions):
    """DQN's hyperparameters (see :class:`DQNCore` for what each one does), checked on creation.

    The network, replay and schedule options are the groups of :mod:`marl_note.agents.options`;
    the fields below are DQN's own, and the defaults where DQN differs from a group's.
    """

    user_torso = True  # DQN also takes a user-supplied torso (torso=factory)
    hidden_sizes: tuple[int, ...] = (128, 128)
    replay_ratio: float = 0.25
    lr: float = 1e-3
    gamma: float = 0.99
    double: bool = True
    target_update: int = 100
    target_update_agent_steps: int | None = None
    tau: float | None = None
    criterion: str = "huber"
    max_grad_norm: float | None = 10.0
    policy: Any = None
    dueling: bool = False

    def _check(self) -> None:
        put = self._put
        if self.criterion not in ("huber", "mse"):
            raise ValueError(f"criterion must be 'huber' or 'mse', got {self.criterion!r}")
        put("lr", positive_float("lr", self.lr))
        put("gamma", unit_interval("gamma", self.gamma, "the discount factor"))
        put("target_update", positive_int("target_update", self.target_update, "gradient steps between target copies"))
        put("target_update_agent_steps", optional(positive_int, "target_update_agent_steps",
                                                  self.target_update_agent_steps,
                                                  "agent steps between target copies"))
        put("tau", optional(open_unit_interval, "tau", self.tau, "the Polyak step of the target network"))
        if self.tau is not None and self.target_update_agent_steps is not None:
            raise ValueError("give tau (the target follows after every gradient step) or "
                             "target_update_agent_steps (copied every that many agent steps), not both")
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))
        if self.policy is not None and not callable(getattr(self.policy, "select", None)):
            raise TypeError(f"policy must have select(values, mask, rng), got {type(self.policy).__name__}")
        if torso_factory(self.torso) is not None and self.dueling:
            raise ValueError("a user-supplied torso takes dueling=False (its features go straight to the Q-network)")
        for name in ("double", "dueling"):
            put(name, bool(getattr(self, name)))
        if self.dueling and not self.hidden_sizes:
            raise ValueError("dueling=True needs at least one hidden layer in hidden_sizes (the shared torso "
                             "under the value and advantage heads)")


def q_net_weights(prefix: str, in_dim: int, n_actions: int, config: DQNConfig,
                  rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Initial weights of a Q-network named ``prefix``, PyTorch names and layouts.

    An MLP ``{prefix}.{2j}.weight/bias``; with ``dueling`` a torso ``{prefix}.torso.{2j}.*`` (every
    layer followed by the activation) under ``{prefix}.value.*`` (one output) and
    ``{prefix}.advantage.*`` (one per action).

    Example:
        >>> w = q_net_weights("q_net", 3, 2, DQNConfig(hidden_sizes=(4,), dueling=True), np.random.default_rng(0))
        >>> {k: v.shape for k, v in w.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'q_net.torso.0.weight': (4, 3), 'q_net.torso.0.bias': (4,), 'q_net.value.weight': (1, 4),
         'q_net.value.bias': (1,), 'q_net.advantage.weight': (2, 4), 'q_net.advantage.bias': (2,)}
    """
    if not config.dueling:
        return mlp_weights(prefix, in_dim, config.hidden_sizes, n_actions, rng)
    weights = mlp_weights(f"{prefix}.torso", in_dim, config.hidden_sizes, None, rng)
    last = config.hidden_sizes[-1]
    for head, units in (("value", 1), ("advantage", n_actions)):
        weights[f"{prefix}.{head}.weight"], weights[f"{prefix}.{head}.bias"] = init_linear(last, units, rng)
    return weights


class DQNCore(AgentCore):
    """DQN over a Discrete action space: Q-network, target network, replay, masked actions.

    Exploration uses any policy from :mod:`marl_note.agents.exploration.policies` (default: epsilon-greedy
    annealed from 1.0 to 0.05 over 10k agent steps); greedy actions are the best legal action.
    The TD target ``r + discount * (1 - terminated) * Q_target(s', a*)`` takes ``a*`` among the
    actions legal at ``s'`` (``next_mask``), chosen by the online network when ``double=True``;
    ``discount`` is ``transitions.discount`` when present (n-step), else ``gamma``. Truncation
    still bootstraps; a row with no legal next action does not. Each ``update()`` call does
    ``update_steps`` gradient steps, or ``max(1, round(replay_ratio * new env steps (or transitions, see
    ``update_count`` and :mod:`~marl_note.agents.schedule`) since the
    last call))`` when that is None, and none until ``learning_starts`` transitions are stored.
    With ``tau`` set the target network follows by Polyak averaging after every step; otherwise it
    is copied every ``target_update`` steps, or, with ``target_update_agent_steps=n``, at the end of
    the first ``update()`` call after every ``n`` agent steps (transitions observed) instead. A
    ``replay`` with prioritized sampling (batches carrying ``weights``) gets importance-weighted
    losses and ``update_priorities`` calls.
    ``criterion`` is ``"huber"`` or ``"mse"``; gradients are clipped to ``max_grad_norm``.

    The Q-network is an MLP (``hidden_sizes``, ``activation``); ``dueling=True`` makes it a
    dueling network: a shared torso of ``hidden_sizes`` under a value head ``V(s)`` and an
    advantage head ``A(s, a)``, ``Q = V + A - mean_a A`` (state keys ``q_net.torso.*``,
    ``q_net.value.*``, ``q_net.advantage.*``).

    Observations go through :class:`~marl_note.agents.encoders.ObsEncoder` (Dict/Tuple flattened;
    ``torso="auto" | "mlp" | "conv"``, ``conv_layers``: a conv torso ``q_net.conv.*`` for images;
    ``torso=factory``: your module ``q_net.user.*``, recorded by import path, ``dueling=False``).

    Replay options (shared with DDPG and SAC, see :class:`~marl_note.agents.options.FeedOptions`):
    ``prioritized=True, alpha, beta, initial_td`` builds a prioritized buffer (``|TD|`` fed back after each
    gradient step); ``num_steps=n`` stores n-step transitions (their ``discount`` is ``gamma**k``);
    for goal envs (Dict observations with ``observation``/``achieved_goal``/``desired_goal``)
    ``her=dict(strategy="future", k=4), compute_reward=env.compute_reward`` (or
    ``replay=HERReplayBuffer(...)``) relabels goals, and ``act`` takes the dict of batched arrays.
    ``augment=fn`` also stores ``fn(transitions)`` (a batch or a list of batches: e.g. mirrored
    boards with mirrored actions and masks) next to every stored batch; ``agent_steps`` and the
    ``replay_ratio`` schedule still count only the real transitions.

    The agent acts through a numpy copy of its Q-network (:class:`~marl_note.agents.numpy_policy.NumpyPolicy`,
    refreshed after every weight change, equal to the framework's output to float32 rounding);
    ``numpy_acting=False`` acts through the framework instead.

    The hyperparameters are :class:`DQNConfig`'s fields: pass them by name, or a config and the
    names that differ from it (``DQN(obs_space, act_space, config=DQNConfig(lr=1e-3), gamma=0.95)``);
    ``agent.cfg`` is the checked config. ``seed``, ``device``, ``compile`` and ``numpy_acting`` are
    the runtime options.

    ``compile=True`` compiles the gradient step (``torch.compile`` of the loss, falling back to
    eager mode with a warning where that fails; XLA in TensorFlow). Both backends start from the
    same weights for the same ``seed`` and write the same ``state_dict()`` keys and layouts.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.types import Transitions
        >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), learning_starts=8, seed=0)
        >>> agent.act(np.zeros((2, 4)), mask=np.array([[0, 1, 0], [1, 0, 0]], bool)).tolist()
        [1, 0]
        >>> agent.observe(Transitions(obs=np.zeros((8, 4)), act=np.zeros(8, int), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 4)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"]
        2
        >>> agent.td_target(Transitions(obs=np.zeros((1, 4)), act=np.zeros(1, int), rew=np.ones(1),
        ...     next_obs=np.zeros((1, 4)), terminated=np.ones(1, bool), truncated=np.zeros(1, bool))).tolist()
        [1.0]
    """

    config_class = DQNConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, config: DQNConfig | None = None,
                 seed: int | None = None, device: Any = "cpu", compile: bool = False, numpy_acting: bool = True,
                 **overrides: Any):
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"DQN needs a Discrete action space, got {action_space!r}; "
                            f"use a continuous-control agent for Box actions")
        super().__init__(observation_space, action_space, seed=seed, device=device, compile=compile)
        cfg = self._resolve_config(config, overrides)
        self.encoder = agent_encoder(observation_space, cfg.torso, cfg.conv_layers)  # goal dicts as HER reads them
        user_path = None if self.encoder.factory is None else self.encoder.factory[0]
        self.cfg = cfg = replace(cfg, torso=user_path or self.encoder.torso,
                                 conv_layers=self.encoder.conv_layers or None)
        if user_path is not None:  # a user torso: recorded by import path, acting in the framework
            if "_saving_config" in self.__dict__:
                self.__dict__["_saving_config"]["torso"] = cfg.torso
            numpy_acting = False
        self.n_actions, self.action_start = int(action_space.n), int(action_space.start)
        self.gamma = cfg.gamma
        self.policy = cfg.policy if cfg.policy is not None else EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000)
        self._feed = cfg.replay_feed(replay_space(observation_space, self.encoder), action_space, cfg.gamma,
                                     seed=None if cfg.replay is not None else int(self.rng.integers(0, 2**63 - 1)))
        self.replay = self._feed.replay
        self._new = NewSteps(cfg.update_count)  # what replay_ratio multiplies
        self._target_block = 0  # agent_steps // target_update_agent_steps at the last target copy
        conv, in_dim = torso_weights("q_net", self.encoder, self.init_rng)  # a conv torso for images
        user = None
        if self.encoder.factory is not None:  # (factory, input shape, seed) of a user torso
            user = (self.encoder.factory[1], self.encoder.input_shape, int(self.init_rng.integers(0, 2**31 - 1)))
            in_dim = self.Networks.user_torso_width(*user[:2])  # type: ignore[attr-defined]
        q = {**conv, **q_net_weights("q_net", in_dim, self.n_actions, cfg, self.init_rng)}
        target = {"target_net" + k[len("q_net"):]: v.copy() for k, v in q.items()}
        self.nets = self.Networks({**q, **target}, cfg, device=self.device, compile=self.compile, user=user)
        self._publish_numpy(numpy_acting, {"q_net": ("dueling" if cfg.dueling else "mlp", "q_net")}, cfg.activation,
                            conv=cfg.conv_layers)

    # -- acting ------------------------------------------------------------------------------------
    def q_values(self, obs: Any) -> np.ndarray:
        """Online Q-values ``[B, n]`` as float32 numpy (through the numpy copy unless ``numpy_acting=False``)."""
        x = self.encoder(self._feed.observation(obs))
        policy = self.numpy_policy()
        return self.nets.q_values(x) if policy is None else policy.forward("q_net", x)

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        q = self.q_values(obs)
        legal = check_mask(mask, len(q), self.n_actions)
        a = self.policy.select(q, legal, self.rng) if explore else masked_argmax(q, legal)
        return a + self.action_start if self.action_start else a  # (a is a fresh array either way)

    def policy_probs(self, obs: Any, mask: np.ndarray | None = None) -> np.ndarray:
        """The greedy policy as probabilities ``[B, n]``: one-hot on ``act(obs, mask)``'s action (first on ties)."""
        q = self.q_values(obs)
        a = masked_argmax(q, check_mask(mask, len(q), self.n_actions))
        return np.eye(self.n_actions)[a]

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        transitions = self.encoder.flat_transitions(transitions)  # nested observations: stored flat
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        self._feed.add(transitions, flat)  # n-step accumulation / HER episode storage happen here
        n = len(transitions)
        self.agent_steps += n
        self._new.observed(n)
        if hasattr(self.policy, "step"):
            self.policy.step(n)

    def observe_env_steps(self, env_steps: int) -> None:
        """The trainer reports the env steps this agent acted in since its last batch (see ``update_count``)."""
        self._new.env_stepped(env_steps)

    # -- learning ----------------------------------------------------------------------------------
    def _arrays(self, batch: Transitions) -> dict[str, np.ndarray]:
        """What the networks train on: encoded observations, 0-based actions, float32 rewards,
        discounts, ``alive`` (0 where the episode terminated or no next action is legal), the legal
        next actions and importance weights (ones without prioritized replay)."""
        n = len(batch)
        legal = check_mask(batch.next_mask, n, self.n_actions, "next_mask")
        alive = ~np.asarray(batch.terminated, bool)
        if legal is None:  # every next action legal: alive wherever the episode went on
            legal = np.ones((n, self.n_actions), bool)
        else:
            alive &= legal.any(axis=1)
        # (float32 at once: the same rounding as a float64 array cast to float32)
        discount = np.full(n, self.cfg.gamma, np.float32) if batch.discount is None else batch.discount
        weights = np.ones(n, np.float32) if batch.weights is None else batch.weights
        return {"obs": self.encoder(batch.obs), "act": np.asarray(batch.act, np.int64) - self.action_start,
                "next_obs": self.encoder(batch.next_obs, "next_obs"), "rew": np.asarray(batch.rew, np.float32),
                "discount": np.asarray(discount, np.float32), "alive": alive.astype(np.float32),
                "legal": np.ascontiguousarray(legal), "weights": np.asarray(weights, np.float32)}

    def td_target(self, batch: Transitions) -> np.ndarray:
        """``r + discount * (1 - terminated) * Q_target(s', a*)`` with ``a*`` legal at ``s'`` (numpy ``[B]``)."""
        return self.nets.td_target(self._arrays(batch))

    def learn(self, batch: Transitions) -> dict[str, float]:
        """One gradient step on ``batch``, then the target update and the priority feedback."""
        metrics, td_abs = self.nets.train_step(self._arrays(batch), who=type(self).__name__, update=self.updates + 1)
        self._fold_replica_noise("optimizer", len(batch))  # distributed: the step's B_simple measurement
        self.updates += 1
        if self.cfg.tau is not None:
            self.nets.sync("target_net", "q_net", self.cfg.tau)
        elif self.cfg.target_update_agent_steps is None and self.updates % self.cfg.target_update == 0:
            self.nets.sync("target_net", "q_net")
        if batch.weights is not None and hasattr(self.replay, "update_priorities"):
            self.replay.update_priorities(batch.indices, td_abs)
        return metrics

    def _config_knobs(self) -> tuple[str, ...]:
        return ("gamma",) if self.cfg.tau is None else ("tau", "gamma")

    # -- gradient noise scale ----------------------------------------------------------------------
    def _gradient_inputs(self, batch: Transitions) -> dict[str, np.ndarray]:
        return self._arrays(batch)  # the TD loss of learn(), over the online Q-network

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics, policy metrics and ``gradient_steps``."""
        batch_size = positive_int("batch_size", batch_size)
        new = self._new.take()
        cfg = self.cfg
        steps = gradient_steps(len(self.replay), new, cfg.learning_starts, cfg.update_steps, cfg.replay_ratio)
        if not steps:
            return {"gradient_steps": 0}
        metrics: dict[str, Any] = mean_metrics(lambda: self.learn(self.replay.sample(batch_size)), steps)
        period = cfg.target_update_agent_steps
        if period is not None and self.agent_steps // period > self._target_block:
            self._target_block = self.agent_steps // period
            self.nets.sync("target_net", "q_net")
        metrics.update({k: float(v) for k, v in getattr(self.policy, "metrics", dict)().items()})
        return metrics

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        state = {"new_transitions": np.asarray(self._new.transitions, np.int64)}
        if self.cfg.target_update_agent_steps is not None:
            state["target_block"] = np.asarray(self._target_block, np.int64)
        if hasattr(self.policy, "state_dict"):
            state.update({f"policy.{k}": np.asarray(v) for k, v in self.policy.state_dict().items()})
        return state

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new.transitions = int(np.asarray(state.get("new_transitions", 0)))
        if self.cfg.target_update_agent_steps is not None:
            self._target_block = int(np.asarray(state.get("target_block", 0)))
        if hasattr(self.policy, "load_state_dict"):
            self.policy.load_state_dict({k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")})

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(obs_dim={self.encoder.dim}, n_actions={self.n_actions}, "
                f"policy={self.policy!r}, agent_steps={self.agent_steps}, updates={self.updates})")
