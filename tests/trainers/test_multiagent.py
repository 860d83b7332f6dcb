"""Parameter sharing and heterogeneous seats on real MPE (mpe2) Parallel envs."""
import numpy as np
import pytest

mpe2 = pytest.importorskip("mpe2")
torch = pytest.importorskip("torch")
from mpe2 import simple_adversary_v3, simple_spread_v3  # noqa: E402

from marl_note.agents import RandomAgent  # noqa: E402
from marl_note.agents.torch import DQN, PPO  # noqa: E402
from marl_note.envs import with_agent_id  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402


def spread(**kw):
    return with_agent_id(lambda: simple_spread_v3.parallel_env(max_cycles=25, **kw))


def test_agent_id_feature_and_one_shared_policy_in_every_seat():
    trainer = DecentralizedTrainer(spread(), num_train_envs=2, num_test_envs=2, update_freq=100,
                                   test_freq=8, episodes_per_train=8, episodes_per_test=2, seed=0)
    assert trainer.observation_space("agent_2").shape == (21,)
    shared = PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0, n_steps=10_000)
    seen = []
    observe = shared.observe
    shared.observe = lambda t: (seen.append(t), observe(t))
    stats = trainer.train([shared] * 3, learning_mask=[1, 1, 1], plot=False, progress=False)
    t = seen[0]
    for part in seen[1:]:
        t = type(t).concatenate([t, part])
    # every seat's transition is stored exactly once: 3 agents act at every env step
    assert len(t) == stats["num_collected_agent_steps"] == 3 * stats["num_collected_steps"]
    ids = t.obs[:, -3:]
    assert np.array_equal(ids[np.arange(len(t)), t.stream % 3], np.ones(len(t)))  # stream seat == id feature
    assert shared.agent_steps == len(t)


def test_heterogeneous_seats_different_spaces_and_algorithms():
    trainer = DecentralizedTrainer(lambda: simple_adversary_v3.parallel_env(max_cycles=25), num_train_envs=2,
                                   num_test_envs=2, update_freq=50, test_freq=6, episodes_per_train=6,
                                   episodes_per_test=2, seed=0)
    adv, good = "adversary_0", "agent_0"
    assert trainer.observation_space(adv).shape != trainer.observation_space(good).shape
    adversary = PPO(trainer.observation_space(adv), trainer.action_space(adv), seed=0, n_steps=64)
    goods = DQN(trainer.observation_space(good), trainer.action_space(good), seed=0, learning_starts=32)
    stats = trainer.train([adversary, goods, goods], learning_mask=[1, 1, 1], plot=False, progress=False)
    assert adversary.updates > 0 and goods.updates > 0
    assert goods.agent_steps == 2 * adversary.agent_steps == 2 * stats["num_collected_steps"]
    with pytest.raises(ValueError, match="observation space"):
        trainer.train([goods, goods, goods], learning_mask=[0, 1, 1])
    res = trainer.test([RandomAgent(trainer.action_space(adv)), goods, goods], episodes=2)
    assert res["rewards"].shape == (2, 3)


def test_mixed_backends_in_one_game_tf_adversary_against_torch_agents():
    tf_agents = pytest.importorskip("marl_note.agents.tf")
    trainer = DecentralizedTrainer(lambda: simple_adversary_v3.parallel_env(max_cycles=25), num_train_envs=2,
                                   num_test_envs=2, update_freq=50, test_freq=4, episodes_per_train=4,
                                   episodes_per_test=2, seed=0)
    adv, good = "adversary_0", "agent_0"
    adversary = tf_agents.PPO(trainer.observation_space(adv), trainer.action_space(adv), seed=0, n_steps=64,
                              n_epochs=1)
    goods = PPO(trainer.observation_space(good), trainer.action_space(good), seed=0, n_steps=64, n_epochs=1)
    stats = trainer.train([adversary, goods, goods], learning_mask=[1, 1, 1], plot=False, progress=False)
    assert adversary.updates > 0 and goods.updates > 0
    assert goods.agent_steps == 2 * adversary.agent_steps == 2 * stats["num_collected_steps"]
