"""The TF DQN's per-step Python work (issue 14: TF as fast as torch): the gradient step runs its
concrete graph on the packed batch, and eager target syncs run as one traced graph."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import Transitions

tf = pytest.importorskip("tensorflow")

from marl_note.agents.tf import DQN  # noqa: E402
from marl_note.agents.tf.dqn import pack_batch  # noqa: E402

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(3)


def batch(n, rng):
    return Transitions(obs=rng.normal(size=(n, 3)).astype(np.float32), act=rng.integers(0, 3, n),
                       rew=rng.normal(size=n), next_obs=rng.normal(size=(n, 3)).astype(np.float32),
                       terminated=rng.random(n) < 0.3, truncated=np.zeros(n, bool),
                       next_mask=np.array([[1, 0, 1]] * n, bool))


class Refuse:
    def __call__(self, *args, **kwargs):
        raise AssertionError("the tf.function was called: its argument matching runs on every step")


def test_dqn_steps_after_the_first_skip_the_tf_function_dispatch():
    agent = DQN(BOX, ACT, hidden_sizes=(8,), seed=0)
    rng = np.random.default_rng(0)
    agent.learn(batch(16, rng))  # traces the step once
    traced = agent.nets._step_fn
    agent.nets._step_fn = Refuse()
    try:
        for n in (16, 5):
            metrics = agent.learn(batch(n, rng))
    finally:
        agent.nets._step_fn = traced
    assert set(metrics) == {"loss", "q_mean", "td_abs"} and np.isfinite(list(metrics.values())).all()
    assert traced.experimental_get_tracing_count() == 1


def test_packed_batch_keeps_every_input_exactly():
    rng = np.random.default_rng(1)
    agent = DQN(BOX, ACT, hidden_sizes=(8,), seed=0)
    arrays = agent._arrays(batch(6, rng))
    pair, aux = pack_batch(arrays)
    np.testing.assert_array_equal(pair[0], arrays["obs"])
    np.testing.assert_array_equal(pair[1], arrays["next_obs"])
    for j, key in enumerate(("act", "rew", "discount", "alive", "weights")):
        np.testing.assert_array_equal(aux[:, j], arrays[key].astype(np.float32))
    np.testing.assert_array_equal(aux[:, 5:] > 0.5, arrays["legal"])


def test_repeated_eager_polyak_syncs_run_no_per_variable_python_ops(monkeypatch):
    agent = DQN(BOX, ACT, hidden_sizes=(8,), seed=0)
    nets = agent.nets
    for v in nets.variables("q_net"):
        v.assign(v + 1.0)
    for _ in range(4):  # the first calls run eagerly, then the writes are traced once
        nets.sync("target_net", "q_net", 0.5)
    target = [v.numpy().copy() for v in nets.variables("target_net")]
    source = [v.numpy().copy() for v in nets.variables("q_net")]
    variable_type = type(nets.variables("target_net")[0])
    assigns = []
    original = variable_type.assign
    monkeypatch.setattr(variable_type, "assign", lambda self, *a, **k: assigns.append(1) or original(self, *a, **k))
    version = nets.version
    for _ in range(10):
        nets.sync("target_net", "q_net", 0.5)
    assert assigns == []  # old code: 10 syncs x 4 variables
    assert nets.version == version + 10  # the acting copy still sees every change
    for t, s, now in zip(target, source, nets.variables("target_net"), strict=True):
        expected = t
        for _ in range(10):
            expected = expected + np.float32(0.5) * (s - expected)
        np.testing.assert_allclose(now.numpy(), expected, rtol=1e-6, atol=1e-6)
