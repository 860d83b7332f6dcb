import io

import numpy as np
import pytest

from marl_note.replay import PrioritizedReplayBuffer
from tests.replay.helpers import ACT_SPACE, OBS_SPACE, make_batch


def make(capacity=16, n=10, **kw):
    buf = PrioritizedReplayBuffer(capacity, OBS_SPACE, ACT_SPACE, seed=kw.pop("seed", 0), **kw)
    if n:
        buf.add(make_batch(n))
    return buf


def snapshot(buf):
    return {k: np.array(v, copy=True) for k, v in buf.state_dict().items()}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def chi_square(counts, probs):
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_sampling_frequencies_follow_priority_to_the_alpha():
    alpha, eps = 0.7, 1e-6
    buf = make(capacity=16, n=10, alpha=alpha, eps=eps, seed=1)
    td = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 0.2, 3.0, 0.05, 1.5, 8.0])
    buf.update_priorities(np.arange(10), td * np.where(np.arange(10) % 2, -1, 1))  # sign must not matter
    counts = np.zeros(10)
    for _ in range(20):
        counts += np.bincount(buf.sample(5000).indices, minlength=10)
    probs = (td + eps) ** alpha / ((td + eps) ** alpha).sum()
    np.testing.assert_allclose(buf.priorities(), probs, rtol=1e-9)
    # 9 degrees of freedom: P(chi2 > 30) ~ 4e-4. With the fixed seed this is deterministic.
    assert chi_square(counts, probs) < 30
    wrong = (td + eps) / (td + eps).sum()  # alpha = 1 would be a different distribution
    assert chi_square(counts, wrong) > 300


def test_new_items_enter_at_running_max_priority():
    buf = make(n=3, alpha=0.5, initial_TD=2.0)
    np.testing.assert_allclose(buf.priorities(), [1 / 3] * 3)
    buf.update_priorities(np.array([0, 1, 2]), np.array([7.0, 0.0, 1.0]))
    assert buf.max_priority == 7.0
    buf.update_priorities(np.array([0]), np.array([0.0]))  # max is a running max
    idx = buf.add(make_batch(2, 3))
    raw = np.array([0.0, 0.0, 1.0, 7.0, 7.0]) + buf.eps
    np.testing.assert_allclose(buf.priorities(), raw ** 0.5 / (raw ** 0.5).sum())
    assert idx.tolist() == [3, 4]


def test_importance_weights_match_naive_reference_and_beta_anneals():
    buf = make(n=10, alpha=0.6, beta=0.4, beta_final=1.0, beta_annealing_steps=4)
    td = np.arange(1, 11, dtype=float)
    buf.update_priorities(np.arange(10), td)
    p = (td + buf.eps) ** 0.6
    probs = p / p.sum()
    for beta in [0.4, 0.55, 0.7, 0.85, 1.0, 1.0]:
        assert buf.beta == pytest.approx(beta)
        batch = buf.sample(64)
        w = (10 * probs[batch.indices]) ** -beta
        np.testing.assert_allclose(batch.weights, w / w.max(), rtol=1e-5)
        assert batch.weights.dtype == np.float32 and batch.weights.max() == pytest.approx(1.0)
        np.testing.assert_array_equal(batch.rew, batch.indices.astype(np.float32))


def test_effective_sample_size_matches_naive():
    buf = make(n=10, alpha=1.0, eps=0.0)
    assert buf.effective_sample_size() == pytest.approx(10.0)
    td = np.array([5.0, 1, 1, 1, 1, 0, 0, 2, 3, 0.5])
    buf.update_priorities(np.arange(10), td)
    q = td / td.sum()
    assert buf.effective_sample_size() == pytest.approx(1.0 / np.sum(q ** 2))
    buf.update_priorities(np.arange(10), np.eye(10)[3])
    assert buf.effective_sample_size() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="empty"):
        make(n=0).effective_sample_size()


def test_ppo_priority_mixes_td_and_ratio():
    buf = make(n=4, alpha=1.0, eps=0.0)
    td, ratios = np.array([1.0, -2.0, 0.0, 0.5]), np.array([1.0, 0.5, 1.4, 3.0])
    buf.update_priorities(np.arange(4), td, ratios=ratios, lambda_=0.25)
    raw = 0.25 * np.abs(td) + 0.75 * np.abs(ratios - 1.0)
    np.testing.assert_allclose(buf.priorities(), raw / raw.sum())
    assert buf.max_priority == pytest.approx(max(1.0, raw.max()))


