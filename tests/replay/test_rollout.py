import numpy as np
import pytest

from marl_note.replay import RolloutBuffer, compute_gae
from tests.replay.helpers import ACT_SPACE, OBS_SPACE, make_batch


def gae_reference(rew, values, next_values, terminated, truncated, stream, gamma, lam):
    """Per stream, one transition at a time, straight from the definition."""
    n = len(rew)
    stream = np.zeros(n, int) if stream is None else stream
    adv = np.zeros(n)
    for s in set(stream.tolist()):
        idx = [i for i in range(n) if stream[i] == s]
        following = None
        for i in reversed(idx):
            delta = rew[i] + gamma * next_values[i] * (0.0 if terminated[i] else 1.0) - values[i]
            if following is None:
                adv[i] = delta
            else:
                done = terminated[i] or truncated[i]
                adv[i] = delta + gamma * lam * (0.0 if done else 1.0) * adv[following]
            following = i
    return adv, adv + values


def random_case(rng, n, n_streams):
    return dict(rew=rng.normal(size=n), values=rng.normal(size=n), next_values=rng.normal(size=n),
                terminated=rng.random(n) < 0.1, truncated=rng.random(n) < 0.1,
                stream=rng.integers(0, n_streams, n) * 7 - 3)  # arbitrary (negative too) ids


@pytest.mark.parametrize("seed,n,n_streams", [(0, 1, 1), (1, 50, 1), (2, 200, 5), (3, 64, 64), (4, 300, 3)])
def test_gae_matches_reference_with_interleaved_streams(seed, n, n_streams):
    rng = np.random.default_rng(seed)
    case = random_case(rng, n, n_streams)
    adv, ret = compute_gae(**case, gamma=0.97, lam=0.9)
    ref_adv, ref_ret = gae_reference(**case, gamma=0.97, lam=0.9)
    assert adv.shape == (n,) and ret.shape == (n,) and adv.dtype == np.float32
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_gae_interleaving_differs_from_treating_as_one_stream():
    rng = np.random.default_rng(5)
    case = random_case(rng, 40, 2)
    adv, _ = compute_gae(**case, gamma=0.9, lam=0.8)
    merged, _ = compute_gae(**{**case, "stream": None}, gamma=0.9, lam=0.8)
    ref_merged, _ = gae_reference(**{**case, "stream": None}, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(merged, ref_merged, rtol=1e-5, atol=1e-5)
    assert not np.allclose(adv, merged)


def test_truncation_bootstraps_termination_does_not():
    kw = dict(rew=np.array([1.0, 1.0]), values=np.zeros(2), next_values=np.array([2.0, 10.0]), gamma=0.5, lam=1.0)
    trunc, _ = compute_gae(**kw, terminated=np.array([False, False]), truncated=np.array([False, True]))
    term, _ = compute_gae(**kw, terminated=np.array([False, True]), truncated=np.array([False, False]))
    # truncated last step: 1 + 0.5 * 10; terminated: 1
    assert trunc[1] == pytest.approx(6.0) and term[1] == pytest.approx(1.0)
    assert trunc[0] == pytest.approx(1 + 0.5 * 2 + 0.5 * 6.0) and term[0] == pytest.approx(1 + 0.5 * 2 + 0.5 * 1.0)
    # a done step does not propagate the following (new episode) advantage backwards
    cut, _ = compute_gae(rew=[1.0, 5.0], values=[0.0, 0.0], next_values=[3.0, 0.0], terminated=[False, False],
                         truncated=[True, False], gamma=0.5, lam=1.0)
    assert cut.tolist() == [2.5, 5.0]


def test_gae_rejects_bad_input():
    with pytest.raises(ValueError, match="values has shape"):
        compute_gae([1.0, 2.0], [0.0], [0.0, 0.0], [False, False], [False, False])
    with pytest.raises(ValueError, match="gamma"):
        compute_gae([1.0], [0.0], [0.0], [False], [False], gamma=1.5)


def test_rollout_buffer_keeps_arrival_order_and_extras():
    buf = RolloutBuffer(OBS_SPACE, ACT_SPACE)
    buf.add(make_batch(3, 0, stream=[0, 1, 2]), log_prob=np.array([0.1, 0.2, 0.3]))
    buf.add(make_batch(2, 3, stream=[1, 0]), log_prob=np.array([0.4, 0.5]))
    assert len(buf) == 5
    t = buf.get()
    assert t.rew.tolist() == [0, 1, 2, 3, 4] and t.stream.tolist() == [0, 1, 2, 1, 0]
    assert t.obs.dtype == np.float32 and t.act.dtype == np.int64
    np.testing.assert_allclose(buf.extras()["log_prob"], [0.1, 0.2, 0.3, 0.4, 0.5])
    buf.clear()
    assert len(buf) == 0 and buf.extras() == {}
    with pytest.raises(ValueError, match="empty"):
        buf.get()


def test_rollout_buffer_copies_input():
    buf = RolloutBuffer(OBS_SPACE, ACT_SPACE)
    chunk = make_batch(2, stream=[0, 0])
    buf.add(chunk)
    chunk.obs[:] = 99.0
    chunk.stream[:] = 5
    assert buf.get().obs.max() < 99 and buf.get().stream.tolist() == [0, 0]


def test_rollout_buffer_rejects_inconsistent_chunks():
    buf = RolloutBuffer(OBS_SPACE, ACT_SPACE)
    buf.add(make_batch(2, stream=[0, 1], masks=True), value=np.zeros(2))
    with pytest.raises(ValueError, match="optional fields"):
        buf.add(make_batch(2, stream=[0, 1]), value=np.zeros(2))
    with pytest.raises(ValueError, match="extras"):
        buf.add(make_batch(2, stream=[0, 1], masks=True))
    with pytest.raises(ValueError, match="leading axis"):
        buf.add(make_batch(2, stream=[0, 1], masks=True), value=np.zeros(3))
    with pytest.raises(ValueError, match="obs has shape"):
        buf.add(make_batch(2, stream=[0, 1], masks=True, obs_dim=2), value=np.zeros(2))
    assert len(buf) == 2


def test_rollout_then_gae_end_to_end():
    buf = RolloutBuffer(OBS_SPACE, ACT_SPACE)
    rng = np.random.default_rng(0)
    for step in range(6):
        buf.add(make_batch(3, 3 * step, stream=[0, 1, 2]), value=rng.normal(size=3), next_value=rng.normal(size=3))
    t, ex = buf.get(), buf.extras()
    adv, ret = compute_gae(t.rew, ex["value"], ex["next_value"], t.terminated, t.truncated, t.stream, 0.99, 0.95)
    ref, _ = gae_reference(t.rew, ex["value"], ex["next_value"], t.terminated, t.truncated, t.stream, 0.99, 0.95)
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5)
