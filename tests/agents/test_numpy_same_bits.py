"""The numpy backend's cheaper step (issue #34) computes exactly (bit for bit) what the plain formulas compute:
the in-place ReLU against cached zeros, the ReLU gradient taken in place, DQN's Huber loss and TD target
written with fewer calls, and the replay's unwindowed draws."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.dqn import DQNConfig, q_net_weights
from marl_note.agents.networks import activate, mlp_weights
from marl_note.agents.numpy import DQN
from marl_note.agents.numpy.layers import MLP, Dense, activation_grad
from marl_note.replay import ReplayBuffer
from marl_note.types import Transitions

SPECIAL = np.array([-0.0, 0.0, -1.5, 2.5, np.nan, -np.inf, np.inf, 1e-45, -1e-45], np.float32)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_forward_and_predict_give_np_maximum_bits(dtype):
    # one input, one unit, weight 1 and bias -0.0: z is x (NaN and the infinities included; BLAS may turn -0.0 into 0.0)
    params = {"l.weight": np.ones((1, 1), dtype), "l.bias": np.array([-0.0], dtype)}
    layer = Dense(params, "l", "relu")
    x = SPECIAL.astype(dtype)[:, None]
    want = activate(x @ params["l.weight"].T + params["l.bias"], "relu")
    y, cache = layer.forward(x)
    again, _ = layer.forward(x)  # the zeros kept from the first call are still zeros
    predicted = layer.predict(x)
    for got in (y, again, predicted):
        np.testing.assert_array_equal(bits(got), bits(want))
    assert cache[2] is y and y.dtype == dtype
    assert not np.signbit(y[:2]).any() and np.isnan(y[4, 0]) and y[6, 0] == np.inf  # relu(-0.0) is +0.0


def test_relu_zeros_follow_the_batch_shape():
    params = mlp_weights("pi", 3, (8,), 2, np.random.default_rng(0))
    layer = Dense(params, "pi.0", "relu")
    for rows in (5, 1, 5, 7):
        x = np.random.default_rng(rows).normal(size=(rows, 3)).astype(np.float32)
        want = activate(x @ params["pi.0.weight"].T + params["pi.0.bias"], "relu")
        np.testing.assert_array_equal(bits(layer.forward(x)[0]), bits(want))


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
@pytest.mark.parametrize("out_activation", [False, True])
def test_mlp_backward_equals_the_copying_backward_and_keeps_the_callers_gradient(activation, out_activation):
    rng = np.random.default_rng(1)
    params = mlp_weights("q", 4, (16, 16), 3, rng)
    net = MLP(params, "q", activation, out_activation=out_activation)
    x = rng.normal(size=(9, 4)).astype(np.float32)
    y, caches = net.forward(x)
    grad_y = rng.normal(size=y.shape).astype(np.float32)
    before = grad_y.copy()
    grads: dict = {}
    dx = net.backward(grad_y, caches, grads, need_input=True)
    np.testing.assert_array_equal(grad_y, before)  # the caller's array is not overwritten
    # the reference: every layer's backward pass through activation_grad on fresh arrays
    ref: dict = {}
    g = before
    for layer, (xi, zi, yi) in zip(reversed(net.layers), reversed(caches)):
        if layer.activation is not None:
            g = activation_grad(g, zi if zi is not None else yi, yi, layer.activation)
        ref[layer.wkey], ref[layer.bkey] = g.T @ xi, g.sum(axis=0)
        g = g @ layer.weight
    assert sorted(grads) == sorted(ref)
    for k in ref:
        np.testing.assert_array_equal(bits(grads[k]), bits(ref[k]), err_msg=k)
    np.testing.assert_array_equal(bits(dx), bits(g))


def old_loss_grads(nets, arrays, target):
    """DQN's Huber loss and its gradient as the step wrote them before (np.where, np.sign, a new grad array)."""
    q_all, cache = nets.q_net.forward(np.asarray(arrays["obs"], np.float32))
    rows = np.arange(len(q_all))
    act = np.asarray(arrays["act"], np.int64)
    q = q_all[rows, act]
    diff = q - target
    weights = np.asarray(arrays["weights"], q_all.dtype)
    abs_diff = np.abs(diff)
    small = abs_diff < 1.0
    losses = np.where(small, 0.5 * diff * diff, abs_diff - 0.5)
    dloss = np.where(small, diff, np.sign(diff))
    n = len(q)
    loss = float((weights * losses).sum() / n)
    grad_q = np.zeros_like(q_all)
    grad_q[rows, act] = weights * dloss / n
    grads: dict = {}
    nets.q_net.backward(grad_q, cache, grads)
    return loss, q, grads


