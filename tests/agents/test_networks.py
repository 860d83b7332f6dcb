"""The backend seam: numpy weights, the same networks and numpy state in both backends."""
import numpy as np
import pytest

from marl_note.agents.networks import check_hidden_sizes, init_linear, mlp_forward, mlp_weights
from marl_note.rng import rng_from_array, rng_to_array
from marl_note.validation import positive_int, unit_interval


def build(backend, weights, activation):
    if backend == "torch":
        pytest.importorskip("torch")
        from marl_note.agents.torch.networks import TorchNetworks

        nets = TorchNetworks()
        net = nets.mlp("pi", weights, activation)
        import torch

        def forward(x):
            with torch.no_grad():
                return net(torch.as_tensor(x)).numpy()
    else:
        pytest.importorskip("tensorflow")
        from marl_note.agents.tf.networks import TFNetworks

        nets = TFNetworks()
        net = nets.mlp("pi", weights, activation)

        def forward(x):
            return net(x).numpy()
    nets.adam("optimizer", ["pi"], lr=1e-3)
    return nets, forward


@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize("activation", ["relu", "tanh", "elu", "gelu"])
def test_backend_networks_compute_what_numpy_computes(backend, activation):
    weights = mlp_weights("pi", 5, (16, 8), 3, np.random.default_rng(0))
    nets, forward = build(backend, weights, activation)
    x = np.random.default_rng(1).normal(size=(7, 5)).astype(np.float32)
    np.testing.assert_allclose(forward(x), mlp_forward(weights, "pi", x, activation), rtol=1e-5, atol=1e-5)
    state = nets.state_dict()
    for key, value in weights.items():
        np.testing.assert_array_equal(state[key], value)
    assert set(state) == set(weights) | {"optimizer.lr"}


def test_both_backends_write_the_same_state_keys_and_load_each_other():
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    w1 = mlp_weights("pi", 4, (6,), 2, np.random.default_rng(0))
    w2 = mlp_weights("pi", 4, (6,), 2, np.random.default_rng(9))
    torch_nets, torch_fwd = build("torch", w1, "relu")
    tf_nets, tf_fwd = build("tf", w2, "relu")
    assert set(torch_nets.state_dict()) == set(tf_nets.state_dict())
    tf_nets.load_state_dict(torch_nets.state_dict())
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(tf_fwd(x), torch_fwd(x), rtol=1e-6)
    assert torch_nets.optimizer_slot_shapes() == tf_nets.optimizer_slot_shapes() == {
        "optimizer": [(6, 4), (6,), (2, 6), (2,)]}


def test_numpy_init_is_seeded_and_orthogonal_init_is_orthogonal():
    a = mlp_weights("q", 3, (4,), 2, np.random.default_rng(5))
    b = mlp_weights("q", 3, (4,), 2, np.random.default_rng(5))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    w, bias = init_linear(8, 4, np.random.default_rng(0), "orthogonal", gain=2.0)
    np.testing.assert_allclose(w @ w.T, 4.0 * np.eye(4), atol=1e-5)
    assert not bias.any()
    bound = 1 / np.sqrt(8)
    w, bias = init_linear(8, 4, np.random.default_rng(0))
    assert np.abs(w).max() <= bound and np.abs(bias).max() <= bound
    with pytest.raises(ValueError, match="hidden_sizes must be positive"):
        check_hidden_sizes((4, 0))
    with pytest.raises(ValueError, match="unknown init"):
        init_linear(2, 2, np.random.default_rng(0), "xavier")


def test_rng_codec_round_trips_and_reads_the_old_replay_order():
    rng = np.random.default_rng(3)
    rng.random(5)
    saved = rng_to_array(rng)
    expected = rng.random(3)
    rng_from_array(rng, saved)
    np.testing.assert_array_equal(rng.random(3), expected)
    # release 0.1.0 replay buffers wrote the low 64-bit word first
    old = np.array([saved[1], saved[0], saved[3], saved[2], saved[4], saved[5]], np.uint64)
    fresh = np.random.default_rng()
    rng_from_array(fresh, old, low_first=True)
    rng_from_array(rng, saved)
    np.testing.assert_array_equal(fresh.random(3), rng.random(3))
    with pytest.raises(ValueError, match="6 unsigned 64-bit words"):
        rng_from_array(rng, np.zeros(5, np.uint64))


def test_validation_messages_name_the_argument():
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer \(rows per gradient step\), got 0"):
        positive_int("batch_size", 0, "rows per gradient step")
    with pytest.raises(ValueError, match="got True"):
        positive_int("n", True)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\]"):
        unit_interval("gamma", 1.5)
    with pytest.raises(TypeError, match="gamma must be a number"):
        unit_interval("gamma", "0.9")
    with pytest.raises(ValueError, match="got nan"):
        unit_interval("gamma", float("nan"))
