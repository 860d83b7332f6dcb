"""TripletReplayBuffer (the original TRL): ordered step triplets within one stored episode."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.compat.triplet import TripletReplayBuffer, distinct_sorted_triplets
from marl_note.types import Transitions

OBS = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
ACT = gym.spaces.Discrete(3)


def episode(start: int, length: int, stream: int = 0, end: bool = True) -> Transitions:
    """Steps whose obs is (global step number, episode start): the sample can be traced back."""
    t = np.arange(start, start + length, dtype=np.float32)
    obs = np.stack([t, np.full(length, start, np.float32)], axis=1)
    done = np.zeros(length, bool)
    done[-1] = end
    return Transitions(obs=obs, act=(t % 3).astype(np.int64), rew=t, next_obs=obs + [1, 0],
                       terminated=done, truncated=np.zeros(length, bool), stream=np.full(length, stream))


def test_triplets_are_uniform_over_ordered_sets():
    rng = np.random.default_rng(0)
    t = distinct_sorted_triplets(np.full(60_000, 5), rng)
    assert ((t[:, 0] < t[:, 1]) & (t[:, 1] < t[:, 2])).all()
    counts = np.unique(t[:, 0] * 25 + t[:, 1] * 5 + t[:, 2], return_counts=True)[1]
    assert len(counts) == 10  # C(5, 3) sets, each about 6000 times
    assert counts.min() > 5400 and counts.max() < 6600
    with pytest.raises(ValueError, match="at least 3 steps"):
        distinct_sorted_triplets(np.array([2]), rng)


def test_sample_stays_within_one_episode_in_order():
    buf = TripletReplayBuffer(1000, OBS, ACT, seed=0)
    buf.add(episode(0, 7))
    buf.add(episode(100, 4))
    b = buf.sample(512)
    assert b.obs.shape == (512, 2, 2) and b.act.shape == (512, 2) and b.indices.shape == (512, 3)
    ep = b.obs[:, 0, 1]
    assert (b.obs[:, 1, 1] == ep).all() and (b.next_obs[:, 1, 1] == ep).all()  # one episode per item
    i, k, j1 = b.obs[:, 0, 0], b.obs[:, 1, 0], b.next_obs[:, 1, 0]
    assert ((i < k) & (k < j1 - 1 + 1e-6)).all()  # i < k < j, and next_obs[j] is step j + 1
    np.testing.assert_array_equal(b.next_obs[:, 0], b.obs[:, 1])  # the first jump ends where the second starts
    np.testing.assert_array_equal(b.rew[:, 0], i)
    np.testing.assert_array_equal(b.act, np.stack([i, k], 1) % 3)
    # episodes are drawn uniformly, not by length
    assert 0.4 < np.mean(ep == 0) < 0.6


def test_interleaved_streams_and_unfinished_episodes():
    buf = TripletReplayBuffer(1000, OBS, ACT, seed=1)
    a, b = episode(0, 5, stream=0), episode(50, 5, stream=1, end=False)
    both = Transitions.concatenate([a[:3], b[:3], a[3:], b[3:]])
    buf.add(both)
    assert len(buf) == 5 and buf.num_pending == 5
    assert set(buf.sample(64).obs[:, 0, 1].tolist()) == {0.0}
    with pytest.raises(ValueError, match="no stored episode has 3 steps"):
        TripletReplayBuffer(10, OBS, ACT).sample(1)


def test_ring_keeps_the_stored_tail_of_an_overwritten_episode():
    buf = TripletReplayBuffer(10, OBS, ACT, seed=0)
    buf.add(episode(0, 6))
    buf.add(episode(100, 6))  # overwrites steps 0 and 1 of the first episode
    b = buf.sample(400)
    first = b.obs[:, 0, 1] == 0
    assert first.any() and b.obs[first, 0, 0].min() >= 2
    buf.add(episode(200, 9))  # the first episode is gone, the second keeps 1 step: unusable
    assert set(buf.sample(200).obs[:, 0, 1].tolist()) == {200.0}


def test_state_dict_round_trip_resumes_sampling():
    buf = TripletReplayBuffer(20, OBS, ACT, seed=3)
    buf.add(episode(0, 8))
    buf.add(episode(30, 6))
    buf.add(episode(60, 4, end=False))
    other = TripletReplayBuffer(20, OBS, ACT, seed=99)
    other.load_state_dict(buf.state_dict())
    assert other.num_pending == 4 and len(other) == len(buf)
    np.testing.assert_array_equal(other.sample_indices(32), buf.sample_indices(32))
    bad = buf.state_dict()
    bad["pending_terminated"] = np.ones(4, bool)
    with pytest.raises(ValueError, match="must not contain episode ends"):
        other.check_state_dict(bad)
