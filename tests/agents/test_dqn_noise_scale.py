"""DQN's gradient-noise-scale hook in both backends: |G_B|^2 measured without changing any state,
the same in PyTorch and TensorFlow for the same weights and batch, and B_simple on CartPole."""
import importlib
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def backend(name):
    pytest.importorskip("torch" if name == "torch" else "tensorflow")
    return importlib.import_module(f"marl_note.agents.{name}").DQN


@pytest.fixture(params=["torch", "tf"])
def DQN(request):
    return backend(request.param)


def batch(n, rng):
    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                       rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.3, truncated=np.zeros(n, bool))


def trained(DQN, **kw):
    """An agent after three Adam steps (non-zero optimiser slots), its replay filled."""
    agent = DQN(OBS, ACT, hidden_sizes=(16,), learning_starts=32, update_steps=3, seed=0, **kw)
    agent.observe(batch(64, np.random.default_rng(1)))
    assert agent.update(batch_size=16)["gradient_steps"] == 3
    return agent


@pytest.mark.parametrize("criterion", ["huber", "mse"])
def test_measuring_changes_no_weight_slot_counter_or_generator(DQN, criterion):
    agent = trained(DQN, criterion=criterion)
    before, version = agent.state_dict(), agent.nets.version
    rng = np.random.default_rng(2)
    value = agent.noise_scale.grad_sq_norm(batch(16, rng))
    b_simple = agent.noise_scale.measure_batches(batch(8, rng), batch(64, rng))
    after = agent.state_dict()
    assert math.isfinite(value) and value > 0 and not math.isnan(b_simple)
    assert sorted(after) == sorted(before)
    assert all(np.array_equal(after[k], before[k]) for k in before), [k for k in before
                                                                       if not np.array_equal(after[k], before[k])]
    assert agent.nets.version == version and agent.noise_scale.count == 1
    # and training goes on exactly as it would have without the measurement
    twin = trained(DQN, criterion=criterion)
    more = batch(16, np.random.default_rng(3))
    assert agent.learn(more) == pytest.approx(twin.learn(more))


@pytest.mark.parametrize("dueling", [False, True])
def test_torch_and_tf_agree_on_the_squared_gradient_norm(dueling):
    TorchDQN, TFDQN = backend("torch"), backend("tf")
    source = trained(TorchDQN, dueling=dueling, criterion="huber")
    tf_agent = TFDQN(OBS, ACT, hidden_sizes=(16,), dueling=dueling, seed=0)
    tf_agent.load_state_dict(source.state_dict())
    rng = np.random.default_rng(4)
    for n in (1, 8, 128):
        b = batch(n, rng)
        assert tf_agent.noise_scale.grad_sq_norm(b) == pytest.approx(source.noise_scale.grad_sq_norm(b), rel=1e-4)


def test_a_bigger_batch_has_a_smaller_expected_squared_norm(DQN):
    # E|G_B|^2 = |G|^2 + tr(Sigma)/B: averaged over batches, B=4 exceeds B=256
    agent = trained(DQN)
    rng = np.random.default_rng(5)
    small = np.mean([agent.noise_scale.grad_sq_norm(batch(4, rng)) for _ in range(20)])
    big = np.mean([agent.noise_scale.grad_sq_norm(batch(256, rng)) for _ in range(20)])
    assert small > 2 * big


def test_noise_scale_on_cartpole_transitions_is_finite_and_positive(DQN):
    env = gym.make("CartPole-v1")
    agent = DQN(env.observation_space, env.action_space, hidden_sizes=(32,), seed=0)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    rows = []
    for _ in range(1000):
        a = int(rng.integers(2))
        nxt, r, term, trunc, _ = env.step(a)
        rows.append((obs, a, r, nxt, term, trunc))
        obs = env.reset()[0] if term or trunc else nxt
    o, a, r, n, te, tr = (np.array(x) for x in zip(*rows, strict=True))
    agent.observe(Transitions(obs=o, act=a, rew=r, next_obs=n, terminated=te, truncated=tr))
    for _ in range(5):
        b_simple = agent.noise_scale.measure_batches(agent.replay.sample(16), agent.replay.sample(512))
    assert math.isfinite(b_simple) and b_simple > 0
    assert agent.noise_scale.g_sq > 0 and agent.noise_scale.trace_sigma > 0


def test_bad_batch_sizes_raise_before_measuring(DQN):
    agent = DQN(OBS, ACT, hidden_sizes=(8,), seed=0)
    rng = np.random.default_rng(6)
    with pytest.raises(ValueError, match="batch_small smaller than batch_big, got 16 and 16 rows"):
        agent.noise_scale.measure_batches(batch(16, rng), batch(16, rng))
    assert agent.noise_scale.count == 0
