"""What MADDPG's trainer and replay see of it, numpy only: the seats and Box action scaling.

A MADDPG is one learner over all agents; the trainer plays its :class:`MADDPGSeat` objects, one
per agent, which act through it and hand it nothing (the collector gives the learner the joint
rows). :class:`BoxScaler` maps a ``tanh`` actor's ``[-1, 1]`` outputs to a Box's bounds and stored
actions back.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["BoxScaler", "MADDPGSeat"]


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

    Example:
        >>> from marl_note.agents.torch import MADDPG
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (3,))}, {"a": gym.spaces.Discrete(2)}, hidden_sizes=(4,), seed=0)
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
