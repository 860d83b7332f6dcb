"""Numpy-only half of MADDPG, shared by :mod:`marl_note.agents.torch.maddpg` and
:mod:`marl_note.agents.tf.maddpg`: seats, argument checks, acting from actor outputs, storing
joint rows, batch preparation, the update schedule and the non-network state.

A backend subclasses :class:`JointLearnerBase` and supplies the networks: ``actor_outputs``,
``learn(batch)`` and ``_net_state`` / ``_load_net_state``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from marl_note.agents.checks import flat_obs_dim
from marl_note.agents.env_noise import PerEnvNoise
from marl_note.agents.noise import GaussianWhiteNoiseProcess, rng_state_from_array, rng_state_to_array
from marl_note.agents.policies import GumbelSoftmaxPolicy, masked_argmax
from marl_note.agents.rl_common import run_update_schedule
from marl_note.agents.saving import Saving
from marl_note.replay.joint import JointReplayBuffer
from marl_note.types import JointTransitions

__all__ = ["MADDPGSeat", "JointLearnerBase", "encode_obs", "flat_obs_dim"]


def encode_obs(space: gym.Space, obs: Any, name: str = "obs") -> np.ndarray:
    """A batch of observations as float32 ``[B, flat_obs_dim]`` (one-hot for Discrete).

    Example:
        >>> encode_obs(gym.spaces.Discrete(3), np.array([2, 0])).tolist()
        [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    arr = np.asarray(obs)
    shape = () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape)
    if arr.ndim != len(shape) + 1 or arr.shape[1:] != shape or arr.dtype.kind not in "biuf":
        hint = " (observations are batched: add a leading batch axis)" if arr.shape == shape else ""
        raise ValueError(f"{name} has shape {arr.shape} ({arr.dtype}), expected numeric (batch, *{shape}) "
                         f"for the observation space {space}{hint}")
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros((len(arr), int(space.n)), np.float32)
        out[np.arange(len(arr)), arr.astype(np.int64) - int(space.start)] = 1.0
        return out
    return np.ascontiguousarray(arr.reshape(len(arr), -1), dtype=np.float32)


class BoxScaler:
    """``[-1, 1]`` network actions <-> actions in a Box's finite ``[low, high]`` (affine per dimension).

    Example:
        >>> s = BoxScaler(gym.spaces.Box(0.0, 2.0, (2,)))
        >>> s.to_env(np.array([[-1.0, 0.5]])).tolist(), s.to_unit(np.array([[2.0, 1.0]])).tolist()
        ([[0.0, 1.5]], [[1.0, 0.0]])
    """

    def __init__(self, space: gym.spaces.Box):
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(f"MADDPG squashes Box actions into their bounds, which must be finite; got {space!r}")
        self.space = space
        self.dim = int(np.prod(space.shape, dtype=np.int64))
        low, high = space.low.astype(np.float64).reshape(-1), space.high.astype(np.float64).reshape(-1)
        self.center, self.half = (high + low) / 2.0, (high - low) / 2.0
        self._safe_half = np.where(self.half > 0, self.half, 1.0)

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        a = self.center + self.half * np.clip(np.asarray(unit, np.float64).reshape(-1, self.dim), -1.0, 1.0)
        a = np.clip(a, self.space.low.reshape(-1), self.space.high.reshape(-1))
        return a.reshape(len(a), *self.space.shape).astype(self.space.dtype)

    def to_unit(self, act: np.ndarray) -> np.ndarray:
        act = np.asarray(act, np.float64).reshape(-1, self.dim)
        return ((act - self.center) / self._safe_half).astype(np.float32)


class MADDPGSeat:
    """One seat of a MADDPG: the decentralised actor of agent ``agent_id``.

    The trainer plays it like any agent (``act``); it learns through ``joint_learner`` (the
    MADDPG object), which receives the joint per-step rows of all seats. ``env_ids`` (passed by
    the collector, see ``accepts_env_ids``) names each row's env, whose own noise process explores.

    Example (``marl_note.agents.torch.MADDPG`` and ``marl_note.agents.tf.MADDPG`` are learners):
        >>> class Zeros(JointLearnerBase):  # a learner whose actors output zeros
        ...     def actor_outputs(self, agent, obs): return np.zeros((len(obs), self.act_dim[agent]))
        >>> m = Zeros({"a": gym.spaces.Box(-1, 1, (3,))}, {"a": gym.spaces.Discrete(2)}, **Zeros.DEFAULTS)
        >>> seat = m.seat_agents()[0]
        >>> seat.agent_id, seat.act(np.zeros((4, 3)), explore=True).shape, seat.joint_learner is m
        ('a', (4,), True)
    """

    accepts_env_ids = True

    def __init__(self, learner: Any, agent_id: str):
        self.joint_learner = learner
        self.agent_id = agent_id
        self.observation_space = learner.observation_spaces[agent_id]
        self.action_space = learner.action_spaces[agent_id]

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False,
            env_ids: np.ndarray | None = None) -> np.ndarray:
        return self.joint_learner.act_agent(self.agent_id, obs, mask, explore, env_ids)

    def __repr__(self) -> str:
        return f"MADDPGSeat({self.agent_id!r}, {self.action_space})"


