"""policy_probs (the ActionProbabilities protocol) for DQN, PPO and discrete SAC in every backend."""
import dataclasses
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.base import ActionProbabilities, RandomAgent

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(5)


def backend(name):
    pytest.importorskip({"torch": "torch", "tf": "tensorflow", "numpy": "numpy"}[name])
    return importlib.import_module(f"marl_note.agents.{name}")


def _inputs(n=64, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    mask = rng.random((n, ACT.n)) < 0.5
    mask[np.arange(n), rng.integers(0, ACT.n, n)] = True  # at least one legal action per row
    return obs, mask


def _check_rows(probs, mask):
    assert probs.shape == mask.shape
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-9)
    assert np.all(probs[~mask] == 0.0) and np.all(probs >= 0)


@pytest.mark.parametrize("name", ["torch", "tf", "numpy"])
@pytest.mark.parametrize("numpy_acting", [True, False])
def test_dqn_is_one_hot_on_the_greedy_action(name, numpy_acting):
    agent = backend(name).DQN(OBS, ACT, hidden_sizes=(16,), seed=0, numpy_acting=numpy_acting)
    assert isinstance(agent, ActionProbabilities)
    obs, mask = _inputs()
    probs = agent.policy_probs(obs, mask)
    _check_rows(probs, mask)
    assert set(np.unique(probs)) == {0.0, 1.0}
    np.testing.assert_array_equal(probs.argmax(axis=1), agent.act(obs, mask, explore=False))
    np.testing.assert_array_equal(agent.policy_probs(obs).argmax(axis=1), agent.act(obs, explore=False))


@pytest.mark.parametrize("name", ["torch", "tf", "numpy"])
def test_dqn_breaks_ties_like_act(name):
    """With the output layer zeroed every action has the same Q-value: act takes the first legal one."""
    agent = backend(name).DQN(OBS, ACT, hidden_sizes=(16,), seed=0)
    state = agent.state_dict()
    state.update({k: np.zeros_like(v) for k, v in state.items() if k.startswith(("q_net.2", "target_net.2"))})
    agent.load_state_dict(state)
    obs = np.random.default_rng(1).uniform(-1, 1, (3, 4)).astype(np.float32)
    mask = np.array([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1], [0, 0, 0, 1, 0]], bool)
    np.testing.assert_array_equal(agent.act(obs, mask), [1, 0, 3])
    np.testing.assert_array_equal(agent.policy_probs(obs, mask), np.eye(ACT.n)[[1, 0, 3]])


@pytest.mark.parametrize("name", ["torch", "tf", "numpy"])
def test_ppo_is_the_masked_softmax_it_samples_from(name):
    agent = backend(name).PPO(OBS, ACT, hidden_sizes=(16,), seed=0)
    assert isinstance(agent, ActionProbabilities)
    obs, mask = _inputs()
    probs = agent.policy_probs(obs, mask)
    _check_rows(probs, mask)
    acts = np.tile(np.arange(ACT.n), (len(obs), 1))
    # the backend's own log-probabilities (the training path, not the numpy acting copy) agree
    for a in range(ACT.n):
        rows = mask[:, a]
        logp = agent.log_prob(obs[rows], acts[rows, a], mask[rows])
        np.testing.assert_allclose(np.exp(logp), probs[rows, a], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["torch", "tf", "numpy"])
def test_discrete_sac_is_a_distribution_over_legal_actions(name):
    agent = backend(name).SAC(OBS, ACT, hidden_sizes=(16,), seed=0)
    assert isinstance(agent, ActionProbabilities)
    obs, mask = _inputs()
    probs = agent.policy_probs(obs, mask)
    _check_rows(probs, mask)
    np.testing.assert_array_equal(probs.argmax(axis=1), agent.act(obs, mask, explore=False))
    # sampling follows the same probabilities (past warm-up): frequencies of 4000 draws on one row
    agent.cfg = dataclasses.replace(agent.cfg, learning_starts=0)
    row = np.repeat(obs[:1], 4000, axis=0)
    freq = np.bincount(agent.act(row, np.repeat(mask[:1], 4000, axis=0), explore=True), minlength=ACT.n) / 4000
    np.testing.assert_allclose(freq, probs[0], atol=0.04)


@pytest.mark.parametrize("algo", ["PPO", "SAC"])
def test_continuous_agents_refuse(algo):
    agent = getattr(backend("numpy"), algo)(OBS, gym.spaces.Box(-1, 1, (2,)), hidden_sizes=(8,), seed=0)
    with pytest.raises(TypeError, match="Discrete"):
        agent.policy_probs(np.zeros((1, 4), np.float32))


def test_random_agent_is_uniform_over_legal_actions():
    obs, mask = _inputs()
    probs = RandomAgent(ACT).policy_probs(obs, mask)
    _check_rows(probs, mask)
    np.testing.assert_allclose(probs[mask], np.repeat(1.0 / mask.sum(axis=1), mask.sum(axis=1)))
    with pytest.raises(TypeError, match="Discrete"):
        RandomAgent(gym.spaces.Box(-1, 1, (2,))).policy_probs(obs)
