"""MAPPO and IPPO, the numpy half: configuration, seats, acting, the joint rollout, GAE per agent and epochs.

Multi-agent PPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
Games"): decentralised actors over each agent's own observation, a value function over a
centralised input, PPO's clipped objective. ``critic="local"`` gives IPPO, the same algorithm with
each agent's own observation as the critic's input, so the two compare on equal terms.

The backend networks (:mod:`marl_note.agents.torch.mappo`, :mod:`marl_note.agents.tf.mappo`) only
evaluate the actors and critics and take one step on a numpy minibatch made here.
"""
from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import ObsEncoder
from marl_note.agents.exploration.masked import masked_argmax, masked_softmax, sample_categorical
from marl_note.agents.maddpg_seats import MADDPGSeat, check_agent_spaces
from marl_note.agents.networks import mlp_weights
from marl_note.agents.options import NetworkOptions
from marl_note.agents.running_stats import RunningMeanStd
from marl_note.agents.schedule import updates_cut_short
from marl_note.agents.spaces import check_mask
from marl_note.replay.rollout import compute_gae
from marl_note.types import EnvSpec, JointTransitions
from marl_note.validation import non_negative_float, optional, positive_float, positive_int, unit_interval

__all__ = ["IPPOConfig", "IPPOCore", "MAPPOConfig", "MAPPOCore", "MAPPOSeat"]

_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(NetworkOptions):
    """MAPPO's hyperparameters, defaults written once and checked once (meanings in :class:`MAPPOCore`).

    Defaults follow the MAPPO paper's MPE settings where they exist (clip 0.2, GAE lambda 0.95,
    value clipping, value normalisation, gradient norm 10, lr 5e-4, tanh MLP 64x64).

    Example:
        >>> MAPPOConfig().critic, MAPPOConfig(critic="local").share_actor
        ('central', True)
        >>> MAPPOConfig(critic="global")
        Traceback (most recent call last):
        ...
        ValueError: critic must be 'central' (MAPPO) or 'local' (IPPO), got 'global'
    """

    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    critic: str = "central"
    share_actor: bool = True
    lr: float = 5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    value_clip: float | None = 0.2
    value_norm: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 1.0
    n_epochs: int = 5
    n_steps: int = 800
    max_grad_norm: float | None = 10.0
    normalize_advantage: bool = True
    deterministic_eval: bool = True

    def _check(self) -> None:
        put = self._put
        super()._check()
        if self.critic not in ("central", "local"):
            raise ValueError(f"critic must be 'central' (MAPPO) or 'local' (IPPO), got {self.critic!r}")
        for name in ("share_actor", "value_norm", "normalize_advantage", "deterministic_eval"):
            put(name, bool(getattr(self, name)))
        put("lr", positive_float("lr", self.lr, "the Adam learning rate"))
        put("gamma", unit_interval("gamma", self.gamma, "the discount"))
        put("gae_lambda", unit_interval("gae_lambda", self.gae_lambda, "GAE's lambda"))
        put("clip_range", positive_float("clip_range", self.clip_range, "the ratio's clip range"))
        put("value_clip", optional(positive_float, "value_clip", self.value_clip))
        put("ent_coef", non_negative_float("ent_coef", self.ent_coef, "the entropy bonus weight"))
        put("vf_coef", non_negative_float("vf_coef", self.vf_coef, "the value loss weight"))
        put("n_epochs", positive_int("n_epochs", self.n_epochs, "passes over each rollout"))
        put("n_steps", positive_int("n_steps", self.n_steps, "joint rows (env steps) per rollout"))
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))


@dataclasses.dataclass(frozen=True)
class IPPOConfig(MAPPOConfig):
    """MAPPO's options with ``critic="local"`` by default: IPPO (registered as ``ippo``).

    Example:
        >>> IPPOConfig().critic
        'local'
    """

    critic: str = "local"


