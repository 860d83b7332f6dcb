"""The original library's README examples, via agent.set() / agent.train(), in both backends (short budgets).

Named after the example: basic DQN (with the plots and the animation), DQN with early stopping,
periodic checkpointing with at most 2 files, save parameters only, save best only, PPO, DDPG + HER,
MADDPG, pool network.
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
        pytest.importorskip("torch")
        yield importlib.import_module("marl_note.compat.torch")
    else:
        pytest.importorskip("tensorflow")
        yield importlib.import_module("marl_note.compat.tf")


def test_basic_dqn(backend, tmp_path):
    model = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(32,), learning_starts=64,
                        seed=0)
    model.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10)
    stats = model.train(12, env="CartPole-v1", p=0, seed=0, test_freq=100)
    assert stats["num_collected_episodes"] >= 12 and model.updates == stats["num_gradient_steps"] > 0
    assert model.replay.capacity == 10000 and model.policy.eps == 0.01
    # the original example's visualize_* and animate_agent
    assert model.visualize_loss(str(tmp_path / "loss.png")).endswith("loss.png")
    assert model.visualize_reward(str(tmp_path / "reward.png")).endswith("reward.png")
    assert model.visualize_reward_loss(str(tmp_path / "both.png")).endswith("both.png")
    assert all((tmp_path / f).stat().st_size > 1000 for f in ("loss.png", "reward.png", "both.png"))
    movie = model.animate_agent(20, path=str(tmp_path / "cartpole.gif"))
    from PIL import Image

    with Image.open(movie.path) as gif:
        assert gif.n_frames == movie.frames == movie.steps + 1 and 1 <= movie.steps <= 20


def test_dqn_with_criterion_and_prioritized_replay(backend):
    model = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(32,), learning_starts=64,
                        seed=0)
    model.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10, trial_count=3, criterion=5,
              PR=True, initial_TD=7, alpha=0.7)
    assert isinstance(model.replay, PrioritizedReplayBuffer)
    stats = model.train(100, env="CartPole-v1", p=0, seed=0, test_freq=100)
    assert stats["num_collected_episodes"] < 100  # any 3 CartPole episodes average more than 5
    assert stats["early_stopping"]["stopped"] and stats["stopped_by_stop_training"]


def test_dqn_with_early_stopping_on_patience(backend):
    model = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(8,), learning_starts=10_000,
                        seed=0)  # never learns: the test metric cannot keep improving
    model.patience = 2
    stats = model.train(200, env="CartPole-v1", p=0, seed=0, test_freq=2)
    assert stats["early_stopping"]["stopped"] and stats["num_collected_episodes"] < 200


def _dqn(backend):
    return backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(16,), learning_starts=32,
                       seed=0).set(policy=EpsGreedyQPolicy(0.1), pool_size=2000, batch=32)


def test_periodic_checkpointing_with_at_most_two_files(backend, tmp_path):
    from marl_note.agents.checkpoints import read_checkpoint

    model = _dqn(backend)
    model.path, model.save_freq, model.max_save_files, model.save_last = str(tmp_path / "model"), 2, 2, False
    model.train(10, env="CartPole-v1", p=0, seed=0, test_freq=100)
    kept = sorted(d.name for d in (tmp_path / "model").iterdir() if d.is_dir())
    assert len(kept) == 2 and all(name.startswith("episode-") for name in kept)
    manifest, arrays = read_checkpoint(str(tmp_path / "model" / kept[-1]))
    assert manifest["kind"] == "marl_note.run" and any(k.endswith("q_net.0.weight") for k in arrays)


def test_save_parameters_only(backend, tmp_path):
    model = _dqn(backend)
    model.path, model.save_freq, model.save_param_only = str(tmp_path / "param"), 4, True
    model.train(8, env="CartPole-v1", p=0, seed=0, test_freq=100)
    last = sorted(d for d in (tmp_path / "param").iterdir() if d.name.startswith("last-episode-"))[-1]
    fresh = backend.DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(16,), seed=1)
    fresh.restore_param(str(last))
    weights = [k for k in model.state_dict() if k.startswith("q_net.")]
    assert weights and all((fresh.state_dict()[k] == model.state_dict()[k]).all() for k in weights)
    assert fresh.updates == 0  # weights only: no counters


def test_save_best_only(backend, tmp_path):
    model = _dqn(backend)
    model.path, model.save_best_only, model.save_last = str(tmp_path / "best"), True, False
    stats = model.train(12, env="CartPole-v1", p=0, seed=0, test_freq=3)
    dirs = [d.name for d in (tmp_path / "best").iterdir() if d.is_dir()]
    assert len(dirs) == 1 and dirs[0] == f"best-episode-{stats['best_episode']:06d}"


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
