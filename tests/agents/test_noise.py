import numpy as np
import pytest

from marl_note.agents.exploration.noise import (
    GaussianWhiteNoiseProcess,
    OrnsteinUhlenbeckProcess,
    rng_from_array,
    rng_to_array,
)


def test_white_noise_mean_std():
    noise = GaussianWhiteNoiseProcess(mu=0.5, sigma=2.0, size=(50_000,), seed=0)
    x = noise.sample()
    assert x.shape == (50_000,)
    assert abs(x.mean() - 0.5) < 0.05 and abs(x.std() - 2.0) < 0.05
    seq = np.array([GaussianWhiteNoiseProcess(sigma=1.0, size=2, seed=1).sample() for _ in range(3)])
    assert np.allclose(seq[0], seq[1])  # same seed, same first sample


def test_white_noise_sequential_samples_independent():
    noise = GaussianWhiteNoiseProcess(sigma=1.0, size=1, seed=3)
    x = np.array([noise.sample()[0] for _ in range(20_000)])
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1.0) < 0.05
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.05


def test_annealing_endpoints():
    noise = GaussianWhiteNoiseProcess(sigma=1.0, sigma_min=0.1, n_steps_annealing=100, seed=0)
    assert noise.current_sigma == 1.0
    for _ in range(50):
        noise.sample()
    assert np.isclose(noise.current_sigma, 0.55)
    for _ in range(50):
        noise.sample()
    assert noise.current_sigma == 0.1
    for _ in range(10):
        noise.sample()
    assert noise.current_sigma == 0.1
    # without sigma_min the sigma is constant
    const = GaussianWhiteNoiseProcess(sigma=0.3, n_steps_annealing=5, seed=0)
    for _ in range(10):
        const.sample()
    assert const.current_sigma == 0.3
    # the annealed samples really shrink
    late = GaussianWhiteNoiseProcess(sigma=1.0, sigma_min=0.1, n_steps_annealing=1, size=(20_000,), seed=0)
    late.sample()
    assert abs(late.sample().std() - 0.1) < 0.005


def test_ou_deterministic_mean_reversion():
    ou = OrnsteinUhlenbeckProcess(theta=0.5, mu=1.0, sigma=0.0, dt=0.1, x0=5.0, size=1, seed=0)
    xs = np.array([ou.sample()[0] for _ in range(30)])
    expected = 1.0 + 4.0 * (1 - 0.5 * 0.1) ** np.arange(1, 31)
    np.testing.assert_allclose(xs, expected)


def test_ou_statistics():
    theta, mu, sigma, dt, x0 = 0.3, -1.0, 0.5, 0.1, 3.0
    ou = OrnsteinUhlenbeckProcess(theta, mu=mu, sigma=sigma, dt=dt, x0=x0, size=(20_000,), seed=1)
    a = 1 - theta * dt
    for t in range(1, 201):
        x = ou.sample()
        if t in (10, 200):
            mean = mu + (x0 - mu) * a ** t
            std = sigma * np.sqrt(dt * (1 - a ** (2 * t)) / (1 - a ** 2))
            assert abs(x.mean() - mean) < 4 * std / np.sqrt(len(x)) + 1e-3
            assert abs(x.std() - std) < 0.03 * std
    # strongly correlated in time, unlike white noise
    single = OrnsteinUhlenbeckProcess(0.15, sigma=0.3, size=1, seed=2)
    xs = np.array([single.sample()[0] for _ in range(3000)])
    assert np.corrcoef(xs[:-1], xs[1:])[0, 1] > 0.9


def test_ou_reset_and_batched_reset():
    ou = OrnsteinUhlenbeckProcess(theta=0.15, sigma=1.0, size=(3, 2), x0=0.5, seed=0)
    for _ in range(5):
        ou.sample()
    ou.reset([1])
    np.testing.assert_array_equal(ou.x_prev[1], [0.5, 0.5])
    assert not np.allclose(ou.x_prev[0], 0.5)
    ou.reset()
    np.testing.assert_array_equal(ou.x_prev, np.full((3, 2), 0.5))
    assert ou.n_steps == 5  # reset does not restart the annealing schedule


@pytest.mark.parametrize("make", [
    lambda: GaussianWhiteNoiseProcess(sigma=1.0, sigma_min=0.2, n_steps_annealing=20, size=3, seed=5),
    lambda: OrnsteinUhlenbeckProcess(0.2, sigma=1.0, sigma_min=0.2, n_steps_annealing=20, size=3, seed=5),
])
def test_state_dict_round_trip(make):
    a = make()
    for _ in range(7):
        a.sample()
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    b = make()
    b.load_state_dict(state)
    for _ in range(20):
        np.testing.assert_array_equal(a.sample(), b.sample())
    assert a.current_sigma == b.current_sigma == 0.2


def test_rng_state_helpers():
    rng = np.random.default_rng(123)
    rng.random(3)
    saved = rng_to_array(rng)
    assert saved.dtype == np.uint64 and saved.shape == (6,)
    x = rng.normal(size=5)
    rng_from_array(rng, saved)
    np.testing.assert_array_equal(rng.normal(size=5), x)
    with pytest.raises(TypeError):
        rng_to_array(np.random.Generator(np.random.MT19937(0)))


def test_invalid_parameters():
    with pytest.raises(ValueError):
        GaussianWhiteNoiseProcess(sigma=-1.0)
    with pytest.raises(ValueError):
        OrnsteinUhlenbeckProcess(theta=-0.1)
