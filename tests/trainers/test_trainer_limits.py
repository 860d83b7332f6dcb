"""The trainer refuses absurd counts, envs that cannot fit in memory and pool shards that cannot, before building."""

import pytest

from marl_note.contrib.pool import options as pool_options
from marl_note.replay import InsufficientMemoryError, memory
from marl_note.trainers import DecentralizedTrainer


@pytest.fixture
def eight_gb(monkeypatch):
    """8 GB of available memory (and of free /dev/shm), whatever the machine has."""
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 10**9)
    monkeypatch.setattr(pool_options, "_shm_free_bytes", lambda: 8 * 10**9)


class CountingFactory:
    """A CartPole factory that counts the envs it built."""

    def __init__(self):
        self.built = 0

    def __call__(self):
        import gymnasium as gym

        self.built += 1
        return gym.make("CartPole-v1")


@pytest.mark.parametrize("name", ["episodes_per_train", "episodes_per_test", "test_freq", "update_freq", "batch_size",
                                  "num_train_envs", "num_test_envs"])
def test_counts_beyond_a_trillion_are_refused_before_any_env_is_built(name):
    make = CountingFactory()
    with pytest.raises(ValueError, match=f"{name} must be at most 1,000,000,000,000, got {2**80}"):
        DecentralizedTrainer(make, **{name: 2**80})
    assert make.built == 0


def test_envs_that_cannot_fit_are_refused_before_any_env_is_built(eight_gb):
    make = CountingFactory()
    with pytest.raises(InsufficientMemoryError, match=r"num_train_envs=100000000 and num_test_envs=16: holding "
                                                      r"100,000,016 envs .* only 8 GB .*use fewer envs"):
        DecentralizedTrainer(make, num_train_envs=100_000_000)
    assert make.built == 0
    with pytest.raises(InsufficientMemoryError, match=r"1,000 worker processes .*use fewer envs or fewer worker"):
        DecentralizedTrainer(make, num_train_envs=1000, num_test_envs=1000, processes=500)
    assert make.built == 0
    DecentralizedTrainer(make, num_train_envs=1000, num_test_envs=1000).close()  # 2000 CartPoles fit in 8 GB
    assert make.built == 1  # the probe alone: the vector envs are built when training starts


def test_pool_shards_that_cannot_fit_are_refused_before_any_actor_starts(eight_gb, no_leftovers):
    torch = pytest.importorskip("torch")  # noqa: F841
    from marl_note.agents.torch import DQN

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=16,
                                   episodes_per_train=4, test_freq=2, episodes_per_test=2, seed=0, actors=2,
                                   pool={"shard_capacity": 10**9})
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(8,), seed=0)
    try:
        with pytest.raises(InsufficientMemoryError, match=r"pool shard_capacity=1000000000 rows in each of 2 shards "
                                                          r"\(2 actors x 1 learner, .* needs .* only 8 GB .*lower "
                                                          r"shard_capacity \(at most about \d+ rows fit\)"):
            trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    finally:
        trainer.close()