@pytest.mark.parametrize("kwargs,match", [
    (dict(td_errors=[np.nan, 1.0]), "finite"),
    (dict(td_errors=[1.0]), "shape"),
    (dict(td_errors=[1.0, 2.0], ratios=[1.0, -1.0], lambda_=0.5), "ratios"),
    (dict(td_errors=[1.0, 2.0], ratios=[1.0, 1.0]), "lambda_"),
    (dict(td_errors=[1.0, 2.0], ratios=[1.0, 1.0], lambda_=1.5), "lambda_"),
    (dict(indices=[0, 10], td_errors=[1.0, 2.0]), "indices"),
])
def test_bad_priority_updates_change_nothing(kwargs, match):
    buf = make(n=10)
    buf.update_priorities(np.arange(10), np.arange(10.0))
    before = snapshot(buf)
    kwargs = {"indices": np.array([0, 1]), **kwargs}
    kwargs["indices"] = np.asarray(kwargs["indices"])
    with pytest.raises(ValueError, match=match):
        buf.update_priorities(**kwargs)
    assert_same(before, snapshot(buf))
    with pytest.raises(ValueError, match="non-negative"):
        buf.set_priorities(np.array([1]), np.array([-1.0]))
    assert_same(before, snapshot(buf))


@pytest.mark.parametrize("kwargs,match", [(dict(alpha=-0.1), "alpha"), (dict(beta=1.2), "beta"),
                                          (dict(beta=-0.1), "beta"), (dict(beta_final=2.0), "beta_final"),
                                          (dict(alpha=float("nan")), "alpha"), (dict(initial_TD=0.0), "initial_TD"),
                                          (dict(beta_annealing_steps=-1), "annealing")])
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrioritizedReplayBuffer(8, OBS_SPACE, ACT_SPACE, **kwargs)


def test_bad_add_leaves_storage_and_tree_intact():
    buf = make(n=5)
    before = snapshot(buf)
    with pytest.raises(ValueError, match="obs"):
        buf.add(make_batch(3, obs_dim=2))
    assert_same(before, snapshot(buf))


def test_overwritten_items_get_fresh_priority():
    buf = make(capacity=4, n=4, alpha=1.0, eps=0.0)
    buf.update_priorities(np.arange(4), np.array([0.0, 0.0, 0.0, 3.0]))
    buf.add(make_batch(1, 10))  # overwrites slot 0 at max priority 3
    np.testing.assert_allclose(buf.priorities(), [0.5, 0.0, 0.0, 0.5])
    assert set(buf.sample(200).indices.tolist()) == {0, 3}


def test_state_dict_roundtrip_includes_tree_and_schedule():
    buf = make(n=10, alpha=0.5, beta_annealing_steps=10)
    buf.update_priorities(np.arange(10), np.linspace(0, 3, 10))
    buf.sample(4)
    f = io.BytesIO()
    np.savez(f, **buf.state_dict())
    f.seek(0)
    other = PrioritizedReplayBuffer(16, OBS_SPACE, ACT_SPACE, alpha=0.5, beta_annealing_steps=10, seed=99)
    other.load_state_dict(dict(np.load(f, allow_pickle=False)))
    np.testing.assert_allclose(other.priorities(), buf.priorities())
    assert other.beta == buf.beta and other.max_priority == buf.max_priority
    a, b = other.sample(32), buf.sample(32)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)


@pytest.mark.parametrize("mutate,match", [
    (lambda s: s.pop("per_tree_leaves"), "per_tree_leaves"),
    (lambda s: s.update(per_alpha=np.float64(-0.5)), "alpha must be finite and >= 0"),  # another alpha is adopted
    (lambda s: s.update(per_tree_leaves=-s["per_tree_leaves"] - 1), "non-negative"),
    (lambda s: s.update(per_tree_leaves=np.ones(16)), "beyond"),
    (lambda s: s.pop("obs"), "obs"),
])
def test_load_state_dict_rejects_bad_state(mutate, match):
    state = make(n=5).state_dict()
    mutate(state)
    dst = make(n=3, seed=4)
    dst.update_priorities(np.arange(3), np.array([1.0, 2.0, 3.0]))
    before = snapshot(dst)
    with pytest.raises(ValueError, match=match):
        dst.load_state_dict(state)
    assert_same(before, snapshot(dst))
