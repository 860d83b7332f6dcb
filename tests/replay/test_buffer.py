import io
import sys

import gymnasium as gym
import numpy as np
import pytest

from marl_note.replay import ReplayBuffer
from marl_note.types import Transitions
from tests.replay.helpers import ACT_SPACE, OBS_SPACE, make_batch


def ids_in(buf: ReplayBuffer) -> list[int]:
    return sorted(buf.column("rew").astype(int).tolist())


def test_add_then_get_roundtrip_and_dtypes():
    buf = ReplayBuffer(10, OBS_SPACE, ACT_SPACE, seed=0)
    idx = buf.add(make_batch(4))
    assert idx.tolist() == [0, 1, 2, 3] and len(buf) == 4
    t = buf.get(np.array([2, 0]))
    assert t.obs.dtype == np.float32 and t.act.dtype == np.int64 and t.rew.dtype == np.float32
    assert t.terminated.dtype == bool and t.truncated.dtype == bool
    assert t.rew.tolist() == [2.0, 0.0]
    assert t.obs[:, 0].tolist() == [2.0, 0.0] and t.next_obs[:, 0].tolist() == [2.5, 0.5]
    assert t.act.tolist() == [2, 0] and t.terminated.tolist() == [False, True]
    assert t.truncated.tolist() == [False, True]
    assert t.indices.tolist() == [2, 0] and t.mask is None and t.discount is None and t.weights is None


def test_wraparound_keeps_latest_items_in_ring_positions():
    buf = ReplayBuffer(5, OBS_SPACE, ACT_SPACE)
    buf.add(make_batch(3, 0))
    idx = buf.add(make_batch(4, 3))  # items 3..6 -> slots 3,4,0,1
    assert idx.tolist() == [3, 4, 0, 1]
    assert len(buf) == 5
    assert buf.column("rew").astype(int).tolist() == [5, 6, 2, 3, 4]
    np.testing.assert_array_equal(buf.column("obs")[:, 0], [5, 6, 2, 3, 4])


def test_batch_larger_than_capacity_keeps_last_items_like_one_by_one():
    big = ReplayBuffer(4, OBS_SPACE, ACT_SPACE)
    big.add(make_batch(2, 100))
    idx = big.add(make_batch(11, 0))
    one = ReplayBuffer(4, OBS_SPACE, ACT_SPACE)
    one.add(make_batch(2, 100))
    for i in range(11):
        one.add(make_batch(1, i))
    assert ids_in(big) == [7, 8, 9, 10]
    np.testing.assert_array_equal(big.column("rew"), one.column("rew"))
    np.testing.assert_array_equal(big.column("obs"), one.column("obs"))
    assert sorted(idx.tolist()) == [0, 1, 2, 3]
    assert big.column("rew")[idx].astype(int).tolist() == [7, 8, 9, 10]
    # the pointer advanced as if one by one: the next item overwrites the oldest (7)
    big.add(make_batch(1, 50))
    assert ids_in(big) == [8, 9, 10, 50]


def test_sample_uniform_and_reproducible():
    buf = ReplayBuffer(100, OBS_SPACE, ACT_SPACE, seed=3)
    buf.add(make_batch(10))
    t = buf.sample(20000)
    assert t.indices.shape == (20000,) and t.obs.shape == (20000, 3)
    np.testing.assert_array_equal(t.rew, t.indices.astype(np.float32))  # fields agree with indices
    counts = np.bincount(t.indices, minlength=10)
    assert counts.min() > 1800 and counts.max() < 2200
    a, b = ReplayBuffer(100, OBS_SPACE, ACT_SPACE, seed=5), ReplayBuffer(100, OBS_SPACE, ACT_SPACE, seed=5)
    a.add(make_batch(10))
    b.add(make_batch(10))
    np.testing.assert_array_equal(a.sample(50).indices, b.sample(50).indices)


