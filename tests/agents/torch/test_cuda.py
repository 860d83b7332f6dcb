"""The torch agents on a CUDA device: trained through the real trainer, saved, and restored on the CPU.

Skipped where torch sees no GPU (CI has none); run on a GPU machine with
``pytest tests/agents/torch/test_cuda.py``. ``MARL_NOTE_TEST_DEVICE`` names another device to run
them on (``cpu`` checks the tests themselves on a machine without one). Each test trains one
algorithm a few updates on a real env on the device, checks its weights stayed there, then moves
the checkpoint to the CPU (``restore(path, device="cpu")``) and back, and compares what the copies
compute on the same observations, also when acting through torch instead of the numpy copy.
"""
from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl_note.agents.torch import DDPG, DQN, PPO, SAC
from marl_note.contrib.alphazero.torch import AlphaZero
from marl_note.trainers import DecentralizedTrainer

DEVICE = os.environ.get("MARL_NOTE_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device")


def on(agent, device: str) -> bool:
    params = [p for m in agent.nets.modules.values() for p in m.parameters()]
    return bool(params) and all(p.device.type == torch.device(device).type for p in params)


def state_close(a, b, atol=1e-6):
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        np.testing.assert_allclose(np.asarray(sa[k], np.float64), np.asarray(sb[k], np.float64), atol=atol,
                                   err_msg=k)


def train(env_fn, agent_fn, episodes=6, **kw):
    trainer = DecentralizedTrainer(env_fn, num_train_envs=2, num_test_envs=1, test_freq=episodes,
                                   episodes_per_train=episodes, episodes_per_test=1, seed=0, **kw)
    try:
        agent = agent_fn(trainer)
        stats = trainer.train([agent] * len(trainer.possible_agents),
                              learning_mask=[1] * len(trainer.possible_agents),
                              plot=False, progress=False)
    finally:
        trainer.close()
    return agent, stats


def round_trip(agent, tmp_path, probe, mask=None, atol=1e-5):
    """Save the GPU agent, restore it on the CPU and again on the GPU; greedy acts agree everywhere."""
    path = tmp_path / "agent"
    agent.save(path)
    cpu = type(agent).restore(path, device="cpu")
    assert on(cpu, "cpu") and cpu.updates == agent.updates
    state_close(agent, cpu)
    back_path = tmp_path / "from_cpu"
    cpu.save(back_path)
    gpu = type(agent).restore(back_path, device=DEVICE)
    assert on(gpu, DEVICE)
    state_close(agent, gpu)
    # and acting through torch on the device rather than through the numpy copy of the weights
    framework = type(agent).restore(path, device=DEVICE, numpy_acting=False)
    assert framework.numpy_policy() is None
    acts = [np.asarray(a.act(probe, mask) if mask is not None else a.act(probe))
            for a in (agent, cpu, gpu, framework)]
    for other in acts[1:]:
        np.testing.assert_allclose(other, acts[0], atol=atol)
    return cpu


def test_dqn_with_prioritized_n_step_replay_and_its_noise_scale(tmp_path):
    def make(trainer):
        return DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(32,),
                   learning_starts=64, PR=True, num_steps=3, seed=0, device=DEVICE)

    agent, stats = train(lambda: gym.make("CartPole-v1"), make, batch_size=32, update_freq=4)
    assert on(agent, DEVICE) and agent.updates == stats["num_gradient_steps"] > 0
    priorities = agent.replay.priorities()
    assert np.isfinite(priorities).all() and priorities.max() > priorities.min()  # TD errors came back
    b_simple = agent.noise_scale.measure_batches(agent.replay.sample(16), agent.replay.sample(128))
    assert np.isfinite(b_simple) and agent.noise_scale.seconds is not None
    probe = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    round_trip(agent, tmp_path, probe)


def test_ppo_trains_and_its_policy_moves_between_devices(tmp_path):
    def make(trainer):
        return PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(32,),
                   n_steps=128, n_epochs=2, seed=0, device=DEVICE)

    agent, stats = train(lambda: gym.make("CartPole-v1"), make, batch_size=64, update_freq=64)
    assert on(agent, DEVICE) and agent.updates > 0
    probe = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    round_trip(agent, tmp_path, probe)


