"""Tiny scripted PettingZoo envs whose correct per-agent transitions are known by hand."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector


class NimEnv(AECEnv):
    """Players alternately take 1 (action 0) or 2 (action 1) stones; taking the last stone wins.

    Observation: [stones left, turns played]; the mask forbids taking more than is left.
    The game is truncated after ``max_turns`` turns.
    """

    metadata = {"name": "nim_v0", "is_parallelizable": False}

    def __init__(self, stones: int = 3, max_turns: int = 100, players: int = 2):
        super().__init__()
        self.start_stones, self.max_turns = stones, max_turns
        self.possible_agents = [f"player_{i}" for i in range(players)]
        self.observation_spaces = {a: gym.spaces.Dict({
            "observation": gym.spaces.Box(0, 1000, (2,), np.int64),
            "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)}) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def observe(self, agent):
        mask = np.array([self.stones >= 1, self.stones >= 2], np.int8)
        return {"observation": np.array([self.stones, self.turns], np.int64), "action_mask": mask}

    def reset(self, seed=None, options=None):
        self.stones, self.turns = self.start_stones, 0
        self.agents = self.possible_agents[:]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        take = int(action) + 1
        assert take <= self.stones, "illegal move reached the env"
        self.stones -= take
        self.turns += 1
        if self.stones == 0:
            for a in self.agents:
                self.rewards[a] = 1.0 if a == agent else -1.0 / (len(self.agents) - 1)
            self.terminations = dict.fromkeys(self.agents, True)
        elif self.turns >= self.max_turns:
            self.truncations = dict.fromkeys(self.agents, True)
        self._accumulate_rewards()
        self.agent_selection = self._selector.next()


class RaceEnv(ParallelEnv):
    """Two agents get +1 per step; ``a`` terminates after 2 steps, ``b`` is truncated after 3.

    Observation: [own steps]; actions are ignored.
    """

    metadata = {"name": "race_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b"]
        # one space object per agent, built once (PettingZoo asks for the same space on every call)
        self.observation_spaces = {a: self._make_observation_space() for a in self.possible_agents}
        self.action_spaces = {a: self._make_action_space() for a in self.possible_agents}

    def _make_observation_space(self):
        return gym.spaces.Box(0, 10, (1,), np.float32)

    def _make_action_space(self):
        return gym.spaces.Discrete(2)

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents[:]
        self.t = 0
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        rew = {a: 1.0 for a in self.agents}
        term = {a: (a == "a" and self.t == 2) for a in self.agents}
        trunc = {a: (a == "b" and self.t == 3) for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, {a: {} for a in obs}


class MaskedRaceEnv(RaceEnv):
    """RaceEnv with three actions and action masks in the observations (``Dict(observation,
    action_mask)``): at step ``t`` agent ``a`` may play anything but ``t % 3`` and agent ``b`` only
    ``t % 3``. Terminated/truncated agents' final observations carry their masks too; an illegal
    action fails an assertion inside the env.
    """

    metadata = {"name": "masked_race_v0"}

    def _make_observation_space(self):
        return gym.spaces.Dict({"observation": gym.spaces.Box(0, 10, (1,), np.float32),
                                "action_mask": gym.spaces.Box(0, 1, (3,), np.int8)})

    def _make_action_space(self):
        return gym.spaces.Discrete(3)

    @staticmethod
    def legal(agent, t):
        mask = np.zeros(3, bool) if agent == "b" else np.ones(3, bool)
        mask[t % 3] = agent == "b"
        return mask

    def _obs(self, agents):
        return {a: {"observation": np.array([self.t], np.float32), "action_mask": self.legal(a, self.t).astype(np.int8)}
                for a in agents}

    def reset(self, seed=None, options=None):
        super().reset(seed, options)
        return self._obs(self.agents), {a: {} for a in self.agents}

    def step(self, actions):
        for a, act in actions.items():
            assert self.legal(a, self.t)[int(act)], f"illegal action {act} of {a} at step {self.t}"
        _, rew, term, trunc, infos = super().step(actions)
        return self._obs(rew), rew, term, trunc, infos  # observations of the agents that just acted


class BoxRaceEnv(ParallelEnv):
    """Agents ``a`` and ``b`` with Box(-1, 1, (2,)) actions; every episode is truncated after
    ``length`` steps. Observation: [steps]; reward 0. ``actions`` records every joint action."""

    metadata = {"name": "box_race_v0"}

    def __init__(self, length: int = 3):
        self.possible_agents = ["a", "b"]
        self.length = length
        self.actions = []
        self.observation_spaces = {a: gym.spaces.Box(0, 100, (1,), np.float32) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Box(-1, 1, (2,), np.float32) for a in self.possible_agents}

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def reset(self, seed=None, options=None):
        self.agents, self.t = self.possible_agents[:], 0
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.actions.append(actions)
        self.t += 1
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        done = self.t >= self.length
        if done:
            self.agents = []
        return (obs, dict.fromkeys(obs, 0.0), dict.fromkeys(obs, False), dict.fromkeys(obs, done),
                {a: {} for a in obs})
