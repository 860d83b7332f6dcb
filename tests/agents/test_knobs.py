"""Run-time hyperparameters (agents/core.py, Adjustable): hyperparameters() / set_hyperparameter() in both
backends, values read by the traced TensorFlow steps without a retrace, checks before changes,
and prioritized replay's set_alpha / set_beta."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.replay import PrioritizedReplayBuffer
from marl_note.types import Transitions
from tests.agents.maddpg_helpers import joint_batch

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def cls(backend, name):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    return getattr(importlib.import_module(f"marl_note.agents.{backend}"), name)


def transitions(n, rng, act):
    a = rng.integers(0, act.n, n) if isinstance(act, gym.spaces.Discrete) else rng.uniform(-1, 1, (n, 2))
    return Transitions(obs=rng.normal(size=(n, 3)).astype(np.float32), act=a, rew=rng.normal(size=n),
                       next_obs=rng.normal(size=(n, 3)).astype(np.float32), terminated=np.zeros(n, bool),
                       truncated=np.zeros(n, bool), stream=np.zeros(n, np.int64))


@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize("name", ["DDPG", "SAC"])
def test_tau_one_makes_the_targets_copies_after_one_step(backend, name):
    agent = cls(backend, name)(BOX, ACT_BOX, hidden_sizes=(8,), seed=0)
    assert agent.set_hyperparameter("tau", 1.0) == 1.0
    agent.learn(transitions(16, np.random.default_rng(0), ACT_BOX))
    state = agent.state_dict()
    pairs = [("critic", "critic_target")] if name == "DDPG" else [("qf1", "qf1_target"), ("qf2", "qf2_target")]
    for net, target in pairs:
        for key in (k for k in state if k.startswith(net + ".")):
            np.testing.assert_allclose(state[key.replace(net, target, 1)], state[key], atol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_maddpg_reads_the_new_tau_and_gamma(backend):
    obs, act = {"a": BOX}, {"a": gym.spaces.Discrete(3)}
    m = cls(backend, "MADDPG")(obs, act, hidden_sizes=(8,), seed=0)
    m.set_hyperparameter("tau", 1.0)
    m.set_hyperparameter("gamma", 0.5)
    m.learn(joint_batch(16, np.random.default_rng(0), obs, act))
    s = m.state_dict()
    np.testing.assert_allclose(s["a.critic_target.0.weight"], s["a.critic.0.weight"], atol=1e-6)
    assert m.hyperparameters() == {"tau": 1.0, "gamma": 0.5}


def test_a_changed_clip_range_keeps_ppo_backends_in_step():
    def stepped(backend, clip):
        agent = cls(backend, "PPO")(BOX, gym.spaces.Discrete(2), hidden_sizes=(8,), n_steps=32, n_epochs=4, seed=0)
        if clip is not None:
            agent.set_hyperparameter("clip_range", clip)
        agent.observe(transitions(32, np.random.default_rng(1), gym.spaces.Discrete(2)))
        agent.update(batch_size=32)
        return agent.state_dict()["net.pi.0.weight"]

    torch_tight, tf_tight = stepped("torch", 1e-4), stepped("tf", 1e-4)
    np.testing.assert_allclose(tf_tight, torch_tight, atol=1e-5)
    assert not np.allclose(stepped("torch", None), torch_tight, atol=1e-5)


def test_eps_and_replay_knobs_of_dqn_and_bad_values_change_nothing():
    agent = cls("torch", "DQN")(BOX, gym.spaces.Discrete(2), hidden_sizes=(8,), PR=True, seed=0)
    assert set(agent.hyperparameters()) == {"gamma", "eps", "alpha", "beta", "window_size"}  # no tau: hard copies
    agent.set_hyperparameter("eps", 0.25)
    agent.policy.step(10_000)
    assert agent.hyperparameters()["eps"] == 0.25  # the annealing ended at the value set
    before = agent.hyperparameters()
    with pytest.raises(ValueError, match="gamma"):
        agent.set_hyperparameter("gamma", 1.5)
    with pytest.raises(KeyError, match="no adjustable hyperparameter 'tau'"):
        agent.set_hyperparameter("tau", 0.1)
    with pytest.raises(ValueError, match="eps must be in"):
        agent.set_hyperparameter("eps", 2.0)
    assert agent.hyperparameters() == before
    agent.set_hyperparameter("gamma", 0.9)
    assert agent.gamma == agent.cfg.gamma == 0.9


def test_set_alpha_reweights_the_stored_priorities_and_survives_a_state_round_trip():
    buf = PrioritizedReplayBuffer(8, BOX, gym.spaces.Discrete(2), alpha=0.6, eps=0.0, seed=0)
    buf.add(transitions(4, np.random.default_rng(0), gym.spaces.Discrete(2)))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 4.0, 8.0]))
    buf.set_alpha(1.0)
    np.testing.assert_allclose(buf.priorities(), np.array([1, 2, 4, 8]) / 15)
    buf.set_alpha(0.0)
    np.testing.assert_allclose(buf.priorities(), np.full(4, 0.25))
    with pytest.raises(ValueError, match="cannot rise from 0"):
        buf.set_alpha(0.5)
    buf.set_beta(0.9)
    assert buf.beta == 0.9 and buf.sample(2).weights is not None
    other = PrioritizedReplayBuffer(8, BOX, gym.spaces.Discrete(2), alpha=0.6, eps=0.0, seed=0)
    other.load_state_dict(buf.state_dict())  # the saved alpha is adopted
    assert other.alpha == 0.0
