"""The original library's README examples, via agent.set() / agent.train(), in both backends (short budgets).

Named after the example. Early stopping (criterion) and saving need EarlyStopping / CheckpointManager:
where this version lacks them, the example must say so with NotImplementedError before any work.
"""
import importlib
import multiprocessing

import gymnasium as gym
import pytest

from marl_note.agents import EpsGreedyQPolicy, GaussianWhiteNoiseProcess, SoftmaxPolicy
from marl_note.envs.goal_envs import PointReachEnv
from marl_note.replay import HERReplayBuffer, PrioritizedReplayBuffer

BACKENDS = ["torch", "tf"]
CARTPOLE = gym.make("CartPole-v1")


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "torch":
        torch = pytest.importorskip("torch")
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        yield importlib.import_module("marl_note.agents.torch")
        torch.set_num_threads(before)
    else:
        pytest.importorskip("tensorflow")
        yield importlib.import_module("marl_note.agents.tf")


def has(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def test_basic_dqn(backend):
    model = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(32,), learning_starts=64,
                        seed=0)
    model.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10)
    stats = model.train(12, env="CartPole-v1", p=0, seed=0, test_freq=100)
    assert stats["num_collected_episodes"] >= 12 and model.updates == stats["num_gradient_steps"] > 0
    assert model.replay.capacity == 10000 and model.policy.eps == 0.01


def test_dqn_with_criterion_and_prioritized_replay(backend):
    model = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(32,), learning_starts=64,
                        seed=0)
    model.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10, trial_count=3, criterion=5,
              PR=True, initial_TD=7, alpha=0.7)
    assert isinstance(model.replay, PrioritizedReplayBuffer)
    if not has("marl_note.trainers.callbacks", "EarlyStopping"):
        with pytest.raises(NotImplementedError, match="EarlyStopping"):
            model.train(100, env="CartPole-v1", p=0, seed=0, test_freq=100)
        assert model.agent_steps == 0
        return
    stats = model.train(100, env="CartPole-v1", p=0, seed=0, test_freq=100)
    assert stats["num_collected_episodes"] < 100  # any 3 CartPole episodes average more than 5


def test_ppo(backend):
    model = backend.PPO(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(32,), n_epochs=2, seed=0)
    model.set(policy=SoftmaxPolicy(), pool_size=10000, batch=64, update_steps=128, PPO=True)
    stats = model.train(12, env="CartPole-v1", p=0, seed=0, test_freq=100)
    assert model.cfg.n_steps == 128 and stats["num_gradient_steps"] > 0


def test_ddpg_her(backend):
    env = PointReachEnv()
    model = backend.DDPG(env.observation_space, env.action_space, hidden_sizes=(32,), learning_starts=64, seed=0)
    model.set(noise=GaussianWhiteNoiseProcess(sigma=0.2, size=2), pool_size=10000, batch=32, HER=True)
    stats = model.train(3, env=PointReachEnv, p=0, seed=0, test_freq=100)
    assert isinstance(model.replay, HERReplayBuffer) and len(model.replay) >= 150  # 3 whole episodes stored
    assert len(model.replay) + model.replay.num_pending == stats["num_collected_steps"]
    assert model.updates > 0
    model.set(trial_count=10, criterion=-5)
    if not has("marl_note.trainers.callbacks", "EarlyStopping"):
        with pytest.raises(NotImplementedError, match="EarlyStopping"):
            model.train(2, p=0)


def test_maddpg(backend):
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    make = lambda: simple_spread_v3.parallel_env(max_cycles=25)  # noqa: E731
    probe = make()
    model = backend.MADDPG({a: probe.observation_space(a) for a in probe.possible_agents},
                           {a: probe.action_space(a) for a in probe.possible_agents}, hidden_sizes=(16,),
                           learning_starts=32, seed=0)
    model.set(policy=SoftmaxPolicy(), pool_size=3000, batch=32, trial_count=10, MARL=True)
    stats = model.train(3, env=make, p=0, seed=0, test_freq=100)
    assert len(model.replay) == stats["num_collected_steps"] >= 75 and model.updates > 0


def test_pool_network(backend):
    model = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(32,), learning_starts=64,
                        seed=0)
    model.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_batches=17)
    stats = model.train(6, env="CartPole-v1", pool_network=True, processes=2, p=0, seed=0, test_freq=100)
    assert model.cfg.target_update == 17 and stats["num_collected_episodes"] >= 6 and model.updates > 0
    assert not multiprocessing.active_children()
