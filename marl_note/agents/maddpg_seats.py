"""What MADDPG's trainer and replay see of it, numpy only: the seats and Box action scaling.

A MADDPG is one learner over all agents; the trainer plays its :class:`MADDPGSeat` objects, one
per agent, which act through it and hand it nothing (the collector gives the learner the joint
rows). :class:`~marl_note.agents.spaces.ActionScaler` maps a ``tanh`` actor's ``[-1, 1]`` outputs to
a Box's bounds and stored actions back.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MADDPGSeat"]


class MADDPGSeat:
    """One seat of a MADDPG: the decentralised actor of agent ``agent_id``.

    The trainer plays it like any agent (``act``); it learns through ``joint_learner`` (the
    MADDPG object), which receives the joint per-step rows of all seats. ``env_ids`` (passed by
    the collector, see ``accepts_env_ids``) names each row's env, whose own noise process explores.

    Example:
        >>> import gymnasium as gym, numpy as np
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
