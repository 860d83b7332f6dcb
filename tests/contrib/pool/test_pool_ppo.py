"""PPO through the pool: the synchronous variant (one round per actor with the current weights, then
the learner updates and republishes)."""

import numpy as np
import pytest

from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.callbacks import LambdaCallback

torch = pytest.importorskip("torch")
from marl_note.agents.torch import PPO  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def ppo_chunks(actors, chunks=6, pool=None):
    """``chunks`` collection chunks of PPO on CartPole; per chunk, the rollout the update starts from."""
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=4, num_test_envs=1, update_freq=64,
                                   episodes_per_train=10_000, test_freq=10_000, episodes_per_test=1, batch_size=64,
                                   seed=0, actors=actors, pool=pool)
    agent = PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
                n_steps=128, n_epochs=2, seed=0)
    seen = []

    def before_update(batch, logs):
        data = agent.rollout.get()
        seen.append((len(data), data.obs.shape, data.act.shape, data.rew.shape, np.unique(data.stream).tolist()))

    def count(metrics, episodes):
        trainer.stop_training = len(seen) >= chunks

    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False,
                          callbacks=[LambdaCallback(on_batch_begin=before_update, on_update_end=count)])
    return trainer, agent, seen, stats


def test_synchronous_ppo_rounds_match_the_in_process_collector_and_act_with_the_current_weights(no_leftovers):
    _, _, expected, _ = ppo_chunks(actors=None)
    trainer, agent, seen, stats = ppo_chunks(actors=2)
    assert seen == expected  # the same rollout rows (count, shapes, streams) per update as in process
    assert agent.updates > 0 and stats["pool"]["published_versions"] == [agent.updates]
    lag = [v for _, v in trainer.run_state.series["policy_lag"].values()]
    assert lag and max(lag) == 0  # every round collected with the weights of the update before it
    assert stats["pool"]["actor_frameworks"] == []