def test_sample_only_from_filled_part_and_returns_copies():
    buf = ReplayBuffer(1000, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(make_batch(3))
    t = buf.sample(500)
    assert set(t.indices.tolist()) == {0, 1, 2}
    t.obs[:] = -1
    assert (buf.column("obs") >= 0).all()


def test_masks_and_discount_stored_lazily():
    buf = ReplayBuffer(8, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(make_batch(3, masks=True, discount=True))
    t = buf.get(np.arange(3))
    assert t.mask.shape == (3, 4) and t.mask.dtype == bool
    np.testing.assert_array_equal(t.mask, make_batch(3, masks=True).mask)
    np.testing.assert_array_equal(t.next_mask, ~t.mask)
    np.testing.assert_allclose(t.discount, [1.0, 0.9, 0.81], rtol=1e-6)
    with pytest.raises(ValueError, match="stores"):
        buf.add(make_batch(2, 3))  # masks missing now
    assert len(buf) == 3
    plain = ReplayBuffer(8, OBS_SPACE, ACT_SPACE)
    plain.add(make_batch(2))
    with pytest.raises(ValueError, match="without them"):
        plain.add(make_batch(2, masks=True))
    assert len(plain) == 2


def test_mask_width_must_match_discrete_actions():
    buf = ReplayBuffer(8, OBS_SPACE, ACT_SPACE)
    bad = make_batch(2, masks=True)
    bad.mask = np.ones((2, 5), bool)
    bad.next_mask = np.ones((2, 5), bool)
    with pytest.raises(ValueError, match="action space has 4"):
        buf.add(bad)
    assert len(buf) == 0


@pytest.mark.parametrize("field,value,match", [
    ("obs", np.zeros((4, 2)), "obs has shape"),
    ("next_obs", np.zeros((3, 3)), "next_obs has shape"),
    ("act", np.zeros((4, 1), int), "act has shape"),
    ("terminated", np.zeros(5, bool), "terminated has shape"),
    ("rew", np.zeros((4, 1)), "rew must be 1-D"),
    ("obs", np.array([["a"] * 3] * 4), "numeric"),
])
def test_bad_batches_raise_before_writing(field, value, match):
    buf = ReplayBuffer(6, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(make_batch(5))
    before = {k: v.copy() for k, v in buf.state_dict().items()}
    bad = make_batch(4, 10)
    setattr(bad, field, value)
    with pytest.raises(ValueError, match=match):
        buf.add(bad)
    after = buf.state_dict()
    assert len(buf) == 5 and before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(capacity, OBS_SPACE, ACT_SPACE)


def test_sample_errors():
    buf = ReplayBuffer(4, OBS_SPACE, ACT_SPACE)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)
    buf.add(make_batch(2))
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(0)
    with pytest.raises(ValueError, match="indices"):
        buf.get(np.array([2]))


def test_other_spaces_shapes():
    buf = ReplayBuffer(4, gym.spaces.Box(0, 255, (2, 2), np.uint8), gym.spaces.Box(-1, 1, (2,)))
    t = Transitions(obs=np.full((3, 2, 2), 7), act=np.zeros((3, 2)), rew=np.zeros(3),
                    next_obs=np.zeros((3, 2, 2)), terminated=np.zeros(3), truncated=np.zeros(3))
    buf.add(t)
    got = buf.get(np.arange(3))
    assert got.obs.dtype == np.uint8 and got.obs.shape == (3, 2, 2) and got.act.dtype == np.float32
    with pytest.raises(TypeError):
        ReplayBuffer(4, gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), ACT_SPACE)


def test_state_dict_roundtrip_through_npz_without_pickle():
    buf = ReplayBuffer(5, OBS_SPACE, ACT_SPACE, seed=7)
    buf.add(make_batch(7, masks=True, discount=True))
    state = buf.state_dict()
    assert all(isinstance(v, (np.ndarray, np.generic)) for v in state.values())
    f = io.BytesIO()
    np.savez(f, **state)
    f.seek(0)
    loaded = dict(np.load(f, allow_pickle=False))
    other = ReplayBuffer(5, OBS_SPACE, ACT_SPACE, seed=123)
    other.load_state_dict(loaded)
    assert len(other) == 5
    for name in ("obs", "act", "rew", "mask", "next_mask", "discount"):
        np.testing.assert_array_equal(other.column(name), buf.column(name))
    # same generator state -> same samples; same pointer -> same overwrite position
    np.testing.assert_array_equal(other.sample(30).indices, buf.sample(30).indices)
    one = make_batch(1, 99, masks=True, discount=True)
    assert other.add(one).tolist() == buf.add(one).tolist() == [2]


@pytest.mark.parametrize("mutate,match", [
    (lambda s: s.pop("rew"), "missing keys \\['rew'\\]"),
    (lambda s: s.update(extra=np.zeros(1)), "unknown keys \\['extra'\\]"),
    (lambda s: s.update(obs=np.zeros((3, 4), np.float32)), "obs.*shape"),
    (lambda s: s.update(capacity=np.int64(9)), "capacity 9"),
    (lambda s: s.update(act=s["act"].astype(np.int32)), "act.*dtype"),
    (lambda s: s.update(ptr=np.int64(1)), "ptr"),
    (lambda s: s.pop("rng_state"), "rng_state"),
])
def test_load_state_dict_validates_and_leaves_buffer_intact(mutate, match):
    src = ReplayBuffer(5, OBS_SPACE, ACT_SPACE, seed=0)
    src.add(make_batch(3))
    state = src.state_dict()
    mutate(state)
    dst = ReplayBuffer(5, OBS_SPACE, ACT_SPACE, seed=0)
    dst.add(make_batch(2, 40, masks=True))
    with pytest.raises(ValueError, match=match):
        dst.load_state_dict(state)
    assert len(dst) == 2 and ids_in(dst) == [40, 41] and dst.column("mask").shape == (2, 4)


def test_replay_does_not_import_deep_learning_frameworks():
    import subprocess
    code = "import marl_note.replay, sys; assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
