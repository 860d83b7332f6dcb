"""Short learning checks that can fail: a few seconds each on a tiny deterministic task."""
import time

import gymnasium as gym
import numpy as np

from marl_note.agents.base import RandomAgent
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.torch import DQN, PPO
from tests.agents.torch.helpers import Corridor, greedy_return, train

OPTIMAL = 1.0 - 0.05 * 4  # Corridor(length=6)


def random_return(episodes=50):
    env, agent = Corridor(), RandomAgent(gym.spaces.Discrete(2), seed=0)
    rets = []
    for _ in range(episodes):
        obs, info = env.reset()
        total, done = 0.0, False
        while not done:
            obs, r, te, tr, info = env.step(int(agent.act(obs[None], info["action_mask"][None])[0]))
            total += r
            done = te or tr
        rets.append(total)
    return float(np.mean(rets))


def test_random_baseline_is_clearly_worse():
    assert random_return() < 0.3 < OPTIMAL


def test_dqn_learns_corridor():
    env = Corridor()
    agent = DQN(env.observation_space, env.action_space, seed=0, hidden_sizes=(32,), learning_starts=200,
                target_update=50, policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=1500))
    assert greedy_return(agent, Corridor()) < 0  # untrained: never arrives
    start = time.process_time()  # CPU seconds: the bound holds on a loaded machine too
    train(agent, Corridor, agent_steps=3000)
    assert time.process_time() - start < 20
    assert np.isclose(greedy_return(agent, Corridor()), OPTIMAL)


def test_ppo_learns_corridor():
    env = Corridor()
    agent = PPO(env.observation_space, env.action_space, seed=0, hidden_sizes=(32,), n_steps=256, n_epochs=4,
                lr=3e-3, ent_coef=0.01)
    start = time.process_time()  # CPU seconds: the bound holds on a loaded machine too
    train(agent, Corridor, agent_steps=6000)
    assert time.process_time() - start < 20
    assert np.isclose(greedy_return(agent, Corridor()), OPTIMAL)


class Target(gym.Env):
    """One-step continuous bandit: observe s in {-1, 1}, reward -(a - 0.5 s)^2."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = self.np_random.choice([-1.0, 1.0])
        return np.array([self.s], np.float32), {}

    def step(self, action):
        a = float(np.clip(action[0], -1, 1))
        return np.array([self.s], np.float32), -(a - 0.5 * self.s) ** 2, True, False, {}


def test_ppo_learns_continuous_target():
    agent = PPO(Target.observation_space, Target.action_space, seed=0, hidden_sizes=(16,), n_steps=256,
                n_epochs=5, lr=3e-3, log_std_init=-1.0)
    train(agent, Target, agent_steps=5000)
    mean = agent.act(np.array([[-1.0], [1.0]], np.float32))[:, 0]
    np.testing.assert_allclose(mean, [-0.5, 0.5], atol=0.15)