def old_target(nets, b):
    q_next = nets.target_net(np.asarray(b["next_obs"], np.float32))
    chooser = nets.q_net(np.asarray(b["next_obs"], np.float32)) if nets.config.double else q_next
    best = np.where(b["legal"], chooser, -np.inf).argmax(axis=1)
    return b["rew"] + b["discount"] * b["alive"] * q_next[np.arange(len(best)), best]


@pytest.mark.parametrize("masked", [False, True], ids=["all legal", "masked"])
@pytest.mark.parametrize("double", [False, True])
def test_dqn_loss_and_target_equal_the_plain_formulas_bit_for_bit(masked, double):
    rng = np.random.default_rng(2)
    obs, act = gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(3)
    agent = DQN(obs, act, hidden_sizes=(16, 16), double=double, seed=0)
    n = 32
    next_mask = rng.random((n, 3)) < 0.6 if masked else None
    if masked:
        next_mask[:, 0] = True
    batch = Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                        rew=(rng.normal(size=n) * 3).astype(np.float32),  # |TD| on both sides of Huber's 1
                        next_obs=rng.normal(size=(n, 4)).astype(np.float32), terminated=rng.random(n) < 0.2,
                        truncated=np.zeros(n, bool), next_mask=next_mask,
                        weights=rng.uniform(0.1, 1.0, n).astype(np.float32))
    arrays = agent._arrays(batch)
    nets = agent.nets
    target = nets.td_target(arrays)
    np.testing.assert_array_equal(bits(target), bits(old_target(nets, arrays)))
    diff = np.abs(target - nets.q_values(arrays["obs"])[np.arange(n), arrays["act"]])
    assert (diff < 1).any() and (diff >= 1).any()
    loss, q, td_abs, grads = nets._loss(arrays, target)
    want_loss, want_q, want_grads = old_loss_grads(nets, arrays, target)
    assert loss == want_loss
    np.testing.assert_array_equal(bits(q), bits(want_q))
    np.testing.assert_array_equal(bits(td_abs), bits(np.abs(target - want_q)))
    for k in want_grads:
        np.testing.assert_array_equal(bits(grads[k]), bits(want_grads[k]), err_msg=k)
    metrics, td_abs = nets.train_step(arrays, "DQN", 1)  # |TD| of the step: |target - q| before the update
    np.testing.assert_array_equal(bits(td_abs), bits(np.abs(target - want_q)))


def test_dueling_dqn_step_matches_the_plain_loss():
    rng = np.random.default_rng(3)
    cfg = DQNConfig(hidden_sizes=(8,), dueling=True)
    w = q_net_weights("q_net", 4, 3, cfg, rng)
    assert "q_net.torso.0.weight" in w
    agent = DQN(gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(3), hidden_sizes=(8,),
                dueling=True, seed=1)
    batch = Transitions(obs=rng.normal(size=(8, 4)).astype(np.float32), act=rng.integers(0, 3, 8),
                        rew=np.ones(8, np.float32), next_obs=rng.normal(size=(8, 4)).astype(np.float32),
                        terminated=np.zeros(8, bool), truncated=np.zeros(8, bool))
    arrays = agent._arrays(batch)
    target = agent.nets.td_target(arrays)
    loss, *_, grads = agent.nets._loss(arrays, target)
    want_loss, _, want_grads = old_loss_grads(agent.nets, arrays, target)
    assert loss == want_loss
    for k in want_grads:
        np.testing.assert_array_equal(bits(grads[k]), bits(want_grads[k]), err_msg=k)


