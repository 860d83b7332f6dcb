"""ParallelFinder: candidates trained in spawned worker processes on a real env, ranked with best
reward, final loss and time; bad candidates refused before any process starts; no worker left."""
import multiprocessing

import pytest

from marl_note.trainers.parallel_finder import ParallelFinder

pytest.importorskip("torch")


def dqn_factory(trainer, lr=1e-3):
    from marl_note.agents.torch import DQN

    return DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
               learning_starts=32, lr=lr, seed=0)


def test_two_candidates_train_in_parallel_workers_and_are_ranked():
    finder = ParallelFinder(dqn_factory, [{"lr": 1e-3}, {"lr": 1e-2}], processes=2, timeout=300)
    result = finder.find("CartPole-v1", metric="loss", episodes_per_train=6, update_freq=16, episodes_per_test=2)
    assert sorted(row["index"] for row in result.rows) == [0, 1]
    for row in result.rows:
        assert row["time_s"] > 0 and row["episodes"] >= 6 and row["best_reward"] > 0
        assert row["final_loss"] == row["score"]  # metric="loss": the score is the final loss
    assert result.rows[0]["score"] <= result.rows[1]["score"]  # lower loss first
    assert not multiprocessing.active_children()


def test_bad_candidates_and_arguments_are_refused_in_the_parent():
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['learning_rate'\]"):
        ParallelFinder(dqn_factory, [{"learning_rate": 1e-3}])
    with pytest.raises(TypeError, match="takes a factory"):
        ParallelFinder("CartPole-v1", [{}])
    with pytest.raises(ValueError, match="metric"):
        ParallelFinder(dqn_factory, [{}]).find("CartPole-v1", metric="accuracy")
    assert not multiprocessing.active_children()
