"""Every built-in agent acts through a numpy copy of its acting network (issue 11): the copy's forward
pass equals the framework's to float32 rounding, before and after an update and after a restore,
it is never stale, greedy actions agree, and ``numpy_acting=False`` acts through the framework."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.numpy_policy import NumpyPolicy
from marl_note.types import Transitions
from tests.agents.maddpg_helpers import joint_batch

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
DISCRETE = gym.spaces.Discrete(4)
BOX_ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
MA_OBS = {"a": gym.spaces.Box(-1, 1, (3,), np.float32), "b": gym.spaces.Box(-1, 1, (4,), np.float32)}
MA_ACT = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,), np.float32)}
TOL = dict(rtol=1e-5, atol=1e-5)

# (algorithm, keyword arguments, action space); MADDPG has its own tests below
CASES = {
    "dqn": ("DQN", dict(learning_starts=8, update_steps=2), DISCRETE),
    "dqn-dueling": ("DQN", dict(learning_starts=8, update_steps=2, dueling=True, activation="tanh"), DISCRETE),
    "ppo-discrete": ("PPO", dict(n_steps=16, n_epochs=1, activation="elu"), DISCRETE),
    "ppo-box-shared": ("PPO", dict(n_steps=16, n_epochs=1, shared=True), BOX_ACT),
    "ddpg": ("DDPG", dict(learning_starts=8, update_steps=2), BOX_ACT),
    "sac-discrete": ("SAC", dict(learning_starts=8, update_steps=2), DISCRETE),
    "sac-box": ("SAC", dict(learning_starts=8, update_steps=2), BOX_ACT),
}


def make(backend, case, **over):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    name, kwargs, act_space = CASES[case]
    cls = getattr(importlib.import_module(f"marl_note.agents.{backend}"), name)
    return cls(BOX_OBS, act_space, hidden_sizes=(16, 16), **{"seed": 3, **kwargs, **over})


def framework_out(agent, x):
    """What the framework computes for the acting network on encoded observations ``x``."""
    name = type(agent).__name__
    if name == "DQN":
        return agent.nets.q_values(x)
    if name == "PPO":
        return agent.nets.policy(x)
    if name == "DDPG":
        return agent.nets.actions(x)
    return agent.nets.policy(x)  # SAC


def numpy_out(agent, x):
    policy = agent.numpy_policy()
    assert isinstance(policy, NumpyPolicy)
    name = type(agent).__name__
    out = policy.forward({"DQN": "q_net", "PPO": "pi"}.get(name, "actor"), x)
    return np.tanh(out) if name == "DDPG" else out


def train(agent, rng, n=16):
    """Observe ``n`` random transitions and run one update with gradient steps."""
    obs = rng.uniform(-1, 1, (n, 5)).astype(np.float32)
    agent.observe(Transitions(obs=obs, act=agent.act(obs, explore=True), rew=rng.normal(size=n).astype(np.float32),
                              next_obs=rng.uniform(-1, 1, (n, 5)).astype(np.float32),
                              terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool), stream=np.arange(n) % 4))
    assert agent.update(8)["gradient_steps"] > 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_numpy_copy_matches_the_framework_before_and_after_an_update_and_a_restore(backend, case, tmp_path):
    agent = make(backend, case)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 5)).astype(np.float32)
    before = framework_out(agent, x)
    np.testing.assert_allclose(numpy_out(agent, x), before, **TOL)
    version = agent.numpy_policy().version

    train(agent, rng)  # a copy taken before the update would now be stale
    after = framework_out(agent, x)
    assert not np.allclose(after, before, **TOL), "the update did not move the acting network"
    assert agent.numpy_policy().version != version
    np.testing.assert_allclose(numpy_out(agent, x), after, **TOL)

    other = make(backend, case, seed=11)  # a different network, then a restore of the trained one
    np.testing.assert_allclose(numpy_out(other, x), framework_out(other, x), **TOL)
    agent.save(tmp_path / "ckpt")
    other.load_state_dict(agent.state_dict())
    np.testing.assert_allclose(numpy_out(other, x), after, **TOL)
    restored = type(agent).restore(tmp_path / "ckpt")
    np.testing.assert_allclose(numpy_out(restored, x), after, **TOL)
    fresh = make(backend, case, seed=11)
    fresh.restore_param(tmp_path / "ckpt")
    np.testing.assert_allclose(numpy_out(fresh, x), after, **TOL)


@pytest.mark.parametrize("case", ["dqn", "ppo-discrete", "sac-discrete", "ddpg", "ppo-box-shared"])
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_acting_after_an_update_equals_acting_through_the_framework(backend, case):
    """Greedy actions (where the best two values are further apart than the tolerance) and exploring
    actions from the same generator state agree with ``numpy_acting=False``, after updates."""
    fast, slow = make(backend, case), make(backend, case, numpy_acting=False)
    assert slow.numpy_policy() is None
    rng_fast, rng_slow = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(2):
        train(fast, rng_fast)
        train(slow, rng_slow)
        x = rng_fast.uniform(-1, 1, (64, 5)).astype(np.float32)
        rng_slow.uniform(-1, 1, (64, 5))
        ref = framework_out(slow, x)
        np.testing.assert_allclose(framework_out(fast, x), ref, **TOL)  # the two agents are the same
        greedy_fast, greedy_slow = fast.act(x), slow.act(x)
        if isinstance(fast.action_space, gym.spaces.Discrete):
            top2 = np.sort(ref, axis=1)[:, -2:]
            clear = top2[:, 1] - top2[:, 0] > 1e-4
            assert clear.sum() > 32
            np.testing.assert_array_equal(greedy_fast[clear], greedy_slow[clear])
        else:
            np.testing.assert_allclose(greedy_fast, greedy_slow, **TOL)
            np.testing.assert_allclose(fast.act(x, explore=True), slow.act(x, explore=True), **TOL)


def test_the_copy_is_refreshed_once_per_weight_change_not_per_step():
    agent = make("torch", "dqn")
    policy = agent.numpy_policy()
    weights = policy.weights["q_net.0.weight"]
    for _ in range(3):
        agent.act(np.zeros((2, 5), np.float32))
    assert agent.numpy_policy() is policy and policy.weights["q_net.0.weight"] is weights  # no copy per act
    train(agent, np.random.default_rng(0))
    agent.act(np.zeros((2, 5), np.float32))
    assert policy.version == agent.nets.version and policy.weights["q_net.0.weight"] is not weights
    state = policy.state()
    assert all(isinstance(v, np.ndarray) for v in state.values()) and int(state["version"]) == policy.version
    assert set(state) == {"version", "q_net.0.weight", "q_net.0.bias", "q_net.2.weight", "q_net.2.bias",
                          "q_net.4.weight", "q_net.4.bias"}


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_maddpg_acts_through_numpy_copies_of_its_actors(backend):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    cls = importlib.import_module(f"marl_note.agents.{backend}").MADDPG
    m = cls(MA_OBS, MA_ACT, hidden_sizes=(8,), learning_starts=0, seed=0)
    slow = cls(MA_OBS, MA_ACT, hidden_sizes=(8,), learning_starts=0, seed=0, numpy_acting=False)
    rng = np.random.default_rng(0)
    xs = {a: rng.uniform(-1, 1, (16, s.shape[0])).astype(np.float32) for a, s in MA_OBS.items()}
    before = {a: slow.actor_outputs(a, xs[a]) for a in MA_OBS}
    for a in MA_OBS:
        np.testing.assert_allclose(m.actor_outputs(a, xs[a]), before[a], **TOL)
    for agent in (m, slow):
        agent.observe_joint(joint_batch(16, np.random.default_rng(1), MA_OBS, MA_ACT))
        assert agent.update(8)["gradient_steps"] > 0
    for a in MA_OBS:
        after = slow.actor_outputs(a, xs[a])
        assert not np.allclose(after, before[a], **TOL)
        np.testing.assert_allclose(m.actor_outputs(a, xs[a]), after, **TOL)
        np.testing.assert_allclose(m.actor_outputs(a, xs[a]), m.nets.actor_output(a, xs[a]), **TOL)
    np.testing.assert_allclose(m.act_agent("b", xs["b"]), slow.act_agent("b", xs["b"]), **TOL)


def test_numpy_acting_is_a_constructor_option_kept_in_the_config_not_in_the_state():
    pytest.importorskip("torch")
    from marl_note.agents.torch import DQN

    on, off = make("torch", "dqn"), make("torch", "dqn", numpy_acting=False)
    assert set(on.state_dict()) == set(off.state_dict())
    assert off.config["numpy_acting"] is False and off.numpy_policy() is None
    assert isinstance(DQN(BOX_OBS, DISCRETE, hidden_sizes=(4,)).numpy_policy(), NumpyPolicy)