def test_unwindowed_replay_draws_the_generators_integers():
    space, act = gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(2)
    buf = ReplayBuffer(50, space, act, seed=7)
    rng = np.random.default_rng(0)
    buf.add(Transitions(obs=rng.normal(size=(30, 2)).astype(np.float32), act=rng.integers(0, 2, 30),
                        rew=np.ones(30, np.float32), next_obs=rng.normal(size=(30, 2)).astype(np.float32),
                        terminated=np.zeros(30, bool), truncated=np.zeros(30, bool)))
    ref = np.random.default_rng(7)
    for size in (1, 16, 64):
        np.testing.assert_array_equal(buf.sample_indices(size), ref.integers(0, 30, size=size, dtype=np.int64))
    buf.set_window(10)  # the newest 10 positions: 20..29
    drawn = buf.sample_indices(200)
    assert drawn.min() >= 20 and drawn.max() <= 29
    with pytest.raises(ValueError, match="positive integer"):
        buf.sample_indices(0)


@pytest.mark.parametrize("ended", [0.5, 1.0], ids=["half ended", "all ended"])
@pytest.mark.parametrize("masked", [False, True], ids=["all legal", "masked"])
@pytest.mark.parametrize("double", [False, True])
def test_dqn_next_state_passes_skip_the_ended_rows_with_the_same_bits(ended, masked, double, monkeypatch):
    """With a third or more of the batch ended (terminated, or no legal next action), the next-state passes
    run over the other rows only, and the TD target, |TD| and step are those of passes over every row."""
    import marl_note.agents.numpy.dqn as numpy_dqn

    rng = np.random.default_rng(4)
    n = 32
    next_mask = rng.random((n, 3)) < 0.6 if masked else None
    terminated = rng.random(n) < ended
    if masked:
        next_mask[:, 0] = True
        next_mask[:4] = False  # no legal next action: no next-state value either
        terminated[:4] = False
    batch = Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                        rew=(rng.normal(size=n) * 3).astype(np.float32),
                        next_obs=rng.normal(size=(n, 4)).astype(np.float32), terminated=terminated,
                        truncated=np.zeros(n, bool), next_mask=next_mask)
    skipping, full = (DQN(gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(3), hidden_sizes=(16, 16),
                          double=double, seed=0) for _ in range(2))
    arrays = skipping._arrays(batch)
    alive = arrays["alive"] > 0
    assert 0 < n - alive.sum() and (ended < 1 or not alive.any())
    seen = []
    for net in (skipping.nets.q_net, skipping.nets.target_net):
        for method in ("forward", "predict"):
            real = getattr(net, method)
            monkeypatch.setattr(net, method, lambda x, real=real: seen.append(len(x)) or real(x))
    target = skipping.nets.td_target(arrays)
    np.testing.assert_array_equal(bits(target), bits(old_target(full.nets, arrays)))
    np.testing.assert_array_equal(bits(target[~alive]), bits(arrays["rew"][~alive]))
    assert seen == [alive.sum()] * (2 if double else 1)  # the target network, then the online one (double)
    seen.clear()
    _, td_abs = skipping.nets.train_step(arrays, "DQN", 1)
    assert seen == ([n + alive.sum(), alive.sum()] if double else [alive.sum(), n])
    monkeypatch.setattr(numpy_dqn, "SKIP_ENDED", 2.0)  # evaluate every row
    _, want_td_abs = full.nets.train_step(arrays, "DQN", 1)
    np.testing.assert_array_equal(bits(td_abs), bits(want_td_abs))
    for k, v in full.state_dict().items():
        np.testing.assert_allclose(skipping.state_dict()[k], v, rtol=0, atol=1e-7, err_msg=k)


def test_dqn_evaluates_every_next_state_when_few_rows_ended():
    from marl_note.agents.numpy.dqn import SKIP_ENDED, DQNNetworks

    alive = np.ones(64, np.float32)
    few = int(np.ceil(SKIP_ENDED * 64)) - 1
    alive[:few] = 0
    assert DQNNetworks.live_rows(alive) is None
    alive[few] = 0
    np.testing.assert_array_equal(DQNNetworks.live_rows(alive), np.arange(few + 1, 64))