class MAPPOSeat(MADDPGSeat):
    """One seat of a MAPPO: agent ``agent_id``'s decentralised actor, acting through ``joint_learner``.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import MAPPO
        >>> m = MAPPO({"a": gym.spaces.Box(-1, 1, (3,))}, {"a": gym.spaces.Discrete(2)}, hidden_sizes=(4,), seed=0)
        >>> seat = m.seat_agents()[0]
        >>> seat, seat.act(np.zeros((4, 3)), explore=True).shape
        (MAPPOSeat('a', Discrete(2)), (4,))
    """

    def __repr__(self) -> str:
        return f"MAPPOSeat({self.agent_id!r}, {self.action_space})"


class MAPPOCore(AgentCore):
    """MAPPO (``critic="central"``) and IPPO (``critic="local"``) for Discrete actions.

    Actors: ``share_actor=True`` (default) is one actor for every agent with the agent's one-hot id
    appended to its observation (the seats must have the same observation and action spaces;
    ``marl_note.envs.pad_seats`` pads unlike ones); ``share_actor=False`` is one actor per seat.
    Acting samples from the masked softmax when exploring and takes the best legal logit otherwise
    (``deterministic_eval=False`` samples then too).

    Critic input: with ``critic="central"``, the env's global state (``state_space``, given by
    :meth:`from_trainer` from ``EnvSpec.state_space``; JointTransitions carry ``state``) when the
    env has one, else the joint observation (every agent's encoded observation, concatenated in
    agent order; zeros for an agent that did not act) with the agent's one-hot id; with
    ``critic="local"`` each agent's own observation. A critic shared by every agent
    (``share_actor=True``) also reads the agent's one-hot id; one critic per seat otherwise.

    Learning: the trainer plays :meth:`seat_agents` and hands the joint per-step rows to
    ``observe_joint``; ``update(batch_size)`` does nothing until ``n_steps`` rows are stored, then
    computes GAE(``gamma``, ``gae_lambda``) per agent and env over the rows where the agent acted,
    and runs ``n_epochs`` passes of minibatches of ``batch_size`` joint rows, clearing the rollout.
    Loss per actor/critic group: the clipped surrogate (``clip_range``) + ``vf_coef`` x the value
    loss (clipped around the rollout's value predictions by ``value_clip``, None: unclipped) -
    ``ent_coef`` x the entropy, each a mean over the rows where the agent was alive (an agent
    that did not act in a row, e.g. dead, adds nothing to any loss). ``value_norm=True``: the
    critics predict returns normalised by running statistics (mean and variance of every value
    target seen, :class:`RunningMeanStd`; not PopArt), updated once per rollout before its epochs.
    Advantages are normalised per minibatch over alive rows (``normalize_advantage``). One Adam
    over every network, gradient norm clipped to ``max_grad_norm``.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import MAPPO
        >>> obs = {a: gym.spaces.Box(-1, 1, (2,)) for a in "ab"}
        >>> m = MAPPO(obs, {a: gym.spaces.Discrete(3) for a in "ab"}, n_steps=4, n_epochs=1, seed=0)
        >>> m.critic_input_dim  # the joint observation (2 + 2), then the agent's one-hot id (2)
        6
        >>> m.observe_joint(JointTransitions(("a", "b"), obs={a: np.zeros((4, 2)) for a in "ab"},
        ...     act={a: np.zeros(4, int) for a in "ab"}, rew=np.ones((4, 2)),
        ...     next_obs={a: np.zeros((4, 2)) for a in "ab"},
        ...     terminated=np.zeros((4, 2), bool), truncated=np.zeros((4, 2), bool), alive=np.ones((4, 2), bool)))
        >>> m.update(batch_size=4)["gradient_steps"]
        1
    """

    saving_spaces = ("observation_spaces", "action_spaces")
    config_class = MAPPOConfig
    on_policy = True

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 state_space: gym.Space | None = None, config: MAPPOConfig | None = None, seed: int | None = None,
                 device: Any = "cpu", compile: bool = False, numpy_acting: bool = True, **overrides: Any):
        self.agents = check_agent_spaces(observation_spaces, action_spaces)
        self.cfg = cfg = self._resolve_config(config, overrides)
        for a in self.agents:
            if not isinstance(action_spaces[a], gym.spaces.Discrete):
                raise TypeError(f"MAPPO handles Discrete actions; agent {a!r} has {action_spaces[a]!r}")
        if state_space is not None and not isinstance(state_space, gym.spaces.Box):
            raise TypeError(f"state_space must be a gymnasium Box (the env's state_space) or None, got {state_space!r}")
        self.observation_spaces = {a: observation_spaces[a] for a in self.agents}
        self.action_spaces = {a: action_spaces[a] for a in self.agents}
        self.state_space = state_space
        self.encoders = {a: ObsEncoder(self.observation_spaces[a], "mlp") for a in self.agents}
        self.obs_dim = {a: self.encoders[a].dim for a in self.agents}
        self.act_dim = {a: int(self.action_spaces[a].n) for a in self.agents}  # type: ignore[attr-defined]
        n = len(self.agents)
        if cfg.share_actor:
            if len({self.obs_dim[a] for a in self.agents}) > 1 or len({self.act_dim[a] for a in self.agents}) > 1:
                raise ValueError(f"share_actor=True needs the same observation and action sizes in every seat, got "
                                 f"observations {self.obs_dim} and actions {self.act_dim}: pass share_actor=False "
                                 f"(one actor per seat) or pad the seats (marl_note.envs.pad_seats)")
        self.ids = n if (cfg.share_actor and n > 1) else 0  # one-hot id width appended to shared nets' inputs
        self.groups: tuple[str, ...] = ("",) if cfg.share_actor else self.agents
        self.state_dim = 0 if state_space is None else int(np.prod(state_space.shape, dtype=np.int64))
        super().__init__(gym.spaces.Dict(OrderedDict(self.observation_spaces)),
                         gym.spaces.Dict(OrderedDict(self.action_spaces)), seed=seed, device=device, compile=compile)
        self._seats = [MAPPOSeat(self, a) for a in self.agents]
        self._rows: list[dict[str, Any]] = []
        self.value_stats = RunningMeanStd()
        weights: dict[str, np.ndarray] = {}
        first = self.agents[0]
        for g in self.groups:
            agent = g or first
            weights.update(mlp_weights(self.net_name(g, "actor"), self.obs_dim[agent] + self.ids, cfg.hidden_sizes,
                                       self.act_dim[agent], self.init_rng, "orthogonal", out_gain=0.01))
            weights.update(mlp_weights(self.net_name(g, "critic"), self.critic_input_dim, cfg.hidden_sizes, 1,
                                       self.init_rng, "orthogonal", out_gain=1.0))
        self.nets = self.Networks(weights, groups=self.groups, config=cfg, device=self.device, compile=self.compile)
        self._publish_numpy(numpy_acting, {g: ("mlp", self.net_name(g, "actor")) for g in self.groups},
                            cfg.activation)

    @staticmethod
    def net_name(group: str, net: str) -> str:
        """``actor``/``critic`` of a shared group (``""``), ``<agent>.actor``/``<agent>.critic`` of a seat's."""
        return f"{group}.{net}" if group else net

    @classmethod
    def from_spec(cls, spec: EnvSpec, **hyperparameters):
        """An instance over ``spec.possible_agents`` with the env's spaces and global state space
        (``spec``: an env's :class:`~marl_note.types.EnvSpec`, as ``trainer.spec``)."""
        agents = list(spec.possible_agents)
        hyperparameters.setdefault("state_space", spec.state_space)
        return cls({a: spec.observation_space(a) for a in agents}, {a: spec.action_space(a) for a in agents},
                   **hyperparameters)

    @classmethod
    def from_trainer(cls, trainer: Any, **hyperparameters):
        """:meth:`from_spec` of ``trainer.spec``."""
        return cls.from_spec(trainer.spec, **hyperparameters)

    def seat_agents(self) -> list[MAPPOSeat]:
        """One actor per agent, in ``possible_agents`` order: ``trainer.train(m.seat_agents(), ...)``."""
        return list(self._seats)

    @property
    def critic_input_dim(self) -> int:
        """Width of a critic's input (see the class docstring)."""
        if self.cfg.critic == "local":
            return self.obs_dim[self.agents[0]] + self.ids if self.cfg.share_actor else max(self.obs_dim.values())
        return (self.state_dim or sum(self.obs_dim.values())) + self.ids

    # -- inputs ------------------------------------------------------------------------------------
    def _one_hot(self, j: int, rows: int) -> np.ndarray:
        out = np.zeros((rows, self.ids), np.float32)
        if self.ids:
            out[:, j] = 1.0
        return out

    def actor_input(self, agent: str, obs: Any) -> np.ndarray:
        """The actor's input: the encoded observation, plus the one-hot agent id for a shared actor."""
        x = self.encoders[agent](obs)
        return np.concatenate([x, self._one_hot(self.agents.index(agent), len(x))], axis=1) if self.ids else x

    def critic_inputs(self, obs: Mapping[str, Any], state: np.ndarray | None) -> dict[str, np.ndarray]:
        """``{agent: [B, critic_input_dim]}``: the centralised input (the state, or the joint observation)
        or the agent's own observation, then the agent's one-hot id for a shared critic.

        Example:
            >>> import gymnasium as gym
            >>> from marl_note.agents.torch import MAPPO
            >>> m = MAPPO({a: gym.spaces.Box(-9, 9, (1,)) for a in "ab"}, {a: gym.spaces.Discrete(2) for a in "ab"},
            ...           hidden_sizes=(4,), seed=0)
            >>> m.critic_inputs({"a": np.array([[3.0]]), "b": np.array([[5.0]])}, None)["b"].tolist()
            [[3.0, 5.0, 0.0, 1.0]]
        """
        encoded = {a: self.encoders[a](obs[a], f"obs[{a!r}]") for a in self.agents}
        rows = len(encoded[self.agents[0]])
        if self.cfg.critic == "local":
            if not self.cfg.share_actor:
                width = self.critic_input_dim
                return {a: np.pad(x, ((0, 0), (0, width - x.shape[1]))) for a, x in encoded.items()}
            return {a: np.concatenate([encoded[a], self._one_hot(j, rows)], axis=1) if self.ids else encoded[a]
                    for j, a in enumerate(self.agents)}
        if self.state_dim:
            if state is None:
                raise ValueError("this MAPPO was built with a state_space, but the joint rows carry no state: "
                                 "train it through DecentralizedTrainer (its train envs report state() for a "
                                 "joint learner) or build it without state_space")
            central = np.asarray(state, np.float32).reshape(rows, self.state_dim)
        else:
            central = np.concatenate([encoded[a] for a in self.agents], axis=1)
        return {a: np.concatenate([central, self._one_hot(j, rows)], axis=1) if self.ids else central
                for j, a in enumerate(self.agents)}

    # -- acting ------------------------------------------------------------------------------------
    def act_agent(self, agent: str, obs: Any, mask: np.ndarray | None = None, explore: bool = False,
                  env_ids: np.ndarray | None = None) -> np.ndarray:
        """Agent ``agent``'s actions: a sample of the masked softmax (exploring) or the best legal logit."""
        if agent not in self.act_dim:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        x, policy = self.actor_input(agent, obs), self.numpy_policy()
        g = "" if self.cfg.share_actor else agent
        logits = (self.nets.logits(g, x) if policy is None else policy.forward(g, x)).astype(np.float64)
        mask = check_mask(mask, len(logits), self.act_dim[agent])
        if explore or not self.cfg.deterministic_eval:
            a = sample_categorical(masked_softmax(logits, mask), self.rng)
        else:
            a = masked_argmax(logits, mask)
        return a + int(self.action_spaces[agent].start)  # type: ignore[attr-defined]

    # -- storing -----------------------------------------------------------------------------------
    def observe_joint(self, joint: JointTransitions) -> None:
        """Store joint rows (in arrival order: GAE runs per env stream and agent)."""
        if not isinstance(joint, JointTransitions):
            raise TypeError(f"observe_joint() expects marl_note.types.JointTransitions, got {type(joint).__name__}")
        if tuple(joint.agents) != self.agents:
            raise ValueError(f"joint rows of agents {list(joint.agents)}, this MAPPO's are {list(self.agents)}")
        n = len(joint)
        alive = np.asarray(joint.alive, bool)
        row: dict[str, Any] = {
            "x": {a: self.actor_input(a, joint.obs[a]) for a in self.agents},
            "act": {a: np.asarray(joint.act[a], np.int64).reshape(n) - int(self.action_spaces[a].start)  # type: ignore
                    for a in self.agents},
            "mask": {a: self._legal(a, None if joint.mask is None else joint.mask[a], n) for a in self.agents},
            "cx": self.critic_inputs(joint.obs, joint.state),
            "ncx": self.critic_inputs(joint.next_obs, joint.next_state),
            "rew": np.asarray(joint.rew, np.float32).reshape(n, len(self.agents)),
            "terminated": np.asarray(joint.terminated, bool), "truncated": np.asarray(joint.truncated, bool),
            "alive": alive, "stream": (np.zeros(n, np.int64) if joint.stream is None
                                       else np.asarray(joint.stream, np.int64))}
        for a in self.agents:
            bad = alive[:, self.agents.index(a)] & ((row["act"][a] < 0) | (row["act"][a] >= self.act_dim[a]))
            if bad.any():
                raise ValueError(f"stored actions of agent {a!r} lie outside {self.action_spaces[a]}")
        self._rows.append(row)
        self.agent_steps += int(alive.sum())

    def _legal(self, agent: str, mask: Any, n: int) -> np.ndarray:
        if mask is None:
            return np.ones((n, self.act_dim[agent]), bool)
        mask = np.asarray(mask, bool)
        if mask.shape != (n, self.act_dim[agent]):
            raise ValueError(f"mask of agent {agent!r} has shape {mask.shape}, expected {(n, self.act_dim[agent])}")
        return mask | ~mask.any(axis=1, keepdims=True)

    @property
    def rollout_rows(self) -> int:
        """Joint rows stored since the last update."""
        return sum(len(r["alive"]) for r in self._rows)

    # -- learning ----------------------------------------------------------------------------------
    def rollout(self) -> dict[str, Any]:
        """The stored rollout as per-agent arrays, with old log-probabilities, values, advantages and
        value targets (GAE per env stream and agent over the rows where the agent acted)."""
        cfg, rows = self.cfg, self._rows
        cat = lambda key: {a: np.concatenate([r[key][a] for r in rows]) for a in self.agents}  # noqa: E731
        data: dict[str, Any] = {k: cat(k) for k in ("x", "act", "mask", "cx", "ncx")}
        for k in ("rew", "terminated", "truncated", "alive", "stream"):
            data[k] = np.concatenate([r[k] for r in rows])
        n = len(data["alive"])
        data["logp"], data["v"], data["adv"], data["ret"] = {}, {}, {}, {}
        for j, a in enumerate(self.agents):
            g = "" if cfg.share_actor else a
            data["logp"][a] = self.nets.log_prob(g, data["x"][a], data["act"][a], data["mask"][a])
            v = self.nets.values(g, data["cx"][a])
            nv = self.nets.values(g, data["ncx"][a])
            data["v"][a] = v  # the critic's own (normalised) output: the centre of value clipping
            if cfg.value_norm:
                v, nv = self.value_stats.denormalize(v), self.value_stats.denormalize(nv)
            adv, ret = np.zeros(n, np.float32), np.zeros(n, np.float32)
            live = data["alive"][:, j]
            if live.any():
                adv[live], ret[live] = compute_gae(data["rew"][live, j], v[live], nv[live], data["terminated"][live, j],
                                                   data["truncated"][live, j], data["stream"][live], cfg.gamma,
                                                   cfg.gae_lambda)
            data["adv"][a], data["ret"][a] = adv, ret
        if cfg.value_norm:
            self.value_stats.update(np.concatenate([data["ret"][a][data["alive"][:, j]]
                                                    for j, a in enumerate(self.agents)]))
            data["ret"] = {a: self.value_stats.normalize(r) for a, r in data["ret"].items()}
        return data

    def minibatch(self, data: Mapping[str, Any], idx: np.ndarray) -> dict[str, list[np.ndarray]]:
        """The backend's inputs for joint rows ``idx``, per network group (one shared group, or one per
        seat; a shared group stacks every agent's rows): ``x``, ``cx``, ``act``, ``mask``, ``old_logp``,
        ``adv`` (normalised over alive rows), ``ret``, ``old_v`` and ``w`` (1.0 where the agent acted)."""
        keys = ("x", "cx", "act", "mask", "old_logp", "adv", "ret", "old_v", "w")
        out: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        members = [self.agents] if self.cfg.share_actor else [(a,) for a in self.agents]
        for group in members:
            parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
            for a in group:
                j = self.agents.index(a)
                parts["x"].append(data["x"][a][idx])
                parts["cx"].append(data["cx"][a][idx])
                parts["act"].append(data["act"][a][idx])
                parts["mask"].append(data["mask"][a][idx])
                parts["old_logp"].append(data["logp"][a][idx])
                parts["adv"].append(data["adv"][a][idx])
                parts["ret"].append(data["ret"][a][idx])
                parts["old_v"].append(data["v"][a][idx])
                parts["w"].append(data["alive"][idx, j].astype(np.float32))
            joined = {k: np.concatenate(v) for k, v in parts.items()}
            w, adv = joined["w"], joined["adv"]
            if self.cfg.normalize_advantage and w.sum() > 1:
                mean = float((w * adv).sum() / w.sum())
                std = math.sqrt(float((w * (adv - mean) ** 2).sum() / (w.sum() - 1)))
                joined["adv"] = ((adv - mean) / (std + 1e-8) * w).astype(np.float32)
            for k in keys:
                out[k].append(joined[k])
        return out

    def update(self, batch_size: int) -> dict[str, Any]:
        """Train on the stored rollout once it holds ``n_steps`` joint rows, then clear it."""
        cfg = self.cfg
        if self.rollout_rows < cfg.n_steps or updates_cut_short():  # (the budget ran out: not even the GAE pass)
            return {"gradient_steps": 0}
        batch_size = positive_int("batch_size", batch_size)
        data = self.rollout()
        n = len(data["alive"])
        sums, steps = np.zeros(len(_METRICS)), 0
        for _ in range(cfg.n_epochs):
            if updates_cut_short():  # the run's wall-time budget ran out
                break
            perm = self.rng.permutation(n)
            for start in range(0, n, batch_size):
                if updates_cut_short():
                    break
                batch = self.minibatch(data, perm[start:start + batch_size])
                out = self.nets.train_step(batch, who=type(self).__name__, update=self.updates + 1)
                self.updates += 1
                steps += 1
                sums += np.array([out[k] for k in _METRICS])
        self._rows = []
        if not steps:
            return {"gradient_steps": 0}
        metrics: dict[str, Any] = {k: float(v) / steps for k, v in zip(_METRICS, sums, strict=True)}
        metrics["value_mean"] = float(self.value_stats.mean)
        metrics["gradient_steps"] = steps
        return metrics

    def _config_knobs(self) -> tuple[str, ...]:
        return ("gamma",)

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        """The value normalisation's running statistics (``value_norm.mean``, ``.var``, ``.count``)."""
        return self.value_stats.state("value_norm")

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.value_stats.load("value_norm", state)

    def __repr__(self) -> str:
        kind = "MAPPO" if self.cfg.critic == "central" else "IPPO"
        return (f"{type(self).__name__}({kind}, agents={list(self.agents)}, share_actor={self.cfg.share_actor}, "
                f"updates={self.updates})")


class IPPOCore(MAPPOCore):
    """IPPO: :class:`MAPPOCore` with ``critic="local"`` by default (:class:`IPPOConfig`), so that a
    checkpoint records, and ``--algo ippo`` builds, the local critic.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import IPPO
        >>> IPPO({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,)).cfg.critic
        'local'
    """

    config_class = IPPOConfig

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 state_space: gym.Space | None = None, config: MAPPOConfig | None = None, seed: int | None = None,
                 device: Any = "cpu", compile: bool = False, numpy_acting: bool = True, **overrides: Any):
        super().__init__(observation_spaces, action_spaces, state_space=state_space, config=config, seed=seed,
                         device=device, compile=compile, numpy_acting=numpy_acting, **overrides)
