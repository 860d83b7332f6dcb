"""The numpy backend's step without copies: gradients written in place into one flat buffer
(:class:`~marl_note.agents.numpy.layers.FlatGrads`), Adam through one scratch array, the one-array norm and
the cache-free forward pass of target networks give exactly (bit for bit) what the plain-dict path and a
per-parameter Adam give."""
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.dqn import DQNConfig, q_net_weights
from marl_note.agents.networks import ACTIVATIONS, mlp_weights
from marl_note.agents.numpy import DQN, PPO
from marl_note.agents.numpy.dqn import DuelingQNet
from marl_note.agents.numpy.layers import MLP, Adam, FlatGrads, total_norm
from marl_note.agents.numpy.networks import NumpyNetworks
from marl_note.types import Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def batch(n, rng):
    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                       rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool))


def per_parameter_adam(params, grads, m, v, t, lr, b1=0.9, b2=0.999, eps=1e-8):
    """torch's Adam written per parameter in float32 numpy, the reference for the flat one (updates in place)."""
    f = np.float32
    for p, g, mi, vi in zip(params, grads, m, v):
        mi += f(1 - b1) * (g - mi)
        vi *= f(b2)
        vi += f(1 - b2) * (g * g)
        denom = np.sqrt(vi) / f(math.sqrt(1 - b2 ** t)) + f(eps)
        p -= (mi / denom) * f(lr / (1 - b1 ** t))


@pytest.mark.parametrize("one_buffer", [True, False], ids=["one buffer", "separate arrays"])
def test_flat_adam_equals_the_per_parameter_adam_bit_for_bit(one_buffer):
    rng = np.random.default_rng(0)
    shapes = [(5, 3), (5,), (2, 5), (2,)]
    start = [rng.normal(size=s).astype(np.float32) for s in shapes]
    if one_buffer:  # as NumpyNetworks lays a network out: one Adam operation writes every parameter
        flat = np.concatenate([a.ravel() for a in start])
        sizes = np.cumsum([0, *[a.size for a in start]])
        params = [flat[a:b].reshape(s) for a, b, s in zip(sizes, sizes[1:], shapes)]
    else:
        params = [a.copy() for a in start]
    opt = Adam(params, lr=1e-2)
    ref = [a.copy() for a in start]
    m, v = [np.zeros_like(a) for a in ref], [np.zeros_like(a) for a in ref]
    for t in range(1, 7):
        if t == 4:
            opt.lr = 3e-3
        lr = opt.lr
        grads = [rng.normal(size=s).astype(np.float32) * 10.0 ** (t - 3) for s in shapes]
        opt.step(grads)
        per_parameter_adam(ref, grads, m, v, t, lr)
        for mine, theirs in zip(opt.params, ref):
            assert np.array_equal(mine, theirs)
    for mine, theirs in zip(opt.exp_avg_sq, v):
        assert np.array_equal(mine, theirs)


