import numpy as np
import pytest

from marl_note.agents.exploration.masked import masked_softmax
from marl_note.agents.exploration.policies import (
    BoltzmannGumbelQPolicy,
    BoltzmannQPolicy,
    EpsGreedyQPolicy,
    GreedyQPolicy,
    GumbelSoftmaxPolicy,
    LinearSchedule,
    MaxBoltzmannQPolicy,
    SoftmaxPolicy,
)

ALL_POLICIES = [
    lambda: GreedyQPolicy(),
    lambda: EpsGreedyQPolicy(eps=0.5),
    lambda: SoftmaxPolicy(),
    lambda: BoltzmannQPolicy(tau=0.5),
    lambda: MaxBoltzmannQPolicy(eps=0.5, tau=2.0),
    lambda: BoltzmannGumbelQPolicy(C=2.0),
    lambda: GumbelSoftmaxPolicy(temperature=0.5),
]
IDS = ["greedy", "eps", "softmax", "boltzmann", "maxboltzmann", "boltzmanngumbel", "gumbelsoftmax"]

N = 20_000
Q = np.array([1.0, 2.0, 5.0, 0.5])  # action 2 is best but illegal below
MASK = np.array([True, True, False, True])


def freqs(actions, n):
    return np.bincount(actions, minlength=n) / len(actions)


def assert_matches(actions, expected):
    f = freqs(actions, len(expected))
    tol = 4.5 * np.sqrt(expected * (1 - expected) / len(actions)) + 1e-9
    assert np.all(np.abs(f - expected) <= tol), (f, expected)


@pytest.mark.parametrize("make", ALL_POLICIES, ids=IDS)
def test_never_selects_masked_action(make):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(5000, 6)) * 3
    values[:, 0] += 100.0  # the masked action often looks best
    mask = rng.random((5000, 6)) < 0.4
    mask[:, 0] = False
    mask[np.arange(5000), rng.integers(1, 6, 5000)] = True  # at least one legal action per row
    policy = make()
    for _ in range(3):
        a = policy.select(values, mask, rng)
        assert a.shape == (5000,) and a.dtype == np.int64
        assert mask[np.arange(5000), a].all()


@pytest.mark.parametrize("make", ALL_POLICIES, ids=IDS)
def test_unmasked_selection_in_range(make):
    rng = np.random.default_rng(1)
    a = make().select(rng.normal(size=(300, 5)), None, rng)
    assert a.min() >= 0 and a.max() < 5


@pytest.mark.parametrize("make", ALL_POLICIES, ids=IDS)
def test_bad_masks_raise(make):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="no legal action"):
        make().select(np.zeros((2, 3)), np.array([[True, False, False], [False, False, False]]), rng)
    with pytest.raises(ValueError, match="does not match"):
        make().select(np.zeros((2, 3)), np.ones((2, 4), bool), rng)
    with pytest.raises(ValueError, match="2-d"):
        make().select(np.zeros(3), None, rng)


def test_greedy_distribution():
    a = GreedyQPolicy().select(np.tile(Q, (10, 1)), np.tile(MASK, (10, 1)), None)
    assert (a == 1).all()


def test_eps_greedy_distribution():
    a = EpsGreedyQPolicy(eps=0.3).select(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)), np.random.default_rng(2))
    assert_matches(a, np.array([0.1, 0.7 + 0.1, 0.0, 0.1]))


def test_softmax_distribution():
    a = SoftmaxPolicy().select(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)), np.random.default_rng(3))
    p = np.exp(Q) * MASK
    assert_matches(a, p / p.sum())


def test_boltzmann_distribution_and_clip():
    policy = BoltzmannQPolicy(tau=2.0)
    a = policy.select(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)), np.random.default_rng(4))
    p = np.exp(Q / 2.0) * MASK
    assert_matches(a, p / p.sum())
    # huge values are clipped, not overflowing
    probs = BoltzmannQPolicy(tau=1e-3, clip=(-50, 50)).probs(np.array([[1e6, 2e6, 0.0]]))
    assert np.isfinite(probs).all() and np.isclose(probs.sum(), 1.0)


def test_max_boltzmann_distribution():
    a = MaxBoltzmannQPolicy(eps=0.4, tau=1.0).select(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)),
                                                     np.random.default_rng(5))
    boltz = np.exp(Q) * MASK
    expected = 0.4 * boltz / boltz.sum() + 0.6 * np.eye(4)[1]
    assert_matches(a, expected)


def test_boltzmann_gumbel_distribution_and_counts():
    policy = BoltzmannGumbelQPolicy(C=2.0)
    a = policy.select(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)), np.random.default_rng(6))
    # fresh counts are all 1, so beta = C and argmax(q + C * Gumbel) ~ softmax(q / C)
    p = np.exp(Q / 2.0) * MASK
    assert_matches(a, p / p.sum())
    np.testing.assert_array_equal(policy.action_counts, 1 + np.bincount(a, minlength=4))
    # counts shrink the perturbation: a heavily tried action is perturbed less
    state = policy.state_dict()
    clone = BoltzmannGumbelQPolicy(C=2.0)
    clone.load_state_dict(state)
    np.testing.assert_array_equal(clone.action_counts, policy.action_counts)
    assert (BoltzmannGumbelQPolicy(C=0.0).select(np.tile(Q, (5, 1)), None, np.random.default_rng(0)) == 2).all()


