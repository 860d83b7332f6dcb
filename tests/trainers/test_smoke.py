"""Short end-to-end runs of the trainer with the real PyTorch agents on real envs."""
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

torch = pytest.importorskip("torch")

from marl_note.agents import RandomAgent  # noqa: E402
from marl_note.agents.torch import DQN, PPO  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402


def test_tictactoe_selfplay_dqn_runs_and_beats_random():
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=8, num_test_envs=8, update_freq=64,
                                   test_freq=400, episodes_per_train=1200, episodes_per_test=50, seed=0,
                                   reward_metric=lambda r: r[:, 0].mean())
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0,
                  learning_starts=500, buffer_size=20_000)
    rand = RandomAgent(trainer.action_space("player_2"), seed=0)
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                          test_agents=[learner, rand])
    assert stats["num_gradient_steps"] > 500 and learner.updates == stats["num_gradient_steps"]
    # each self-play game's transitions reach the one shared learner once per seat move
    assert learner.agent_steps == pytest.approx(stats["num_collected_steps"], abs=8 * 9)
    res = trainer.test([learner, rand], episodes=100)
    assert res["rewards"].shape == (100, 2)
    # a random first player wins ~59% and loses ~29%; a trained one should clearly do better
    assert res["rewards"][:, 0].mean() > 0.5, res["rewards"][:, 0].mean()
    trainer.close()


def test_cartpole_ppo_runs_and_improves():
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=8, num_test_envs=8, update_freq=512,
                                   test_freq=10_000, episodes_per_train=150, episodes_per_test=8, seed=3)
    agent = PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=3, n_steps=512)
    before = trainer.test([agent])["reward"]
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert stats["num_gradient_steps"] > 0 and stats["num_collected_episodes"] >= 150
    after = trainer.test([agent])["reward"]
    assert after > max(2 * before, 150), (before, after)


def test_seeded_runs_are_identical():
    def run():
        trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=4, num_test_envs=4, update_freq=100,
                                       test_freq=10, episodes_per_train=30, episodes_per_test=4, seed=7)
        agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=7,
                    learning_starts=100)
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
        return stats["test_history"], stats["num_collected_steps"], agent.act(np.ones((1, 4), np.float32)).tolist()

    assert run() == run()