@pytest.mark.parametrize("dueling", [False, True], ids=["mlp", "dueling"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_gradients_written_in_place_equal_the_plain_dict_ones(activation, dueling):
    rng = np.random.default_rng(1)
    cfg = DQNConfig(hidden_sizes=(8, 6), dueling=dueling, activation=activation)
    nets = NumpyNetworks()
    weights = q_net_weights("q", 4, 3, cfg, rng)
    if dueling:
        net = DuelingQNet(nets.add("q", weights, DuelingQNet.param_keys(weights, "q", activation)), "q", activation)
    else:
        net = nets.mlp("q", weights, activation)
    nets.adam("opt", ["q"], lr=1e-3)
    x = rng.normal(size=(7, 4)).astype(np.float32)
    y, cache = net.forward(x)
    assert np.array_equal(net.predict(x), y)  # the target networks' pass: no cache, the same numbers
    g = rng.normal(size=y.shape).astype(np.float32)
    plain: dict[str, np.ndarray] = {}
    net.backward(g, cache, plain)
    flat = nets.grads("opt")
    net.backward(g, cache, flat)
    assert flat.complete(list(nets.modules["q"])) and sorted(flat) == sorted(plain)
    for key, value in plain.items():
        assert np.array_equal(flat[key], value), key
    assert np.array_equal(flat.flat, np.concatenate([plain[k].ravel() for k in nets.modules["q"]]))


def test_an_array_used_twice_falls_back_to_adding_and_steps_the_same_weights():
    """A second backward pass into the same gradients adds (a new array, not the buffer): ``complete`` says no,
    and the step concatenates, giving the weights of the plain-dict step."""
    rng = np.random.default_rng(2)
    weights = mlp_weights("pi", 3, (5,), 2, rng)
    copies = []
    for _ in range(2):
        nets = NumpyNetworks()
        copies.append((nets, nets.mlp("pi", weights, "tanh")))
        nets.adam("opt", ["pi"], lr=1e-2)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    g = rng.normal(size=(4, 2)).astype(np.float32)
    (nets_a, net_a), (nets_b, net_b) = copies
    flat = nets_a.grads("opt")
    for _ in range(2):
        net_a.backward(g, net_a.forward(x)[1], flat)
    assert not flat.complete(list(nets_a.modules["pi"]))
    assert np.array_equal(flat["pi.0.weight"], 2 * flat.views["pi.0.weight"])  # the first pass + the second
    plain: dict[str, np.ndarray] = {}
    for _ in range(2):
        net_b.backward(g, net_b.forward(x)[1], plain)
    nets_a.step("opt", 0.0, flat, 0.5, "test", 1)
    nets_b.step("opt", 0.0, plain, 0.5, "test", 1)
    for key, value in nets_b.modules["pi"].items():
        assert np.array_equal(nets_a.modules["pi"][key], value), key


def test_a_gradient_of_another_dtype_is_not_written_into_the_float32_buffer():
    nets = NumpyNetworks()
    net = nets.mlp("pi", mlp_weights("pi", 3, (4,), 2, np.random.default_rng(3)), "relu")
    nets.adam("opt", ["pi"], lr=1e-3)
    x = np.ones((2, 3), np.float64)
    y, cache = net.forward(x)
    grads = nets.grads("opt")
    net.backward(np.ones_like(y), cache, grads)
    assert grads["pi.0.weight"].dtype == np.float64 and not grads.complete(list(nets.modules["pi"]))
    grads.put("pi.0.weight", np.zeros((4, 3), np.float64))  # put: the same rule
    assert grads["pi.0.weight"].dtype == np.float64


def test_one_flat_gradient_has_the_norm_of_the_general_path():
    g = np.random.default_rng(4).normal(size=1000).astype(np.float32) * 3
    assert total_norm([g]) == total_norm([g.reshape(10, 100)])  # one array: bit for bit the same number


@pytest.mark.parametrize("options", [dict(double=False, criterion="huber", max_grad_norm=10.0),
                                     dict(max_grad_norm=0.01), dict(dueling=True, criterion="mse")],
                         ids=["zoo", "clipped double", "dueling mse"])
def test_dqn_steps_equal_the_plain_dict_steps_bit_for_bit(options):
    """Several DQN steps through the in-place gradients give the weights and Adam slots of the same steps
    through a plain dict of gradients (the path before the flat buffer), bit for bit."""
    ours, ref = (DQN(OBS, ACT, hidden_sizes=(16, 16), seed=5, **options) for _ in range(2))
    ref.nets.grads = lambda optimizer: {}  # type: ignore[method-assign]  # the reference: a plain dict each step
    rng = np.random.default_rng(6)
    for update in range(1, 5):
        arrays = ours._arrays(batch(32, rng))
        assert ours.nets.train_step(arrays, "DQN", update)[0] == ref.nets.train_step(arrays, "DQN", update)[0]
    mine, theirs = ours.state_dict(), ref.state_dict()
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert np.array_equal(mine[key], theirs[key]), key


def test_ppo_gaussian_log_std_gradient_goes_into_the_buffer():
    agent = PPO(OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), hidden_sizes=(8,), seed=0)
    rng = np.random.default_rng(7)
    x, act = rng.normal(size=(16, 4)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32)
    mask = np.ones((16, 2), bool)
    old = agent.nets.evaluate(x, act, mask)[0]
    grads = agent.nets._losses(x, act, mask, old, rng.normal(size=16).astype(np.float32),
                               rng.normal(size=16).astype(np.float32), np.ones(16, np.float32))[2]
    assert isinstance(grads, FlatGrads) and grads.complete(agent.nets._optimizer_keys["optimizer"])


def test_mlp_predict_leaves_its_input_alone():
    net = MLP(mlp_weights("pi", 3, (4,), 2, np.random.default_rng(8)), "pi", "relu")
    x = np.random.default_rng(9).normal(size=(5, 3)).astype(np.float32)
    before = x.copy()
    assert np.array_equal(net.predict(x), net.forward(x)[0]) and np.array_equal(x, before)