def test_gumbel_softmax_select_and_probs():
    policy = GumbelSoftmaxPolicy(temperature=0.3)
    a = policy.select(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)), np.random.default_rng(7))
    p = np.exp(Q) * MASK
    assert_matches(a, p / p.sum())  # the temperature does not change the hard sample
    logits = np.tile(Q, (3, 1))
    mask = np.tile(MASK, (3, 1))
    plain = policy.probs(logits, mask, temperature=2.0)
    np.testing.assert_allclose(plain, masked_softmax(logits / 2.0, mask))
    relaxed = policy.probs(logits, mask, rng=np.random.default_rng(0))
    assert np.allclose(relaxed.sum(axis=1), 1.0) and (relaxed[:, 2] == 0).all()
    # argmax of the relaxed sample is distributed like select()
    rng = np.random.default_rng(8)
    hard = policy.probs(np.tile(Q, (N, 1)), np.tile(MASK, (N, 1)), temperature=5.0, rng=rng).argmax(axis=1)
    assert_matches(hard, p / p.sum())
    # a cold relaxed sample is nearly one-hot
    cold = policy.probs(logits, mask, temperature=1e-3, rng=np.random.default_rng(1))
    assert np.allclose(cold.max(axis=1), 1.0)


def test_linear_schedule_endpoints():
    s = LinearSchedule(1.0, 0.05, 100)
    assert s.value(0) == 1.0 and s.value(100) == 0.05 and s.value(10**6) == 0.05
    assert np.isclose(s.value(50), 0.525)
    assert LinearSchedule(0.3).value(10**9) == 0.3


@pytest.mark.parametrize("make, attr, start, end", [
    (lambda: EpsGreedyQPolicy(eps=1.0, eps_min=0.05, n_steps_annealing=1000), "eps", 1.0, 0.05),
    (lambda: BoltzmannQPolicy(tau=5.0, tau_min=0.5, n_steps_annealing=1000), "tau", 5.0, 0.5),
    (lambda: MaxBoltzmannQPolicy(eps=0.5, eps_min=0.0, tau=1.0, n_steps_annealing=1000), "eps", 0.5, 0.0),
    (lambda: GumbelSoftmaxPolicy(temperature=1.0, temperature_min=0.1, n_steps_annealing=1000),
     "temperature", 1.0, 0.1),
])
def test_annealing_and_state_dict(make, attr, start, end):
    policy = make()
    assert getattr(policy, attr) == start
    policy.step(500)
    assert np.isclose(getattr(policy, attr), (start + end) / 2)
    state = policy.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    clone = make()
    clone.load_state_dict(state)
    assert getattr(clone, attr) == getattr(policy, attr)
    policy.step(600)
    assert getattr(policy, attr) == end
    assert attr in policy.metrics()


def test_eps_greedy_annealed_to_zero_is_greedy():
    policy = EpsGreedyQPolicy(eps=1.0, eps_min=0.0, n_steps_annealing=10)
    policy.step(10)
    a = policy.select(np.tile(Q, (100, 1)), np.tile(MASK, (100, 1)), np.random.default_rng(0))
    assert (a == 1).all()


def test_invalid_parameters():
    with pytest.raises(ValueError):
        EpsGreedyQPolicy(eps=1.5)
    with pytest.raises(ValueError):
        BoltzmannQPolicy(tau=0.0)
    with pytest.raises(ValueError):
        LinearSchedule(1.0, 0.0, 0)


def test_random_agent_batches_dict_observations():
    """A goal env's batch is a dict of arrays: the batch size is its arrays' length, not the key count."""
    from marl_note.agents import RandomAgent
    from marl_note.envs import PointReachEnv

    env = PointReachEnv()
    agent = RandomAgent(env.action_space, seed=0)
    obs = {k: np.zeros((5, *space.shape)) for k, space in env.observation_space.spaces.items()}
    actions = agent.act(obs)
    assert actions.shape == (5, *env.action_space.shape)
    assert all(env.action_space.contains(a) for a in actions)


def test_argmax_checked_matches_the_float64_masked_argmax_on_ties_nans_and_ints():
    from marl_note.agents.exploration.masked import argmax_checked, check_values, masked_values

    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float16, np.float64, np.int64):
        for _ in range(50):
            values = rng.integers(-2, 2, (6, 5)).astype(dtype)  # many ties
            if dtype != np.int64:
                values[rng.random(values.shape) < 0.1] = np.nan
            mask = rng.random((6, 5)) < 0.5
            mask[np.arange(6), rng.integers(0, 5, 6)] = True
            for m in (mask, None):
                want = masked_values(values, m).argmax(axis=1)
                got = argmax_checked(*check_values(values, m))
                assert got.dtype == np.int64 and got.tolist() == want.tolist()
