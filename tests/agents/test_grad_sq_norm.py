"""grad_sq_norm of PPO, DDPG, SAC and MADDPG in both backends (DQN's is in test_dqn_noise_scale.py):
the squared norm of the main loss's gradient, measured without changing any state, the same in
PyTorch and TensorFlow for the same weights and batch; and every core's noise-scale measurement."""
import importlib
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import Transitions
from tests.agents.maddpg_helpers import joint_batch

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
M_OBS = {"a": gym.spaces.Box(-1, 1, (4,), np.float32), "b": gym.spaces.Discrete(5)}
M_ACT = {"a": gym.spaces.Discrete(3, start=1), "b": gym.spaces.Box(np.float32(0), np.float32(2), (2,), np.float32)}


def cls(backend, name):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    return getattr(importlib.import_module(f"marl_note.agents.{backend}"), name)


def transitions(n, rng, action_space, stream=True):
    if isinstance(action_space, gym.spaces.Discrete):
        act = rng.integers(0, action_space.n, n)
    else:
        act = rng.uniform(-1, 1, (n, *action_space.shape)).astype(np.float32)
    return Transitions(obs=rng.normal(size=(n, 3)).astype(np.float32), act=act,
                       rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 3)).astype(np.float32),
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool),
                       stream=np.zeros(n, np.int64) if stream else None)


# (class name, constructor kwargs, action space); each trained by two update calls first
CASES = {
    "ppo": ("PPO", dict(n_steps=32, n_epochs=1), DISCRETE),
    "ppo_box": ("PPO", dict(n_steps=32, n_epochs=1, shared=True), ACT_BOX),
    "ddpg": ("DDPG", dict(learning_starts=32, update_steps=2), ACT_BOX),
    "sac": ("SAC", dict(learning_starts=32, update_steps=2), ACT_BOX),
    "sac_discrete": ("SAC", dict(learning_starts=32, update_steps=2), DISCRETE),
}


def trained(backend, case, seed=0):
    name, kw, act = CASES[case]
    agent = cls(backend, name)(BOX, act, hidden_sizes=(16,), seed=seed, **kw)
    rng = np.random.default_rng(1)
    for _ in range(2):
        agent.observe(transitions(32, rng, act))
        assert agent.update(batch_size=16)["gradient_steps"] > 0
    return agent


def trained_maddpg(backend, seed=0):
    m = cls(backend, "MADDPG")(M_OBS, M_ACT, hidden_sizes=(16,), learning_starts=32, update_steps=2, seed=seed)
    m.observe_joint(joint_batch(64, np.random.default_rng(1), M_OBS, M_ACT))
    assert m.update(batch_size=16)["gradient_steps"] == 2
    return m


def batch_for(case, n, rng):
    return transitions(n, rng, CASES[case][2])


def assert_unchanged(agent, before, version):
    after = agent.state_dict()
    assert sorted(after) == sorted(before)
    changed = [k for k in before if not np.array_equal(after[k], before[k])]
    assert not changed, changed
    assert agent.nets.version == version


@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize("case", [*CASES, "maddpg"])
def test_measuring_changes_no_weight_slot_counter_or_generator(backend, case):
    agent = trained_maddpg(backend) if case == "maddpg" else trained(backend, case)
    rng = np.random.default_rng(2)
    if case == "maddpg":
        small, big = joint_batch(8, rng, M_OBS, M_ACT), joint_batch(64, rng, M_OBS, M_ACT)
    else:
        small, big = batch_for(case, 8, rng), batch_for(case, 64, rng)
    before, version = agent.state_dict(), agent.nets.version
    value = agent.noise_scale.grad_sq_norm(big)
    b_simple = agent.noise_scale.measure_batches(small, big)
    assert math.isfinite(value) and value > 0 and not math.isnan(b_simple)
    assert agent.noise_scale.count == 1
    assert_unchanged(agent, before, version)


@pytest.mark.parametrize("case", [*CASES, "maddpg"])
def test_torch_and_tf_agree_on_the_squared_gradient_norm(case):
    if case == "maddpg":
        source, target = trained_maddpg("torch"), cls("tf", "MADDPG")(M_OBS, M_ACT, hidden_sizes=(16,), seed=0)
    else:
        name, kw, act = CASES[case]
        source, target = trained("torch", case), cls("tf", name)(BOX, act, hidden_sizes=(16,), seed=0, **kw)
    target.load_state_dict(source.state_dict())
    rng = np.random.default_rng(4)
    for n in (2, 8, 128):
        b = joint_batch(n, rng, M_OBS, M_ACT) if case == "maddpg" else batch_for(case, n, rng)
        assert target.noise_scale.grad_sq_norm(b) == pytest.approx(source.noise_scale.grad_sq_norm(b), rel=1e-4)


@pytest.mark.parametrize("case", ["ppo", "ddpg", "sac"])
def test_a_bigger_batch_has_a_smaller_expected_squared_norm(case):
    # E|G_B|^2 = |G|^2 + tr(Sigma)/B: averaged over batches, B=4 exceeds B=256
    agent = trained("torch", case)
    rng = np.random.default_rng(5)
    small = np.mean([agent.noise_scale.grad_sq_norm(batch_for(case, 4, rng)) for _ in range(20)])
    big = np.mean([agent.noise_scale.grad_sq_norm(batch_for(case, 256, rng)) for _ in range(20)])
    assert small > 2 * big


@pytest.mark.parametrize("case", ["ddpg", "ppo"])
def test_measure_noise_scale_draws_from_the_agents_own_data_without_moving_its_generator(case):
    name, kw, act = CASES[case]
    agent = cls("torch", name)(BOX, act, hidden_sizes=(16,), seed=0, **kw)
    assert agent.noise_scale.measure(4, 16, np.random.default_rng(0)) is None  # nothing stored
    agent.observe(transitions(32, np.random.default_rng(1), act))
    before, version = agent.state_dict(), agent.nets.version
    for _ in range(3):
        b = agent.noise_scale.measure(4, 16, np.random.default_rng(0))
    assert b is not None and not math.isnan(b) and agent.noise_scale.count == 3
    assert_unchanged(agent, before, version)
    assert len(agent.rollout if case == "ppo" else agent.replay) == 32
    with pytest.raises(ValueError, match="b_small"):
        agent.noise_scale.measure(16, 16)
