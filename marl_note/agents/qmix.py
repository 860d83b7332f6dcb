"""Value decomposition (VDN, QMIX), the numpy half: hyperparameters, seats, acting, the joint replay,
batches, the update schedule and extra state.

Each agent has a Q-network ``Q_i(o_i, a_i)`` (one network shared by every seat with the agent's
one-hot id appended, or one per seat); a mixer turns the chosen ``Q_i`` into the team's
``Q_tot``: VDN's sum (Sunehag et al. 2017) or QMIX's monotonic hypernetwork mixer on the global
state (Rashid et al. 2018). The networks and one gradient step live in
:mod:`marl_note.agents.torch.qmix` and :mod:`marl_note.agents.tf.qmix`; they take the numpy
batches made here.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.exploration.masked import masked_argmax
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.maddpg_seats import MADDPGSeat, image_observation
from marl_note.agents.networks import mlp_weights
from marl_note.agents.options import BufferOptions, NetworkOptions, ScheduleOptions
from marl_note.agents.running_stats import RunningMeanStd
from marl_note.agents.schedule import gradient_steps, mean_metrics
from marl_note.agents.spaces import ObsEncoder, check_mask
from marl_note.replay.joint import JointReplayBuffer
from marl_note.types import EnvSpec, JointTransitions
from marl_note.validation import open_unit_interval, optional, positive_float, positive_int, unit_interval

__all__ = ["MIXERS", "MIXER_PARTS", "TEAM_REWARDS", "QMIXConfig", "QMIXCore", "QMIXSeat", "VDNConfig", "VDNCore"]

#: The mixers: ``"vdn"`` sums the agents' Q-values, ``"qmix"`` mixes them monotonically on the state.
MIXERS = ("vdn", "qmix")
#: How the team reward is made from the agents' rewards of a step.
TEAM_REWARDS = ("sum", "mean")
#: QMIX's hypernetworks (modules ``mixer.<part>`` and ``target_mixer.<part>``), each an MLP on the state.
MIXER_PARTS = ("hyper_w1", "hyper_b1", "hyper_w2", "value")


@dataclass(frozen=True)
class QMIXConfig(ScheduleOptions, BufferOptions, NetworkOptions):
    """VDN's and QMIX's hyperparameters, checked once (see :class:`QMIXCore` for their meaning).

    Example:
        >>> QMIXConfig().mixer, VDNConfig().mixer, QMIXConfig().team_reward
        ('qmix', 'vdn', 'mean')
        >>> QMIXConfig(mixer="sum")
        Traceback (most recent call last):
        ...
        ValueError: mixer must be one of ['vdn', 'qmix'], got 'sum'
    """

    mixer: str = "qmix"
    learning_starts: int = 1000
    replay_ratio: float = 0.25
    lr: float = 5e-4
    gamma: float = 0.99
    double: bool = True
    target_update: int = 200
    tau: float | None = None
    eps: float = 1.0
    eps_min: float = 0.05
    eps_anneal_steps: int = 50_000
    team_reward: str = "mean"
    standardize_rewards: bool = False
    share_weights: bool = True
    mixing_embed: int = 32
    hypernet_hidden: int = 64
    max_grad_norm: float | None = 10.0
    state_shape: tuple[int, ...] | None = None

    def _check(self) -> None:
        put = self._put
        if self.state_shape is not None:
            shape = tuple(self.state_shape) if isinstance(self.state_shape, (tuple, list)) else None
            if not shape or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0
                                    for d in shape):
                raise ValueError(f"state_shape must be None or the shape of the env's state (positive integers), "
                                 f"got {self.state_shape!r}")
            put("state_shape", tuple(int(d) for d in shape))
        if self.mixer not in MIXERS:
            raise ValueError(f"mixer must be one of {list(MIXERS)}, got {self.mixer!r}")
        if self.team_reward not in TEAM_REWARDS:
            raise ValueError(f"team_reward must be one of {list(TEAM_REWARDS)} (over the agents' rewards of a step), "
                             f"got {self.team_reward!r}")
        put("lr", positive_float("lr", self.lr))
        put("gamma", unit_interval("gamma", self.gamma, "the discount"))
        put("target_update", positive_int("target_update", self.target_update, "gradient steps between target copies"))
        put("tau", optional(open_unit_interval, "tau", self.tau, "the Polyak step of the target networks"))
        for name in ("eps", "eps_min"):
            put(name, unit_interval(name, getattr(self, name), "a probability of a random legal action"))
        put("eps_anneal_steps", positive_int("eps_anneal_steps", self.eps_anneal_steps,
                                             "env steps over which eps falls to eps_min"))
        put("mixing_embed", positive_int("mixing_embed", self.mixing_embed, "units of QMIX's mixing layer"))
        put("hypernet_hidden", positive_int("hypernet_hidden", self.hypernet_hidden,
                                            "hidden units of QMIX's hypernetworks"))
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))
        for name in ("double", "share_weights", "standardize_rewards"):
            put(name, bool(getattr(self, name)))


@dataclass(frozen=True)
class VDNConfig(QMIXConfig):
    """:class:`QMIXConfig` with the sum mixer by default (the ``vdn`` algorithm)."""

    mixer: str = "vdn"


class QMIXSeat(MADDPGSeat):
    """One seat of a VDN / QMIX learner: acts epsilon-greedily (exploring) or greedily on agent
    ``agent_id``'s Q-values over its legal actions; learns through ``joint_learner``.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import QMIX
        >>> q = QMIX({"a": gym.spaces.Box(-1, 1, (3,))}, {"a": gym.spaces.Discrete(2)}, hidden_sizes=(4,), seed=0)
        >>> seat = q.seat_agents()[0]
        >>> seat.agent_id, seat.act(np.zeros((4, 3)), mask=np.array([[0, 1]] * 4, bool)).tolist()
        ('a', [1, 1, 1, 1])
    """

    accepts_env_ids = False

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False,
            env_ids: np.ndarray | None = None) -> np.ndarray:
        return self.joint_learner.act_agent(self.agent_id, obs, mask, explore)

    def __repr__(self) -> str:
        return f"QMIXSeat({self.agent_id!r}, {self.action_space})"


def check_agent_spaces(observation_spaces: Any, action_spaces: Any, who: str) -> tuple[str, ...]:
    """The agents of two ``{agent: space}`` dicts over the same agents with Discrete actions and flat
    observations, or a TypeError/ValueError naming the problem."""
    if not isinstance(observation_spaces, Mapping) or not isinstance(action_spaces, Mapping):
        raise TypeError(f"{who} takes dicts {{agent: space}} of observation and action spaces "
                        f"({who}.from_trainer(trainer) builds them)")
    agents = tuple(observation_spaces)
    if not agents or set(agents) != set(action_spaces):
        raise ValueError(f"observation and action spaces must cover the same non-empty agents, got "
                         f"{list(observation_spaces)} and {list(action_spaces)}")
    for a in agents:
        obs, act = observation_spaces[a], action_spaces[a]
        if not isinstance(obs, gym.Space) or not isinstance(act, gym.Space):
            raise TypeError(f"agent {a!r}: spaces must be gymnasium spaces")
        if not isinstance(act, gym.spaces.Discrete):
            raise TypeError(f"{who} needs Discrete actions (one Q-value per action); agent {a!r} has {act!r}")
        if image_observation(obs):
            raise ValueError(f"{who} has no conv torso yet: agent {a!r} observes images {obs}. Make the observation "
                             f"small and flat first (SuperSuit's resize_v1 / color_reduction_v0, then "
                             f"gymnasium.spaces.flatten)")
    return agents


class QMIXCore(AgentCore):
    """Value decomposition over a Parallel env's agents: VDN (``mixer="vdn"``) or QMIX (``"qmix"``).

    Agent ``i``'s Q-network reads its own observation: with ``share_weights=True`` one network
    ``q_net`` serves every seat, its input the observation zero-padded to the widest seat's plus the
    agent's one-hot id, its outputs as many as the largest action space (a seat's extra actions are
    never legal); with ``share_weights=False`` each seat has its own ``<agent>.q_net``. The mixer
    turns the agents' chosen Q-values into the team's ``Q_tot``: VDN sums them; QMIX computes
    ``Q_tot = elu(q W1(s) + b1(s)) w2(s) + V(s)`` with ``W1 = |hyper_w1(s)|`` and ``w2 =
    |hyper_w2(s)|`` (absolute values, so ``dQ_tot/dQ_i >= 0``: the greedy joint action is every
    agent's own greedy action), ``mixing_embed`` units, hypernetworks of ``hypernet_hidden`` units
    and a state-dependent bias ``V(s)``. The state ``s`` is the env's global state (PettingZoo's
    ``state()``, flattened) when ``state_shape`` names its shape (``from_trainer`` sets it from the
    env's ``state_space``; every stored batch must then carry ``state``/``next_state``), else the
    concatenation of every agent's encoded observation (zeros where an agent did not act).

    The team reward of a step is the ``team_reward`` (``"sum"`` or ``"mean"``, over the agents
    that acted) of the agents' rewards; with ``standardize_rewards=True`` the TD target reads it
    standardised, minus the running mean and over the running standard deviation of the team
    rewards stored so far (EPyMARL's ``standardise_rewards``: it keeps ``Q_tot`` near zero, so that
    QMIX's mixer need not scale the agents' Q-values up to the size of the returns). The TD target
    is ``r + gamma * live * Q'_tot(s', a*)`` where ``Q'_tot`` is the target mixer over the target
    Q-networks, ``a*_i`` each agent's best action among those legal at its next observation
    (``next_mask``), chosen by the online network when ``double=True``, and ``live`` is 0 only
    where no agent goes on (every acting agent terminated): a truncated step bootstraps. An agent
    that did not act in a row (``alive`` False: dead or not yet there) is out of the mixer's input
    (its Q-value is zero) and of the loss; an agent gone at the next step (not alive or
    terminated) adds nothing to the target.
    Rows where no agent acted weigh nothing. The loss is the mean squared TD error over rows.

    Exploration is epsilon-greedy over legal actions, ``eps`` falling linearly to ``eps_min`` over
    ``eps_anneal_steps`` env steps (joint rows stored). Replay stores one-step joint rows
    (:class:`~marl_note.replay.joint.JointReplayBuffer`); ``update(batch_size)`` runs
    ``update_steps`` gradient steps, or ``max(1, round(replay_ratio * new rows))`` when that is
    None, none before ``learning_starts`` rows. The target networks (agents' and mixer's) are
    copied every ``target_update`` gradient steps, or follow by Polyak averaging with rate ``tau``
    after every step when ``tau`` is set. Gradients are clipped to ``max_grad_norm``.

    The trainer plays :meth:`seat_agents` (one actor per seat) and hands this object the joint
    rows (``observe_joint``). Both backends start from the same weights for the same ``seed`` and
    write the same ``state_dict()`` keys, so a checkpoint restores in either. Acting goes through a
    numpy copy of the Q-networks (``numpy_acting=False``: through the framework).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import QMIX
        >>> from marl_note.types import JointTransitions
        >>> obs = {"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Box(-1, 1, (3,))}
        >>> acts = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Discrete(2)}
        >>> q = QMIX(obs, acts, learning_starts=4, hidden_sizes=(8,), seed=0)
        >>> [s.act(np.zeros((5, s.observation_space.shape[0]))).shape for s in q.seat_agents()]
        [(5,), (5,)]
        >>> q.observe_joint(JointTransitions(("a", "b"), obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))},
        ...     act={"a": np.array([0, 1, 2, 0]), "b": np.array([1, 0, 1, 1])}, rew=np.ones((4, 2)),
        ...     next_obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))}, terminated=np.zeros((4, 2), bool),
        ...     truncated=np.zeros((4, 2), bool), alive=np.ones((4, 2), bool)))
        >>> q.update(batch_size=4)["gradient_steps"]
        1
        >>> q.state_dict()["q_net.0.weight"].shape  # widest observation (3) + agent id (2)
        (8, 5)
    """

    saving_spaces = ("observation_spaces", "action_spaces")

    config_class = QMIXConfig

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 config: QMIXConfig | None = None, seed: int | None = None, device: Any = "cpu",
                 compile: bool = False, numpy_acting: bool = True, **overrides: Any):
        who = type(self).__name__
        self.agents = check_agent_spaces(observation_spaces, action_spaces, who)
        self.cfg = cfg = self._resolve_config(config, overrides)
        self.observation_spaces = {a: observation_spaces[a] for a in self.agents}
        self.action_spaces = {a: action_spaces[a] for a in self.agents}
        self.encoders = {a: ObsEncoder(self.observation_spaces[a], "mlp") for a in self.agents}
        self.obs_dim = {a: self.encoders[a].dim for a in self.agents}
        self.n_actions = {a: int(s.n) for a, s in self.action_spaces.items()}  # type: ignore[attr-defined]
        self.action_start = {a: int(s.start) for a, s in self.action_spaces.items()}  # type: ignore[attr-defined]
        super().__init__(gym.spaces.Dict(OrderedDict(self.observation_spaces)),
                         gym.spaces.Dict(OrderedDict(self.action_spaces)), seed=seed, device=device, compile=compile)
        self.shared = cfg.share_weights
        self.mixer = cfg.mixer
        self.gamma = cfg.gamma
        n = len(self.agents)
        if self.shared:
            self.in_dim = dict.fromkeys(self.agents, max(self.obs_dim.values()) + n)
            self.out_dim = dict.fromkeys(self.agents, max(self.n_actions.values()))
            self.net_of = dict.fromkeys(self.agents, "q_net")
        else:
            self.in_dim, self.out_dim = dict(self.obs_dim), dict(self.n_actions)
            self.net_of = {a: f"{a}.q_net" for a in self.agents}
        state_space = None
        if cfg.state_shape is None:  # the fallback: the joint observation
            self.state_dim = sum(self.obs_dim.values())
        else:
            self.state_dim = math.prod(cfg.state_shape)
            state_space = gym.spaces.Box(-np.inf, np.inf, cfg.state_shape, np.float32)
        self.replay = JointReplayBuffer(cfg.buffer_size, self.agents,
                                        {a: self.encoders[a].store_space for a in self.agents}, self.action_spaces,
                                        seed=int(self.rng.integers(0, 2**63 - 1)), state_space=state_space)
        self.policy = EpsGreedyQPolicy(cfg.eps, cfg.eps_min, n_steps_annealing=cfg.eps_anneal_steps)
        self._new_rows = 0
        self.reward_stats = RunningMeanStd()  # of the stored rows' team rewards (standardize_rewards)
        self._seats = [QMIXSeat(self, a) for a in self.agents]
        weights: dict[str, np.ndarray] = {}
        for a in self.agents:
            name = self.net_of[a]
            if f"{name}.0.weight" not in weights:
                weights.update(mlp_weights(name, self.in_dim[a], cfg.hidden_sizes, self.out_dim[a], self.init_rng))
        if self.mixer == "qmix":
            weights.update(self.mixer_weights("mixer", self.state_dim, n, cfg, self.init_rng))
        weights.update({self.target_name(k): v.copy() for k, v in weights.items()})  # targets start as copies
        nets = tuple(OrderedDict.fromkeys(self.net_of[a] for a in self.agents))
        self.nets = self.Networks(weights, agents=self.agents, net_of=self.net_of, config=cfg, device=self.device,
                                  compile=self.compile)
        self._publish_numpy(numpy_acting, {name: ("mlp", name) for name in nets}, cfg.activation)

    @staticmethod
    def target_name(key: str) -> str:
        """The target network's name (or weight key) of an online one: ``q_net`` -> ``target_net``,
        ``a.q_net`` -> ``a.target_net``, ``mixer.*`` -> ``target_mixer.*``."""
        if key.startswith("mixer."):
            return "target_" + key
        head, sep, tail = key.rpartition("q_net")
        return head + "target_net" + tail

    @staticmethod
    def mixer_weights(prefix: str, state_dim: int, n_agents: int, cfg: QMIXConfig,
                      rng: np.random.Generator) -> dict[str, np.ndarray]:
        """QMIX's hypernetworks on a ``state_dim`` state, PyTorch names: ``{prefix}.hyper_w1`` (state ->
        ``n_agents * mixing_embed``), ``.hyper_b1`` (linear, -> ``mixing_embed``), ``.hyper_w2`` (->
        ``mixing_embed``) and ``.value`` (-> 1), the hidden layers of ``hypernet_hidden`` units (value:
        ``mixing_embed``)."""
        e, h = cfg.mixing_embed, cfg.hypernet_hidden
        out: dict[str, np.ndarray] = {}
        for part, hidden, units in (("hyper_w1", (h,), n_agents * e), ("hyper_b1", (), e), ("hyper_w2", (h,), e),
                                    ("value", (e,), 1)):
            out.update(mlp_weights(f"{prefix}.{part}", state_dim, hidden, units, rng))
        return out

    @classmethod
    def from_spec(cls, spec: EnvSpec, **hyperparameters):
        """An instance over ``spec.possible_agents`` with the env's spaces (``spec``: an env's
        :class:`~marl_note.types.EnvSpec`, as ``trainer.spec``); the mixer reads the env's global
        state when its ``state_space`` is a Box (``state_shape``, unless given)."""
        agents = list(spec.possible_agents)
        if isinstance(spec.state_space, gym.spaces.Box) and "config" not in hyperparameters:
            hyperparameters.setdefault("state_shape", tuple(spec.state_space.shape))
        return cls({a: spec.observation_space(a) for a in agents},
                   {a: spec.action_space(a) for a in agents}, **hyperparameters)

    @classmethod
    def from_trainer(cls, trainer: Any, **hyperparameters):
        """:meth:`from_spec` of ``trainer.spec``."""
        return cls.from_spec(trainer.spec, **hyperparameters)

    def seat_agents(self) -> list[QMIXSeat]:
        """One actor per agent, in ``possible_agents`` order: ``trainer.train(q.seat_agents(), ...)``."""
        return list(self._seats)

    # -- acting ------------------------------------------------------------------------------------
    def _net_input(self, agent: str, x: np.ndarray) -> np.ndarray:
        """The Q-network input of encoded observations ``x``: as they are, or (shared weights) padded
        to the widest seat's and followed by the agent's one-hot id."""
        if not self.shared:
            return x
        out = np.zeros((len(x), self.in_dim[agent]), np.float32)
        out[:, :x.shape[1]] = x
        out[:, self.in_dim[agent] - len(self.agents) + self.agents.index(agent)] = 1.0
        return out

    def q_values(self, agent: str, obs: Any) -> np.ndarray:
        """Agent ``agent``'s online Q-values ``[B, n_actions]`` (float32), through the numpy copy
        unless ``numpy_acting=False``."""
        if agent not in self.net_of:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        x = self._net_input(agent, self.encoders[agent](obs))
        policy, name = self.numpy_policy(), self.net_of[agent]
        q = self.nets.q_values(name, x) if policy is None else policy.forward(name, x)
        return q[:, :self.n_actions[agent]]

    def act_agent(self, agent: str, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        """Agent ``agent``'s actions: epsilon-greedy over its legal actions when exploring, else the best legal."""
        q = self.q_values(agent, obs)
        legal = check_mask(mask, len(q), self.n_actions[agent])
        a = self.policy.select(q, legal, self.rng) if explore else masked_argmax(q, legal)
        return a + self.action_start[agent]

    # -- storing -----------------------------------------------------------------------------------
    def observe_joint(self, joint: JointTransitions) -> None:
        """Store joint rows (one per env step of one env); ``eps`` anneals by their number."""
        if not isinstance(joint, JointTransitions):
            raise TypeError(f"observe_joint() expects marl_note.types.JointTransitions, got {type(joint).__name__}")
        nested = [a for a in self.agents if self.encoders[a].nested]
        if nested:  # Dict/Tuple observations are stored flat
            obs, next_obs = dict(joint.obs), dict(joint.next_obs)
            for a in nested:
                obs[a] = self.encoders[a].flat(obs[a], f"obs[{a!r}]")
                next_obs[a] = self.encoders[a].flat(next_obs[a], f"next_obs[{a!r}]")
            joint = replace(joint, obs=obs, next_obs=next_obs)
        if self.cfg.state_shape is not None and (joint.state is None or joint.next_state is None):
            raise ValueError(f"{type(self).__name__} was built with state_shape={self.cfg.state_shape} (its mixer "
                             f"reads the env's state) but the batch has no state/next_state: build the trainer's "
                             f"envs with their state, or leave state_shape None (the joint observation)")
        self.replay.add(joint)
        if self.cfg.standardize_rewards:
            alive = np.asarray(joint.alive, bool)
            self.reward_stats.update(self.team_reward(joint.rew, alive)[alive.any(axis=1)])
        self._new_rows += len(joint)
        self.agent_steps += int(np.asarray(joint.alive, bool).sum())
        self.policy.step(len(joint))

    # -- learning ----------------------------------------------------------------------------------
    def team_reward(self, rew: np.ndarray, alive: np.ndarray) -> np.ndarray:
        """The team reward ``[B]`` of agents' rewards ``[B, n]``: their sum, or their mean over the
        agents that acted (``team_reward``); as the env gave it (not standardised)."""
        total = np.asarray(rew, np.float32).sum(axis=1)
        if self.cfg.team_reward == "sum":
            return total
        return total / np.maximum(np.asarray(alive, bool).sum(axis=1), 1).astype(np.float32)

    def prepare_batch(self, batch: JointTransitions) -> dict[str, Any]:
        """Float32 numpy inputs of one gradient step.

        Per agent (lists in agent order): ``obs`` and ``next_obs`` (the Q-network inputs, zero where
        the agent did not act / is gone at the next step) and ``next_legal`` (1.0 = legal at the next
        observation, ``[B, outputs]``; actions beyond the agent's own are never legal); joint:
        ``act`` ``[B, n]`` int64 (0-based, 0 where the agent did not act), ``alive`` and
        ``next_live`` ``[B, n]``, ``state`` / ``next_state`` ``[B, state_dim]``, ``rew`` (the team
        reward, standardised with ``standardize_rewards``), ``live`` (0 where no agent goes on) and
        ``weight`` (0 where no agent acted), ``[B]``.
        """
        alive = np.asarray(batch.alive, bool)
        next_live = alive & ~np.asarray(batch.terminated, bool)
        n = len(alive)
        out: dict[str, Any] = {"obs": [], "next_obs": [], "next_legal": []}
        states, next_states, acts = [], [], []
        for j, a in enumerate(self.agents):
            live, nlive = alive[:, j:j + 1].astype(np.float32), next_live[:, j:j + 1].astype(np.float32)
            x = self.encoders[a](batch.obs[a], f"obs[{a!r}]") * live
            nx = self.encoders[a](batch.next_obs[a], f"next_obs[{a!r}]") * nlive
            states.append(x)
            next_states.append(nx)
            out["obs"].append(self._net_input(a, x) * live)
            out["next_obs"].append(self._net_input(a, nx) * nlive)
            idx = np.where(alive[:, j], np.asarray(batch.act[a]).astype(np.int64) - self.action_start[a], 0)
            if np.any((idx < 0) | (idx >= self.n_actions[a])):
                raise ValueError(f"stored actions of agent {a!r} lie outside {self.action_spaces[a]}")
            acts.append(idx)
            legal = np.zeros((n, self.out_dim[a]), bool)
            own = check_mask(None if batch.next_mask is None else batch.next_mask.get(a), n, self.n_actions[a],
                             f"next_mask[{a!r}]")
            legal[:, :self.n_actions[a]] = True if own is None else own | ~own.any(axis=1, keepdims=True)
            out["next_legal"].append(legal.astype(np.float32))
        if self.cfg.state_shape is not None:
            if batch.state is None or batch.next_state is None:
                raise ValueError(f"state_shape={self.cfg.state_shape}: the batch has no state/next_state")
            states = [np.asarray(batch.state, np.float32).reshape(n, self.state_dim)]
            next_states = [np.asarray(batch.next_state, np.float32).reshape(n, self.state_dim)]
        rew = self.team_reward(batch.rew, alive)
        if self.cfg.standardize_rewards:
            rew = self.reward_stats.normalize(rew)
        out.update(act=np.stack(acts, axis=1), alive=alive.astype(np.float32), next_live=next_live.astype(np.float32),
                   state=np.concatenate(states, axis=1), next_state=np.concatenate(next_states, axis=1),
                   rew=rew, live=next_live.any(axis=1).astype(np.float32),
                   weight=alive.any(axis=1).astype(np.float32))
        return out

    def td_target(self, batch: JointTransitions) -> np.ndarray:
        """``r + gamma * live * Q'_tot(s', a*)`` of a batch (numpy ``[B]``), ``a*`` legal at ``s'``."""
        return self.nets.td_target(self.prepare_batch(batch))

    def q_tot(self, batch: JointTransitions) -> np.ndarray:
        """The online mixer's ``Q_tot(s, a)`` of a batch's stored actions (numpy ``[B]``)."""
        return self.nets.q_tot(self.prepare_batch(batch))

    def _config_knobs(self) -> tuple[str, ...]:
        return ("gamma",) if self.cfg.tau is None else ("tau", "gamma")

    def _gradient_inputs(self, batch: JointTransitions) -> dict[str, Any]:
        return self.prepare_batch(batch)  # the TD loss of learn()

    def learn(self, batch: JointTransitions) -> dict[str, float]:
        """One gradient step of the Q-networks and the mixer on an explicit joint batch, then the target update."""
        metrics = self.nets.train_step(self.prepare_batch(batch), who=type(self).__name__, update=self.updates + 1)
        self.updates += 1
        if self.cfg.tau is not None:
            self.nets.sync_targets(self.cfg.tau)
        elif self.updates % self.cfg.target_update == 0:
            self.nets.sync_targets(None)
        return metrics

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics, ``eps`` and ``gradient_steps``."""
        batch_size = positive_int("batch_size", batch_size)
        new, self._new_rows = self._new_rows, 0
        cfg = self.cfg
        steps = gradient_steps(len(self.replay), new, cfg.learning_starts, cfg.update_steps, cfg.replay_ratio)
        if not steps:
            return {"gradient_steps": 0}
        metrics: dict[str, Any] = mean_metrics(lambda: self.learn(self.replay.sample(batch_size)), steps)
        return {**metrics, "eps": float(self.policy.eps)}

    # -- state -------------------------------------------------------------------------------------
    def param_keys(self, state: Mapping[str, Any] | None = None) -> list[str]:
        """The state_dict keys that are network weights, for ``save_param``."""
        state = self.state_dict() if state is None else state
        prefixes = tuple(f"{name}." for name in self._nets)
        return sorted(k for k in state if k.startswith(prefixes))

    def _extra_state(self) -> dict[str, np.ndarray]:
        """``new_transitions``, the exploration schedule (``policy.*``) and, with ``standardize_rewards``,
        the team rewards' running statistics (``reward_norm.*``)."""
        out = {"new_transitions": np.asarray(self._new_rows, np.int64)}
        out.update({f"policy.{k}": np.asarray(v) for k, v in self.policy.state_dict().items()})
        if self.cfg.standardize_rewards:
            out.update(self.reward_stats.state("reward_norm"))
        return out

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new_rows = int(np.asarray(state.get("new_transitions", 0)))
        own = {k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")}
        if own:
            self.policy.load_state_dict(own)
        if self.cfg.standardize_rewards:
            self.reward_stats.load("reward_norm", state)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(agents={list(self.agents)}, mixer={self.mixer!r}, "
                f"share_weights={self.shared}, rows={len(self.replay)}, updates={self.updates})")


class VDNCore(QMIXCore):
    """:class:`QMIXCore` with VDN's sum mixer by default (``Q_tot = sum_i Q_i``, no mixer weights).

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import VDN
        >>> v = VDN({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(2)}, hidden_sizes=(4,))
        >>> v.mixer, [k for k in v.state_dict() if "mixer" in k]
        ('vdn', [])
    """

    config_class = VDNConfig

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 config: VDNConfig | None = None, seed: int | None = None, device: Any = "cpu",
                 compile: bool = False, numpy_acting: bool = True, **overrides: Any):
        super().__init__(observation_spaces, action_spaces, config=config, seed=seed, device=device, compile=compile,
                         numpy_acting=numpy_acting, **overrides)
