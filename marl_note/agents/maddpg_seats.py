"""What MADDPG's trainer and replay see of it, numpy only: the seats, Box action scaling and the
check of the ``{agent: space}`` dicts it is built from.

A MADDPG is one learner over all agents; the trainer plays its :class:`MADDPGSeat` objects, one
per agent, which act through it and hand it nothing (the collector gives the learner the joint
rows). :class:`~marl_note.agents.spaces.ActionScaler` maps a ``tanh`` actor's ``[-1, 1]`` outputs to
a Box's bounds and stored actions back.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["MADDPGSeat", "check_agent_spaces", "image_observation"]


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


def check_agent_spaces(observation_spaces: Any, action_spaces: Any) -> tuple[str, ...]:
    """The agents of two ``{agent: space}`` dicts over the same agents, or a TypeError/ValueError."""
    if not isinstance(observation_spaces, Mapping) or not isinstance(action_spaces, Mapping):
        raise TypeError("MADDPG takes dicts {agent: space} of observation and action spaces "
                        "(MADDPG.from_trainer(trainer) builds them)")
    agents = tuple(observation_spaces)
    if not agents or set(agents) != set(action_spaces):
        raise ValueError(f"observation and action spaces must cover the same non-empty agents, got "
                         f"{list(observation_spaces)} and {list(action_spaces)}")
    for a in agents:
        obs, act = observation_spaces[a], action_spaces[a]
        if not isinstance(obs, gym.Space) or not isinstance(act, gym.Space):
            raise TypeError(f"agent {a!r}: spaces must be gymnasium spaces")
        if not isinstance(act, (gym.spaces.Discrete, gym.spaces.Box)):
            raise TypeError(f"MADDPG handles Discrete and Box actions; agent {a!r} has {act!r}")
        if image_observation(obs):
            raise ValueError(f"MADDPG has no conv torso yet and would flatten every pixel into each centralised "
                             f"critic: agent {a!r} observes images {obs}. Use PPO, DDPG or SAC (they read images "
                             f"through a conv torso), or make the observation small and flat first (SuperSuit's "
                             f"resize_v1 / color_reduction_v0, then gymnasium.spaces.flatten)")
    return agents


def image_observation(space: gym.Space) -> bool:
    """Whether ``space`` is image-shaped: the encoder's ``torso="auto"`` would read it with a conv torso.

    Example:
        >>> import numpy as np
        >>> image_observation(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8))
        True
        >>> image_observation(gym.spaces.Box(-1, 1, (18,)))
        False
    """
    from marl_note.agents.encoders import ObsEncoder

    try:
        return ObsEncoder(space).torso == "conv"
    except (TypeError, ValueError):  # not an observation space the encoder reads: checked elsewhere
        return False
