"""MADDPG's numpy half: hyperparameters, seats, acting, the joint replay and the update schedule.

The networks (per-agent actors and centralised critics, their targets and one gradient step)
live in :mod:`marl_note.agents.torch.maddpg` and :mod:`marl_note.agents.tf.maddpg`, which build
them from the numpy weights drawn here and take the numpy batches made here.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.exploration.masked import masked_argmax
from marl_note.agents.exploration.noise import GaussianWhiteNoiseProcess
from marl_note.agents.exploration.per_env import PerEnvNoise
from marl_note.agents.exploration.policies import GumbelSoftmaxPolicy
from marl_note.agents.maddpg_seats import MADDPGSeat, check_agent_spaces
from marl_note.agents.networks import mlp_weights
from marl_note.agents.options import BufferOptions, NetworkOptions, ScheduleOptions
from marl_note.agents.schedule import gradient_steps, mean_metrics
from marl_note.agents.spaces import ActionScaler, ObsEncoder, check_mask
from marl_note.replay.joint import JointReplayBuffer
from marl_note.types import EnvSpec, JointTransitions
from marl_note.validation import (
    check_callable,
    non_negative_float,
    open_unit_interval,
    optional,
    positive_float,
    positive_int,
    unit_interval,
)

__all__ = ["MADDPGConfig", "MADDPGCore", "MADDPGSeat"]

@dataclass(frozen=True)
class MADDPGConfig(ScheduleOptions, BufferOptions, NetworkOptions):
    """MADDPG's hyperparameters, checked once (see :class:`MADDPGCore` for their meaning).

    The network, buffer and schedule options are the groups of :mod:`marl_note.agents.options`; the
    fields below are MADDPG's own, and the defaults where MADDPG differs from a group's.
    ``centralized_critic`` was ``MARL`` in the original library (a deprecated constructor name).

    Example:
        >>> MADDPGConfig(centralized_critic=False).centralized_critic
        False
        >>> MADDPGConfig(tau=0.0)
        Traceback (most recent call last):
        ...
        ValueError: tau must be in (0, 1] (the rate of the Polyak target update), got 0.0
    """

    learning_starts: int = 1024
    replay_ratio: float = 0.05
    actor_lr: float = 1e-2
    critic_lr: float = 1e-2
    gamma: float = 0.95
    tau: float = 0.01
    temperature: float = 1.0
    noise_sigma: float = 0.1
    noise: Mapping[str, Any] | None = None
    action_reg: float = 1e-3
    max_grad_norm: float | None = 0.5
    centralized_critic: bool = True
    reward_done_func_ma: Callable | None = None

    def _check(self) -> None:
        put = self._put
        for name in ("actor_lr", "critic_lr", "temperature"):
            put(name, positive_float(name, getattr(self, name)))
        put("gamma", unit_interval("gamma", self.gamma, "the discount"))
        put("tau", open_unit_interval("tau", self.tau, "the rate of the Polyak target update"))
        for name in ("noise_sigma", "action_reg"):
            put(name, non_negative_float(name, getattr(self, name)))
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))
        if self.noise is not None and not isinstance(self.noise, Mapping):
            raise TypeError(f"noise must be a dict {{agent: noise process}}, got {type(self.noise).__name__}")
        check_callable("reward_done_func_ma", self.reward_done_func_ma, "(joint) -> (rew, terminated)")
        put("centralized_critic", bool(self.centralized_critic))


class MADDPGCore(AgentCore):
    """MADDPG: per-agent decentralised actors and centralised critics ``Q_i(all obs, all actions)``.

    Discrete actions: the actor outputs logits; acting samples from ``softmax(logits)`` when
    exploring (Gumbel-max, :class:`~marl_note.agents.exploration.policies.GumbelSoftmaxPolicy`) and takes the
    argmax otherwise; the actor loss differentiates through a straight-through Gumbel-softmax
    sample (hard one-hot forward, relaxed gradient, ``temperature``). Box actions: a ``tanh``
    actor scaled to the bounds with Gaussian exploration noise ``noise_sigma`` (half-range units;
    ``noise={agent: process}`` takes any process of :mod:`marl_note.agents.exploration.noise`, of one action's
    size; each env gets its own copy, and only an env whose episode ended has its copy reset).

    Critic ``i`` sees every agent's observation and action (one-hot for Discrete, [-1, 1] for
    Box; agents that did not act in a row are zeros) and regresses on
    ``r_i + gamma * (1 - terminated_i) * Q'_i(s', mu'(s'))`` with the target actors' greedy
    actions (masked by the stored ``next_mask``: an illegal action gets no probability); actor ``i``
    ascends ``Q_i`` with the other agents' stored actions (its own relaxed sample masked by ``mask``), minus
    ``action_reg`` times its mean squared logits (Box: actions). Rows where agent ``i`` did not
    act are masked out of its losses. Targets follow with rate ``tau`` after every gradient step.
    ``centralized_critic=False`` (the original library's ``MARL=False``) gives independent critics ``Q_i(o_i, a_i)``.

    The trainer plays :meth:`seat_agents` (one actor per seat) and hands this object the joint
    rows (``observe_joint``); ``update(batch_size)`` runs ``update_steps`` gradient steps, or
    ``max(1, round(replay_ratio * new rows))`` when that is None, none before ``learning_starts``
    rows. ``reward_done_func_ma(joint) -> (rew, terminated)`` (both ``[B, num_agents]``)
    reshapes rewards and dones before they are stored. ``compile=True`` compiles the TF gradient
    step with XLA (the PyTorch networks run eagerly and warn).

    Observations of each seat go through that seat's encoder: Box, Discrete, MultiDiscrete,
    MultiBinary and (nested) Dict/Tuple spaces, the latter flattened to one float32 vector per
    observation (stored flat in replay); the critics read every seat's encoded observation. Image
    observations are refused with a ValueError (no conv torso yet: use PPO, DDPG or SAC).

    The spaces are dicts ``{agent: space}``; :class:`~marl_note.agents.core.AgentCore` holds them
    as ``gym.spaces.Dict`` in ``observation_space`` / ``action_space`` (agents in the given order),
    and checkpoints record the dicts (``saving_spaces``), so a checkpoint restores in either backend.
    Acting goes through a numpy copy of the actors (:class:`~marl_note.agents.numpy_policy.NumpyPolicy`,
    refreshed after every weight change, equal to the framework's output to float32 rounding);
    ``numpy_acting=False`` acts through the framework instead.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import MADDPG
        >>> from marl_note.types import JointTransitions
        >>> obs = {"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Box(-1, 1, (3,))}
        >>> acts = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,))}
        >>> m = MADDPG(obs, acts, learning_starts=4, seed=0)
        >>> [s.act(np.zeros((5, s.observation_space.shape[0]))).shape for s in m.seat_agents()]
        [(5,), (5, 2)]
        >>> m.observe_joint(JointTransitions(("a", "b"), obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))},
        ...     act={"a": np.array([0, 1, 2, 0]), "b": np.zeros((4, 2))}, rew=np.ones((4, 2)),
        ...     next_obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))}, terminated=np.zeros((4, 2), bool),
        ...     truncated=np.zeros((4, 2), bool), alive=np.ones((4, 2), bool)))
        >>> m.update(batch_size=4)["gradient_steps"]
        1
        >>> m.state_dict()["a.critic.0.weight"].shape  # all observations (2 + 3) and actions (3 + 2)
        (64, 10)
    """

    saving_spaces = ("observation_spaces", "action_spaces")

    config_class = MADDPGConfig

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 config: MADDPGConfig | None = None, seed: int | None = None, device: Any = "cpu",
                 compile: bool = False, numpy_acting: bool = True, **overrides: Any):
        self.agents = check_agent_spaces(observation_spaces, action_spaces)
        self.cfg = cfg = self._resolve_config(config, overrides)
        unknown = set(cfg.noise or {}) - set(self.agents)
        if unknown:
            raise ValueError(f"noise names unknown agents {sorted(unknown)}")
        self.observation_spaces = {a: observation_spaces[a] for a in self.agents}
        self.action_spaces = {a: action_spaces[a] for a in self.agents}
        self.encoders = {a: ObsEncoder(self.observation_spaces[a], "mlp") for a in self.agents}
        self.obs_dim = {a: self.encoders[a].dim for a in self.agents}
        self.discrete = {a: isinstance(self.action_spaces[a], gym.spaces.Discrete) for a in self.agents}
        self.scalers = {a: ActionScaler(s, "MADDPG") for a, s in self.action_spaces.items()
                        if isinstance(s, gym.spaces.Box)}
        self.act_dim = {a: int(s.n) if isinstance(s, gym.spaces.Discrete) else self.scalers[a].dim
                        for a, s in self.action_spaces.items()}
        super().__init__(gym.spaces.Dict(OrderedDict(self.observation_spaces)),
                         gym.spaces.Dict(OrderedDict(self.action_spaces)), seed=seed, device=device, compile=compile)
        self.centralized_critic = cfg.centralized_critic
        self.learning_starts, self.replay_ratio, self.update_steps = cfg.learning_starts, cfg.replay_ratio, \
            cfg.update_steps
        self.reward_done_func_ma = cfg.reward_done_func_ma
        # Dict/Tuple observations are stored flat (their encoder's float32 vector), every other kind as given
        self.replay = JointReplayBuffer(cfg.buffer_size, self.agents,
                                        {a: self.encoders[a].store_space for a in self.agents}, self.action_spaces,
                                        seed=int(self.rng.integers(0, 2**63 - 1)))
        self.policies = {a: GumbelSoftmaxPolicy(cfg.temperature) for a in self.agents if self.discrete[a]}
        self.noise = {a: self._noise(a) for a in self.agents if not self.discrete[a]}
        self._new_rows = 0
        self._seats = [MADDPGSeat(self, a) for a in self.agents]
        weights: dict[str, np.ndarray] = {}
        for a in self.agents:
            weights.update(mlp_weights(f"{a}.actor", self.obs_dim[a], cfg.hidden_sizes, self.act_dim[a],
                                       self.init_rng))
            weights.update(mlp_weights(f"{a}.critic", self.critic_input_dim(a), cfg.hidden_sizes, 1, self.init_rng))
            for net in ("actor", "critic"):  # targets start as copies
                weights.update({k.replace(f"{a}.{net}.", f"{a}.{net}_target.", 1): v.copy()
                                for k, v in weights.items() if k.startswith(f"{a}.{net}.")})
        self.nets = self.Networks(weights, agents=self.agents, discrete=self.discrete, config=cfg,
                                  device=self.device, compile=self.compile)
        self._publish_numpy(numpy_acting, {a: ("mlp", f"{a}.actor") for a in self.agents}, cfg.activation)

    def _noise(self, agent: str) -> PerEnvNoise:
        seed = int(self.rng.integers(0, 2**63 - 1))
        process = (self.cfg.noise or {}).get(agent) or GaussianWhiteNoiseProcess(
            sigma=self.cfg.noise_sigma, size=(self.act_dim[agent],), seed=seed)
        if not callable(getattr(process, "sample", None)):
            raise TypeError(f"noise[{agent!r}] must be a process with sample(), got {type(process).__name__}")
        return PerEnvNoise(process, self.act_dim[agent], seed)

    @classmethod
    def from_spec(cls, spec: EnvSpec, **hyperparameters):
        """An instance over ``spec.possible_agents`` with the env's spaces (``spec``: an env's
        :class:`~marl_note.types.EnvSpec`, as ``trainer.spec``)."""
        agents = list(spec.possible_agents)
        return cls({a: spec.observation_space(a) for a in agents},
                   {a: spec.action_space(a) for a in agents}, **hyperparameters)

    @classmethod
    def from_trainer(cls, trainer: Any, **hyperparameters):
        """:meth:`from_spec` of ``trainer.spec``."""
        return cls.from_spec(trainer.spec, **hyperparameters)

    def seat_agents(self) -> list[MADDPGSeat]:
        """One actor per agent, in ``possible_agents`` order: ``trainer.train(m.seat_agents(), ...)``."""
        return list(self._seats)

    def critic_input_dim(self, agent: str) -> int:
        if self.cfg.centralized_critic:
            return sum(self.obs_dim.values()) + sum(self.act_dim.values())
        return self.obs_dim[agent] + self.act_dim[agent]

    # -- acting ------------------------------------------------------------------------------------
    def actor_outputs(self, agent: str, obs: Any) -> np.ndarray:
        """Actor output ``[B, act_dim]``: logits (Discrete) or tanh units in [-1, 1] (Box), through the
        numpy copy of the actors unless ``numpy_acting=False``."""
        x, policy = self.encoders[agent](obs), self.numpy_policy()
        out = self.nets.actor_output(agent, x) if policy is None else policy.forward(agent, x)
        return out if policy is None or self.discrete[agent] else np.tanh(out)

    def act_agent(self, agent: str, obs: Any, mask: np.ndarray | None = None, explore: bool = False,
                  env_ids: np.ndarray | None = None) -> np.ndarray:
        """Agent ``agent``'s actions: Gumbel-max sample / argmax (Discrete), noisy / plain (Box).

        Exploring Box noise for row ``k`` comes from env ``env_ids[k]``'s process (row ``k`` is env
        ``k`` when ``env_ids`` is None)."""
        if agent not in self.discrete:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        out = self.actor_outputs(agent, obs)
        if self.discrete[agent]:
            mask = check_mask(mask, len(out), self.act_dim[agent])
            a = self.policies[agent].select(out, mask, self.rng) if explore else masked_argmax(out, mask)
            return a + int(self.action_spaces[agent].start)  # type: ignore[attr-defined, operator]
        unit = out.astype(np.float64)
        if explore:  # one sample of the row's env process per row, in half-range units
            ids = np.arange(len(unit)) if env_ids is None else np.asarray(env_ids, np.int64).reshape(-1)
            if len(ids) != len(unit):
                raise ValueError(f"env_ids has {len(ids)} entries for a batch of {len(unit)}")
            unit = unit + self.noise[agent].sample(ids).reshape(unit.shape)
        return self.scalers[agent].to_env(unit)

    # -- storing -----------------------------------------------------------------------------------
    def observe_joint(self, joint: JointTransitions) -> None:
        """Store joint rows, after ``reward_done_func_ma(joint) -> (rew, terminated)`` if given."""
        if not isinstance(joint, JointTransitions):
            raise TypeError(f"observe_joint() expects marl_note.types.JointTransitions, got {type(joint).__name__}")
        if self.reward_done_func_ma is not None:
            rew, term = self.reward_done_func_ma(joint)
            rew, term = np.asarray(rew, np.float32), np.asarray(term, bool)
            if rew.shape != np.shape(joint.rew) or term.shape != np.shape(joint.rew):
                raise ValueError(f"reward_done_func_ma must return (rew, terminated) of shape "
                                 f"{np.shape(joint.rew)}, got {rew.shape} and {term.shape}")
            joint = replace(joint, rew=rew, terminated=term, truncated=np.asarray(joint.truncated, bool) & ~term)
        joint = self._flat_joint(joint)
        self.replay.add(joint)
        alive = np.asarray(joint.alive, bool)
        done = np.asarray(joint.terminated, bool) | np.asarray(joint.truncated, bool)
        self._new_rows += len(joint)
        self.agent_steps += int(alive.sum())
        for j, a in enumerate(self.agents):
            if a in self.policies:
                self.policies[a].step(int(alive[:, j].sum()))
            elif np.any(ended := done[:, j] & alive[:, j]):  # e.g. an Ornstein-Uhlenbeck process restarts
                self.noise[a].reset(None if joint.stream is None else np.asarray(joint.stream)[ended])

    def _flat_joint(self, joint: JointTransitions) -> JointTransitions:
        """``joint`` with every Dict/Tuple seat's observations flattened to their stored float32 form."""
        nested = [a for a in self.agents if self.encoders[a].nested]
        if not nested:
            return joint
        obs, next_obs = dict(joint.obs), dict(joint.next_obs)
        for a in nested:
            obs[a] = self.encoders[a].flat(obs[a], f"obs[{a!r}]")
            next_obs[a] = self.encoders[a].flat(next_obs[a], f"next_obs[{a!r}]")
        return replace(joint, obs=obs, next_obs=next_obs)

    # -- learning ----------------------------------------------------------------------------------
    def prepare_batch(self, batch: JointTransitions, rng: np.random.Generator | None = None) -> dict[str, Any]:
        """Float32 numpy inputs of one gradient step; agents not alive in a row are zeros.

        Per agent (lists in agent order): ``obs``, ``act`` (one-hot / [-1, 1]), ``next_obs`` (zero
        where the agent is gone at the next step: not alive or terminated), ``gumbel`` (the noise
        of the relaxed sample, drawn from ``rng``, by default the agent's generator; zeros for Box
        agents), ``temperature`` and ``mask`` / ``next_mask`` (1.0 = legal, all ones without masks,
        for Box agents and where a row allows nothing); joint ``[B, n]``: ``rew``, ``terminated``,
        ``alive``, ``next_live``.
        """
        alive = np.asarray(batch.alive, bool)
        next_live = alive & ~np.asarray(batch.terminated, bool)
        out: dict[str, Any] = {k: [] for k in ("obs", "act", "next_obs", "gumbel", "temperature", "mask", "next_mask")}
        rng = self.rng if rng is None else rng
        for j, a in enumerate(self.agents):
            live, nlive = alive[:, j:j + 1].astype(np.float32), next_live[:, j:j + 1].astype(np.float32)
            out["obs"].append(self.encoders[a](batch.obs[a], f"obs[{a!r}]") * live)
            out["next_obs"].append(self.encoders[a](batch.next_obs[a], f"next_obs[{a!r}]") * nlive)
            out["act"].append(self._encode_act(a, batch.act[a], alive[:, j]) * live)
            shape = (len(alive), self.act_dim[a])
            if self.discrete[a]:
                out["gumbel"].append(rng.gumbel(size=shape).astype(np.float32))
                out["temperature"].append(np.float32(self.policies[a].temperature))
            else:
                out["gumbel"].append(np.zeros(shape, np.float32))
                out["temperature"].append(np.float32(1.0))
            for name, masks in (("mask", batch.mask), ("next_mask", batch.next_mask)):
                out[name].append(self._legal(a, None if masks is None else masks.get(a), shape))
        out.update(rew=np.asarray(batch.rew, np.float32), terminated=np.asarray(batch.terminated, np.float32),
                   alive=alive.astype(np.float32), next_live=next_live.astype(np.float32))
        return out

    def _legal(self, agent: str, mask: Any, shape: tuple[int, int]) -> np.ndarray:
        """A float32 ``[B, act_dim]`` legal-action mask; rows that allow nothing become all ones."""
        if mask is None or not self.discrete[agent]:
            return np.ones(shape, np.float32)
        mask = np.asarray(mask, bool)
        if mask.shape != shape:
            raise ValueError(f"mask of agent {agent!r} has shape {mask.shape}, expected {shape}")
        return (mask | ~mask.any(axis=1, keepdims=True)).astype(np.float32)

    def _encode_act(self, agent: str, act: Any, alive: np.ndarray) -> np.ndarray:
        act = np.asarray(act)
        n = len(alive)
        if self.discrete[agent]:
            idx = np.where(alive, act.astype(np.int64) - int(self.action_spaces[agent].start), 0)  # type: ignore
            if np.any((idx < 0) | (idx >= self.act_dim[agent])):
                raise ValueError(f"stored actions of agent {agent!r} lie outside {self.action_spaces[agent]}")
            out = np.zeros((n, self.act_dim[agent]), np.float32)
            out[np.arange(n), idx] = 1.0
            return out
        return self.scalers[agent].to_unit(act)

    def _config_knobs(self) -> tuple[str, ...]:
        return ("tau", "gamma")

    def _gradient_inputs(self, batch: JointTransitions) -> dict[str, Any]:
        # every agent's critic loss of learn() (the Gumbel noise, unused by it, from a generator of its own)
        return self.prepare_batch(batch, np.random.default_rng(0))

    def learn(self, batch: JointTransitions, agents: Sequence[str] | None = None) -> dict[str, float]:
        """One gradient step of each agent's critic, then its actor, on an explicit joint batch.

        ``agents`` (default: all) trains only those agents (and moves only their targets); the
        metrics are means over them."""
        if agents is not None:
            agents = tuple(agents)
            unknown = [a for a in agents if a not in self.agents]
            if unknown or not agents or len(set(agents)) != len(agents):
                raise ValueError(f"agents must be distinct names among {list(self.agents)}, got {list(agents)}")
        metrics = self.nets.train_step(self.prepare_batch(batch), agents=agents, who=type(self).__name__,
                                       update=self.updates + 1)
        self.updates += 1
        return metrics

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        batch_size = positive_int("batch_size", batch_size)
        new, self._new_rows = self._new_rows, 0
        steps = gradient_steps(len(self.replay), new, self.learning_starts, self.update_steps, self.replay_ratio)
        if not steps:
            return {"gradient_steps": 0}
        return mean_metrics(lambda: self.learn(self.replay.sample(batch_size)), steps)

    # -- state -------------------------------------------------------------------------------------
    def param_keys(self, state: Mapping[str, Any] | None = None) -> list[str]:
        """The state_dict keys that are network weights (``<agent>.<network>.*``), for ``save_param``."""
        state = self.state_dict() if state is None else state
        prefixes = tuple(f"{name}." for name in self._nets)
        return sorted(k for k in state if k.startswith(prefixes))

    def _extra_state(self) -> dict[str, np.ndarray]:
        """``new_transitions`` and the exploration state: ``<agent>.policy.*``, ``<agent>.noise.*``."""
        out = {"new_transitions": np.asarray(self._new_rows, np.int64)}
        for a, policy in self.policies.items():
            out.update({f"{a}.policy.{k}": np.asarray(v) for k, v in policy.state_dict().items()})
        for a, noise in self.noise.items():
            out.update({f"{a}.noise.{k}": np.asarray(v) for k, v in noise.state_dict().items()})
        return out

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new_rows = int(np.asarray(state.get("new_transitions", 0)))
        for name, parts in (("policy", self.policies), ("noise", self.noise)):
            for a, part in parts.items():
                prefix = f"{a}.{name}."
                own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
                if own:
                    part.load_state_dict(own)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(agents={list(self.agents)}, centralized_critic={self.centralized_critic}, "
                f"rows={len(self.replay)}, updates={self.updates})")
