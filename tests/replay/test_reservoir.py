"""The reservoir buffer: uniform over everything ever added, bounded, checked state round trips."""
import numpy as np
import pytest

from marl_note.replay import ReservoirBuffer


def _fill(buf, n, start=0, one_by_one=False):
    rows = np.arange(start, start + n)
    if one_by_one:
        for k in rows:
            buf.add(np.full((1, 1), k, np.float32), np.array([k % buf.n_actions]))
    else:
        buf.add(rows[:, None].astype(np.float32), rows % buf.n_actions)


def test_every_row_ever_added_is_kept_with_the_same_chance():
    """Algorithm R: after 1000 rows into 100 slots, each row is stored with chance 0.1. Over 300 fills
    (fixed seeds) the first, middle and last tenths are each kept about equally often; a ring (keeping
    the last 100) or keeping the first 100 puts everything in one tenth and fails this bound."""
    counts = np.zeros(10)
    for seed in range(300):
        buf = ReservoirBuffer(100, obs_dim=1, n_actions=3, seed=seed)
        _fill(buf, 500)
        _fill(buf, 500, start=500)
        assert len(buf) == 100 and buf.added == 1000
        counts += np.bincount(buf.obs[:, 0].astype(int) // 100, minlength=10)
    share = counts / counts.sum()
    # expected 0.1 each; the standard error of a share over 30,000 kept rows is about 0.002
    assert np.all(np.abs(share - 0.1) < 0.015), share.round(3)


def test_a_batch_keeps_what_adding_its_rows_one_at_a_time_keeps():
    """The batched add is algorithm R row by row: same generator draws, same slots, later rows win."""
    a, b = (ReservoirBuffer(16, obs_dim=1, n_actions=3, seed=4) for _ in range(2))
    _fill(a, 200)
    _fill(b, 200, one_by_one=True)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.act, b.act)


def test_sampling_draws_stored_rows_uniformly():
    buf = ReservoirBuffer(4, obs_dim=1, n_actions=4, seed=0)
    _fill(buf, 4)
    obs, act, legal = buf.sample(4000)
    freq = np.bincount(obs[:, 0].astype(int), minlength=4) / 4000
    assert np.all(np.abs(freq - 0.25) < 0.03), freq
    assert (act == obs[:, 0].astype(int) % 4).all() and legal.all()


def test_state_round_trip_continues_identically():
    a = ReservoirBuffer(8, obs_dim=1, n_actions=3, seed=1)
    _fill(a, 20)
    b = ReservoirBuffer(8, obs_dim=1, n_actions=3, seed=99)
    b.load_state_dict(a.state_dict())
    assert b.added == 20 and len(b) == 8
    for buf in (a, b):
        _fill(buf, 30)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.sample(16)[0], b.sample(16)[0])


def test_a_partly_filled_state_restores_only_its_rows():
    a = ReservoirBuffer(8, obs_dim=2, n_actions=3, seed=1)
    a.add(np.ones((3, 2)), np.array([0, 1, 2]), np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], bool))
    state = a.state_dict()
    assert state["obs"].shape == (3, 2)
    b = ReservoirBuffer(8, obs_dim=2, n_actions=3)
    b.load_state_dict(state)
    assert len(b) == 3 and b.legal[:3].tolist() == a.legal[:3].tolist()


def test_bad_input_and_bad_states_are_refused_naming_the_problem():
    buf = ReservoirBuffer(4, obs_dim=2, n_actions=3, seed=0)
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        ReservoirBuffer(0, obs_dim=2, n_actions=3)
    with pytest.raises(ValueError, match=r"obs must have shape \(1, 2\)"):
        buf.add(np.zeros((1, 3)), np.array([0]))
    with pytest.raises(ValueError, match=r"actions must be in \[0, 3\)"):
        buf.add(np.zeros((1, 2)), np.array([3]))
    with pytest.raises(ValueError, match="the reservoir is empty"):
        buf.sample(2)
    other = ReservoirBuffer(4, obs_dim=5, n_actions=3, seed=0)
    other.add(np.zeros((2, 5)), np.array([0, 1]))
    with pytest.raises(ValueError, match="reservoir state 'obs' must have shape"):
        buf.load_state_dict(other.state_dict())
    state = buf.state_dict()
    del state["added"]
    with pytest.raises(ValueError, match=r"missing keys \['added'\]"):
        buf.load_state_dict(state)
    assert buf.added == 0