class JointLearnerBase(Saving):
    """Numpy side of MADDPG (see :class:`marl_note.agents.torch.MADDPG` for the algorithm).

    Holds the agents' spaces and encodings, the exploration state (a Gumbel-max policy per
    Discrete agent; per Box agent a :class:`~marl_note.agents.env_noise.PerEnvNoise`, one copy of
    its noise process per env), the joint replay, the counters and ``rng``.
    A backend builds its networks after calling ``__init__`` and implements ``actor_outputs``,
    ``learn``, ``_net_state`` and ``_load_net_state``. Backend subclasses get ``save(path)`` /
    ``MADDPG.restore(path)`` from :class:`~marl_note.agents.saving.Saving`: the dicts of spaces are
    written to the manifest (``saving_spaces``), so a checkpoint restores in either backend.

    Example:
        >>> class Zeros(JointLearnerBase):  # a learner whose actors output zeros
        ...     def actor_outputs(self, agent, obs): return np.zeros((len(obs), self.act_dim[agent]))
        >>> m = Zeros({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Box(0, 1, (3,))}, **Zeros.DEFAULTS)
        >>> m.act_dim, m.act_agent("a", np.zeros((1, 2))).tolist()
        ({'a': 3}, [[0.5, 0.5, 0.5]])
    """

    saving_spaces = ("observation_spaces", "action_spaces")

    DEFAULTS = dict(gamma=0.95, tau=0.01, buffer_size=100_000, learning_starts=1024, replay_ratio=0.05,
                    update_steps=None, temperature=1.0, noise_sigma=0.1, noise=None, action_reg=1e-3,
                    max_grad_norm=0.5, centralized_critic=True, MARL=None, reward_done_func_ma=None, seed=None)

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 gamma: float, tau: float, buffer_size: int, learning_starts: int, replay_ratio: float,
                 update_steps: int | None, temperature: float, noise_sigma: float, noise: Mapping[str, Any] | None,
                 action_reg: float, max_grad_norm: float | None, centralized_critic: bool, MARL: bool | None,
                 reward_done_func_ma: Callable | None, seed: int | None):
        if not isinstance(observation_spaces, Mapping) or not isinstance(action_spaces, Mapping):
            raise TypeError("MADDPG takes dicts {agent: space} of observation and action spaces "
                            "(MADDPG.from_trainer(trainer) builds them)")
        self.agents = tuple(observation_spaces)
        if not self.agents or set(self.agents) != set(action_spaces):
            raise ValueError(f"observation and action spaces must cover the same non-empty agents, got "
                             f"{list(observation_spaces)} and {list(action_spaces)}")
        self.observation_spaces = {a: observation_spaces[a] for a in self.agents}
        self.action_spaces = {a: action_spaces[a] for a in self.agents}
        self.obs_dim, self.act_dim, self.discrete, self.scalers = {}, {}, {}, {}
        for a in self.agents:
            space = self.action_spaces[a]
            if not isinstance(self.observation_spaces[a], gym.Space) or not isinstance(space, gym.Space):
                raise TypeError(f"agent {a!r}: spaces must be gymnasium spaces")
            self.obs_dim[a] = flat_obs_dim(self.observation_spaces[a])
            if isinstance(space, gym.spaces.Discrete):
                self.discrete[a], self.act_dim[a] = True, int(space.n)
            elif isinstance(space, gym.spaces.Box):
                self.scalers[a] = BoxScaler(space)
                self.discrete[a], self.act_dim[a] = False, self.scalers[a].dim
            else:
                raise TypeError(f"MADDPG handles Discrete and Box actions; agent {a!r} has {space!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        if int(learning_starts) < 0 or replay_ratio < 0 or (update_steps is not None and int(update_steps) < 0):
            raise ValueError("learning_starts, replay_ratio and update_steps must be non-negative")
        if temperature <= 0 or action_reg < 0 or noise_sigma < 0:
            raise ValueError(f"need temperature > 0, action_reg >= 0 and noise_sigma >= 0, got "
                             f"{temperature}, {action_reg}, {noise_sigma}")
        if reward_done_func_ma is not None and not callable(reward_done_func_ma):
            raise TypeError(f"reward_done_func_ma must be callable, got {type(reward_done_func_ma).__name__}")
        unknown = set(noise or {}) - set(self.agents)
        if unknown:
            raise ValueError(f"noise names unknown agents {sorted(unknown)}")
        self.gamma, self.tau, self.temperature = float(gamma), float(tau), float(temperature)
        self.learning_starts, self.replay_ratio = int(learning_starts), float(replay_ratio)
        self.update_steps = None if update_steps is None else int(update_steps)
        self.action_reg, self.max_grad_norm = float(action_reg), max_grad_norm
        self.centralized_critic = bool(centralized_critic if MARL is None else MARL)
        self.reward_done_func_ma = reward_done_func_ma
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.init_seed = int(self.rng.integers(0, 2**63 - 1))  # seeds the backend's weight initialisation
        self.replay = JointReplayBuffer(buffer_size, self.agents, self.observation_spaces, self.action_spaces,
                                        seed=int(self.rng.integers(0, 2**63 - 1)))
        self.policies = {a: GumbelSoftmaxPolicy(temperature) for a in self.agents if self.discrete[a]}
        self.noise: dict[str, PerEnvNoise] = {}
        for a in self.agents:
            if not self.discrete[a]:
                seed = int(self.rng.integers(0, 2**63 - 1))
                process = (noise or {}).get(a) or GaussianWhiteNoiseProcess(
                    sigma=float(noise_sigma), size=(self.act_dim[a],), seed=seed)
                if not callable(getattr(process, "sample", None)):
                    raise TypeError(f"noise[{a!r}] must be a process with sample(), got {type(process).__name__}")
                self.noise[a] = PerEnvNoise(process, self.act_dim[a], seed)
        self.agent_steps = self.updates = self._new_rows = 0
        self._seats = [MADDPGSeat(self, a) for a in self.agents]

    @classmethod
    def from_trainer(cls, trainer: Any, **hyperparameters):
        """An instance over ``trainer.possible_agents`` with the trainer's spaces."""
        agents = list(trainer.possible_agents)
        return cls({a: trainer.observation_space(a) for a in agents},
                   {a: trainer.action_space(a) for a in agents}, **hyperparameters)

    def seat_agents(self) -> list[MADDPGSeat]:
        """One actor per agent, in ``possible_agents`` order: ``trainer.train(m.seat_agents(), ...)``."""
        return list(self._seats)

    def critic_input_dim(self, agent: str) -> int:
        if self.centralized_critic:
            return sum(self.obs_dim.values()) + sum(self.act_dim.values())
        return self.obs_dim[agent] + self.act_dim[agent]

    # -- acting ------------------------------------------------------------------------------------
    def actor_outputs(self, agent: str, obs: Any) -> np.ndarray:
        """Actor output ``[B, act_dim]``: logits (Discrete) or tanh units in [-1, 1] (Box)."""
        raise NotImplementedError

    def act_agent(self, agent: str, obs: Any, mask: np.ndarray | None = None, explore: bool = False,
                  env_ids: np.ndarray | None = None) -> np.ndarray:
        """Agent ``agent``'s actions: Gumbel-max sample / argmax (Discrete), noisy / plain (Box).

        Exploring Box noise for row ``k`` comes from env ``env_ids[k]``'s process (row ``k`` is env
        ``k`` when ``env_ids`` is None)."""
        if agent not in self.discrete:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        out = self.actor_outputs(agent, obs)
        if self.discrete[agent]:
            if mask is not None:
                mask = np.asarray(mask)
                if mask.shape != out.shape:
                    raise ValueError(f"mask has shape {mask.shape}, expected {out.shape} (batch, num_actions)")
                mask = mask.astype(bool)
            a = self.policies[agent].select(out, mask, self.rng) if explore else masked_argmax(out, mask)
            return a + int(self.action_spaces[agent].start)
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
            joint = dataclasses.replace(joint, rew=rew, terminated=term,
                                        truncated=np.asarray(joint.truncated, bool) & ~term)
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

    # -- learning ----------------------------------------------------------------------------------
    def prepare_batch(self, batch: JointTransitions) -> dict[str, Any]:
        """Float32 numpy inputs of one gradient step; agents not alive in a row are zeros.

        Per agent (lists in agent order): ``obs``, ``act`` (one-hot / [-1, 1]), ``next_obs`` (zero
        where the agent is gone at the next step: not alive or terminated), ``gumbel`` (the noise
        of the relaxed sample, drawn here from ``rng``; zeros for Box agents), ``temperature`` and
        ``mask`` / ``next_mask`` (1.0 = legal, all ones without masks, for Box agents and where a row
        allows nothing); joint ``[B, n]``: ``rew``, ``terminated``, ``alive``, ``next_live``.
        """
        alive = np.asarray(batch.alive, bool)
        next_live = alive & ~np.asarray(batch.terminated, bool)
        keys = ("obs", "act", "next_obs", "gumbel", "temperature", "mask", "next_mask")
        out: dict[str, Any] = {k: [] for k in keys}
        for j, a in enumerate(self.agents):
            live, nlive = alive[:, j:j + 1].astype(np.float32), next_live[:, j:j + 1].astype(np.float32)
            out["obs"].append(encode_obs(self.observation_spaces[a], batch.obs[a], f"obs[{a!r}]") * live)
            out["next_obs"].append(encode_obs(self.observation_spaces[a], batch.next_obs[a], f"next_obs[{a!r}]") * nlive)
            out["act"].append(self._encode_act(a, batch.act[a], alive[:, j]) * live)
            shape = (len(alive), self.act_dim[a])
            if self.discrete[a]:
                out["gumbel"].append(self.rng.gumbel(size=shape).astype(np.float32))
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
            idx = np.where(alive, act.astype(np.int64) - int(self.action_spaces[agent].start), 0)
            if np.any((idx < 0) | (idx >= self.act_dim[agent])):
                raise ValueError(f"stored actions of agent {agent!r} lie outside {self.action_spaces[agent]}")
            out = np.zeros((n, self.act_dim[agent]), np.float32)
            out[np.arange(n), idx] = 1.0
            return out
        return self.scalers[agent].to_unit(act)

    def learn(self, batch: JointTransitions) -> dict[str, float]:
        raise NotImplementedError

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        new, self._new_rows = self._new_rows, 0
        return run_update_schedule(self, batch_size, lambda b: self.learn(self.replay.sample(b)), new=new)

    # -- state -------------------------------------------------------------------------------------
    NETWORKS = ("actor", "critic", "actor_target", "critic_target")

    def param_keys(self, state: Mapping[str, Any] | None = None) -> list[str]:
        """The state_dict keys that are network weights (``<agent>.<network>.*``), for ``save_param``."""
        state = self.state_dict() if state is None else state
        return sorted(k for k in state if len(parts := k.split(".", 2)) == 3 and parts[0] in self.agents
                      and parts[1] in self.NETWORKS)

    def _net_state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _load_net_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, optimiser slots, counters, exploration and rng states under flat dotted keys
        (``<agent>.actor.0.weight``, ``<agent>.critic_optimizer.0.exp_avg``, ``rng``, ...); the
        replay has its own ``replay.state_dict()``."""
        out = self._net_state()
        out.update({"agent_steps": np.asarray(self.agent_steps, np.int64),
                    "updates": np.asarray(self.updates, np.int64),
                    "new_transitions": np.asarray(self._new_rows, np.int64), "rng": rng_state_to_array(self.rng)})
        for a, policy in self.policies.items():
            out.update({f"{a}.policy.{k}": np.asarray(v) for k, v in policy.state_dict().items()})
        for a, noise in self.noise.items():
            if callable(getattr(noise, "state_dict", None)):
                out.update({f"{a}.noise.{k}": np.asarray(v) for k, v in noise.state_dict().items()})
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("agent_steps", "updates", "rng") if k not in state]
        if missing:
            raise KeyError(f"state_dict is missing {missing}")
        self._load_net_state(state)
        self.agent_steps = int(np.asarray(state["agent_steps"]))
        self.updates = int(np.asarray(state["updates"]))
        self._new_rows = int(np.asarray(state.get("new_transitions", 0)))
        rng_state_from_array(self.rng, state["rng"])
        for a, policy in self.policies.items():
            own = {k[len(a) + 8:]: v for k, v in state.items() if k.startswith(f"{a}.policy.")}
            if own:
                policy.load_state_dict(own)
        for a, noise in self.noise.items():
            own = {k[len(a) + 7:]: v for k, v in state.items() if k.startswith(f"{a}.noise.")}
            if own and callable(getattr(noise, "load_state_dict", None)):
                noise.load_state_dict(own)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(agents={list(self.agents)}, centralized_critic={self.centralized_critic}, "
                f"rows={len(self.replay)}, updates={self.updates})")
