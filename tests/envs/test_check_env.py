"""check_env (issue 29, item 6): real envs of every kind pass it, and it catches envs that break the
canonical contract (small broken envs defined here), naming the env, the agent and the problem."""
import functools

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo import ParallelEnv
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from marl_note.envs.checks import EnvCheckError, check_env


@pytest.mark.parametrize("env, agents, turn_based, masks", [
    (tictactoe_v3.env, ("player_1", "player_2"), True, True),
    (connect_four_v3.env, ("player_0", "player_1"), True, True),
    (tictactoe_v3, ("player_1", "player_2"), True, True),  # a PettingZoo module, as the trainer takes it
    (simple_spread_v3.parallel_env, ("agent_0", "agent_1", "agent_2"), False, False),
    (functools.partial(simple_spread_v3.env, max_cycles=10), ("agent_0", "agent_1", "agent_2"), True, False),
    ("CartPole-v1", ("agent_0",), False, False),
    ("Pendulum-v1", ("agent_0",), False, False),
    (lambda: gym.make("CartPole-v1"), ("agent_0",), False, False),
])
def test_real_envs_pass(env, agents, turn_based, masks):
    report = check_env(env, episodes=2)
    assert (report.agents, report.turn_based, report.has_action_mask, report.episodes) == \
        (agents, turn_based, masks, 2)
    assert all(n > 0 for n in report.lengths)


def test_an_env_instance_passes_and_is_left_open():
    env = tictactoe_v3.env()
    check_env(env, episodes=1)
    env.reset(seed=1)  # still usable: check_env closes only the envs it made


class OneAgentEnv(gym.Env):
    """A small valid env; subclasses break one rule each."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)
    length = 5

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs(), self.info()

    def obs(self):
        return self.np_random.uniform(-1, 1, 3).astype(np.float32)

    def info(self):
        return {}

    def reward(self):
        return 1.0

    def step(self, action):
        assert self.action_space.contains(action)
        self.t += 1
        return self.obs(), self.reward(), self.t >= self.length, False, self.info()


class WrongShape(OneAgentEnv):
    def obs(self):
        return np.zeros(4 if self.t == 2 else 3, np.float32)


class OutOfBounds(OneAgentEnv):
    def obs(self):
        return np.full(3, 1.5 if self.t == 3 else 0.0, np.float32)


class NaNObservation(OneAgentEnv):
    def obs(self):
        return np.full(3, np.nan if self.t == 1 else 0.0, np.float32)


class NaNReward(OneAgentEnv):
    def reward(self):
        return float("nan") if self.t == 2 else 0.0


class UnseededReset(OneAgentEnv):
    rng = np.random.default_rng()

    def obs(self):
        return self.rng.uniform(-1, 1, 3).astype(np.float32)


class UnseededSteps(OneAgentEnv):
    """Same first observation for a seed, but the steps draw from an unseeded generator."""

    rng = np.random.default_rng()

    def obs(self):
        return np.zeros(3, np.float32) if self.t == 0 else self.rng.uniform(-1, 1, 3).astype(np.float32)


class NeverEnds(OneAgentEnv):
    length = 10**9


class NoLegalAction(OneAgentEnv):
    def info(self):
        mask = np.ones(3, np.int8)
        if self.t == 2:
            mask[:] = 0
        return {"action_mask": mask}


class MaskOfTheWrongSize(OneAgentEnv):
    def info(self):
        return {"action_mask": np.ones(4 if self.t == 1 else 3, np.int8)}


class LateMasks(OneAgentEnv):
    """Declares no masks at its first reset, then gives one."""

    def info(self):
        return {"action_mask": np.ones(3, np.int8)} if self.t == 2 else {}


class TwoAgents(ParallelEnv):
    """A small valid Parallel env; subclasses break one rule each."""

    metadata = {"name": "two_agents"}
    possible_agents = ["a", "b"]

    def observation_space(self, agent):
        return gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        live = self.live()
        done = self.t >= 4
        obs = {a: np.zeros(2, np.float32) for a in live}
        out = (obs, dict.fromkeys(live, 0.0), dict.fromkeys(live, done), dict.fromkeys(live, False),
               {a: {} for a in live})
        self.agents = [] if done else live
        return out

    def live(self):
        return list(self.agents)


class DropsAnAgent(TwoAgents):
    """Agent b leaves after the first step without being reported terminated or truncated."""

    def live(self):
        return ["a"] if self.t >= 2 else list(self.agents)


class ActsForAGhost(TwoAgents):
    def step(self, actions):
        obs, rew, term, trunc, infos = super().step(actions)
        obs["ghost"] = np.zeros(2, np.float32)
        return obs, rew, term, trunc, infos


@pytest.mark.parametrize("env, message", [
    (WrongShape, r"check_env\(WrongShape\): agent 'agent_0': step 2 \(after reset\(seed=0\)\) observation has shape "
                 r"\(4,\), but its space is Box"),
    (OutOfBounds, r"agent 'agent_0': step 3 .* observation has 1.5 at \(0,\), outside its space's bounds "
                  r"\[-1.0, 1.0\]"),
    (NaNObservation, r"agent 'agent_0': step 1 .* observation is not finite"),
    (NaNReward, r"agent 'agent_0': step 2 .* reward is nan; rewards must be finite numbers"),
    (UnseededReset, r"agent 'agent_0': reset\(seed=0\) gives another observation the second time: the same seed "
                    r"must give the same episode"),
    (UnseededSteps, r"agent 'agent_0': step 1 after reset\(seed=0\) with the same actions gives another observation"),
    (NeverEnds, r"check_env\(NeverEnds\): an episode from reset\(seed=0\) did not end within 50 steps"),
    (NoLegalAction, r"agent 'agent_0': step 2 .* action mask allows no legal action"),
    (MaskOfTheWrongSize, r"agent 'agent_0': step 1 .* action mask is bool \(4,\), expected bool \(3,\)"),
    (LateMasks, r"agent 'agent_0': step 2 .* gives an action mask, but the env declared none at its first reset"),
    (DropsAnAgent, r"check_env\(two_agents\): agent 'b': step 2 .* neither asks it to act again nor reports it "
                   r"terminated or truncated"),
    (ActsForAGhost, r"check_env\(two_agents\): step 1 .*'ghost', which is not (one of the env's agents|in its "
                    r"possible_agents)"),  # (the adapter itself refuses it too)
])
def test_check_env_catches_an_env_that_breaks_the_contract(env, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(env, max_steps=50)


def test_the_broken_envs_base_classes_pass():
    """The rules above are each broken by one change: without it the same envs pass."""
    assert check_env(OneAgentEnv).lengths == [5, 5, 5]
    assert check_env(TwoAgents).agents == ("a", "b")


def test_bad_arguments_and_unsupported_envs_are_refused():
    with pytest.raises(ValueError, match="episodes must be a positive integer, got 0"):
        check_env("CartPole-v1", episodes=0)
    with pytest.raises(ValueError, match="unknown Gymnasium env id 'NoSuchEnv-v0'"):
        check_env("NoSuchEnv-v0")

    class MaskedBoxActions(OneAgentEnv):
        action_space = gym.spaces.Box(-1, 1, (2,))

        def info(self):
            return {"action_mask": np.ones(2, np.int8)}

    with pytest.raises(EnvCheckError, match=r"check_env\(MaskedBoxActions\): agent 'agent_0' has an action mask but a "
                                            r"Box action space"):
        check_env(MaskedBoxActions)