@pytest.mark.parametrize("cls", [DDPG, SAC])
def test_continuous_control_on_pendulum(tmp_path, cls):
    def make(trainer):
        return cls(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(32,),
                   learning_starts=100, seed=0, device=DEVICE)

    agent, stats = train(lambda: gym.make("Pendulum-v1", max_episode_steps=100), make, episodes=4,
                         batch_size=32, update_freq=8)
    assert on(agent, DEVICE) and agent.updates > 0
    assert all(np.isfinite(v).all() for v in agent.state_dict().values() if np.asarray(v).dtype.kind == "f")
    probe = np.random.default_rng(2).normal(size=(32, 3)).astype(np.float32)
    round_trip(agent, tmp_path, probe, atol=1e-4)


def test_conv_dqn_self_play_on_connect_four(tmp_path):
    from pettingzoo.classic import connect_four_v3

    def make(trainer):
        return DQN(trainer.observation_space("player_0"), trainer.action_space("player_0"), hidden_sizes=(32,),
                   torso="conv", learning_starts=32, seed=0, device=DEVICE)

    agent, stats = train(connect_four_v3.env, make, episodes=8, batch_size=32, update_freq=16)
    assert on(agent, DEVICE) and agent.updates > 0
    boards = np.random.default_rng(3).integers(0, 2, (16, 6, 7, 2)).astype(np.int8)
    masks = np.ones((16, 7), bool)
    masks[:, 3] = False
    cpu = round_trip(agent, tmp_path, boards, masks)
    assert (cpu.act(boards, masks) != 3).all()  # the mask holds on either device


def test_maddpg_on_simple_spread(tmp_path):
    from marl_note.agents.torch import MADDPG
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")

    trainer = DecentralizedTrainer(lambda: simple_spread_v3.parallel_env(max_cycles=25), num_train_envs=2,
                                   num_test_envs=1, batch_size=32, update_freq=25, test_freq=6,
                                   episodes_per_train=6, episodes_per_test=1, seed=0)
    try:
        m = MADDPG.from_trainer(trainer, hidden_sizes=(16,), learning_starts=64, seed=0, device=DEVICE)
        trainer.train(m.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
    finally:
        trainer.close()
    assert on(m, DEVICE) and m.updates > 0
    m.save(tmp_path / "maddpg")
    cpu = MADDPG.restore(tmp_path / "maddpg", device="cpu")
    assert on(cpu, "cpu")
    state_close(m, cpu)
    obs = {a: np.random.default_rng(4).normal(size=(8, 18)).astype(np.float32) for a in m.agents}
    for a, b in zip(m.seat_agents(), cpu.seat_agents()):
        np.testing.assert_allclose(b.act(obs[b.agent_id]), a.act(obs[a.agent_id]), atol=1e-5)


def test_alphazero_self_play_on_tictactoe(tmp_path):
    from pettingzoo.classic import tictactoe_v3

    def make(trainer):
        return AlphaZero(trainer.observation_space("player_1"), trainer.action_space("player_1"),
                         hidden_sizes=(16,), num_simulations=4, learning_starts=16, seed=0, device=DEVICE)

    agent, stats = train(tictactoe_v3.env, make, episodes=6, batch_size=16, update_freq=20)
    assert on(agent, DEVICE) and agent.updates > 0
    boards = np.zeros((4, 3, 3, 2), np.int8)
    masks = np.ones((4, 9), bool)
    cpu = round_trip(agent, tmp_path, boards, masks)
    np.testing.assert_allclose(cpu.predict(boards)[0], agent.predict(boards)[0], atol=1e-5)


def test_adaptive_batch_times_device_steps():
    """The time objective's cost split works on the device: its gradient passes are timed after the
    device finished them (the squared norms come back as floats), so a and c are positive."""
    from marl_note.contrib.adaptive import adabatch

    cb = adabatch({"min": 8, "max": 1024, "rate": 0.5}, num_samples=512, every=1)

    def make(trainer):
        return DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(256, 256),
                   learning_starts=256, seed=0, device=DEVICE)

    trainer = DecentralizedTrainer(lambda: gym.make("CartPole-v1"), num_train_envs=2, num_test_envs=1, batch_size=64,
                                   update_freq=4, test_freq=25, episodes_per_train=25, episodes_per_test=1, seed=0)
    try:
        agent = make(trainer)
        stats = trainer.train([agent], [True], callbacks=[cb], plot=False, progress=False)
    finally:
        trainer.close()
    a, c = cb.cost.coefficients()
    assert a > 0 and c >= 0 and stats["num_gradient_steps"] > 0
    assert cb.history["batch_size"].values() and np.isfinite(cb.estimator.b_simple)


@pytest.mark.skipif(DEVICE != "cuda", reason="checks CUDA's pick")
def test_device_auto_picks_the_gpu():
    agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0, device="auto")
    assert on(agent, "cuda")
