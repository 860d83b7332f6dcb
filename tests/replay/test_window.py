"""The replay's sampling window (marl_note/replay/window.py): sampling draws from the newest ``window``
items only (uniform, prioritized and compact buffers, before and after the ring wraps), growing it
brings the old items back, and prioritized replay samples exactly in proportion to priority inside
the window, with its effective sample size counted over the window."""
from __future__ import annotations

import numpy as np
import pytest

from marl_note.replay import CompactReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from marl_note.types import Transitions

from .helpers import ACT_SPACE, OBS_SPACE, make_batch


def sampled_ids(buf, n=600) -> set[int]:
    return set(buf.sample(n).rew.astype(int).tolist())


def test_uniform_window_samples_the_newest_items_before_and_after_the_ring_wraps():
    buf = ReplayBuffer(10, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(make_batch(6))
    buf.set_window(4)
    assert buf.window == 4 and sampled_ids(buf) == {2, 3, 4, 5}
    buf.set_window(8)  # wider than what is stored: everything stored
    assert sampled_ids(buf) == set(range(6))
    buf.add(make_batch(8, start=6))  # ids 4 .. 13 stored; 10 .. 13 wrapped to rows 0 .. 3
    buf.set_window(3)
    assert sampled_ids(buf) == {11, 12, 13}
    buf.set_window(6)  # rows 8, 9, 0, 1, 2, 3: across the ring's end
    assert sampled_ids(buf) == set(range(8, 14))
    buf.set_window(None)  # growing brings the old items back: they stayed stored
    assert sampled_ids(buf) == set(range(4, 14))
    for bad in (0, 11, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"window must be an integer in \[1, 10\]"):
            buf.set_window(bad)
    assert buf.window is None


def chain(n: int, start: int = 0) -> Transitions:
    """One stream's transitions ``i -> i + 1`` (frame i, reward i) from ``start``, no episode end."""
    ids = np.arange(start, start + n + 1, dtype=np.float32)
    frames = ids[:, None] * np.ones(3, np.float32)
    return Transitions(obs=frames[:-1], act=np.arange(n) % 4, rew=ids[:-1], next_obs=frames[1:],
                       terminated=np.zeros(n, bool), truncated=np.zeros(n, bool))


def test_compact_window_counts_slots_and_refuses_a_window_without_transitions():
    buf = CompactReplayBuffer(10, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(chain(12))  # frames 3 .. 12 in the 10 slots (wrapped), transitions hosted at frames 3 .. 11
    assert sampled_ids(buf) == set(range(3, 12))
    buf.set_window(4)  # the newest 4 slots: frames 9, 10, 11 (transitions) and 12 (a next frame only)
    assert sampled_ids(buf) == {9, 10, 11}
    buf.set_window(1)
    with pytest.raises(ValueError, match="holds no transition"):
        buf.sample(4)
    buf.set_window(None)
    assert sampled_ids(buf) == set(range(3, 12))


@pytest.mark.parametrize("optimize_memory", [False, True])
def test_prioritized_window_samples_in_proportion_to_priority_inside_the_wrapped_window(optimize_memory):
    per = PrioritizedReplayBuffer(10, OBS_SPACE, ACT_SPACE, alpha=1.0, beta=0.5, eps=0.0, seed=0,
                                  optimize_memory=optimize_memory)
    for part in (chain(6), chain(6, 6)) if optimize_memory else (make_batch(14),):
        per.add(part)  # compact: frame f in slot f % 10 (frames 3 .. 12), the next write at slot 3
    stored = np.flatnonzero(np.asarray(per.state_dict()["per_tree_leaves"]) > 0)
    per.set_priorities(stored, stored + 1.0)  # position k has raw priority k + 1
    leaves = per.state_dict()["per_tree_leaves"].copy()
    per.set_window(6)  # the newest 6 rows (slots) 8, 9, 0, 1, 2, 3 (compact: 7, 8, 9, 0, 1, 2): across the end
    # compact: slot 2 holds only the last next frame (frame 12), so no transition is sampled there
    inside = np.array([7, 8, 9, 0, 1]) if optimize_memory else np.array([8, 9, 0, 1, 2, 3])
    batch = per.sample(40_000)
    assert set(batch.indices.tolist()) == set(inside.tolist())
    want = (inside + 1.0) / (inside + 1.0).sum()
    freq = np.array([np.mean(batch.indices == k) for k in inside])
    np.testing.assert_allclose(freq, want, atol=0.01)
    p = batch.indices + 1.0  # the weights of the window's probabilities, normalised by the batch's largest
    np.testing.assert_allclose(batch.weights, (p / p.min()) ** -0.5, rtol=1e-5)
    probs = per.priorities()
    assert per.window_count() == inside.size and probs.sum() == pytest.approx(1.0)
    assert np.count_nonzero(probs) == inside.size
    assert per.effective_sample_size() == pytest.approx(1.0 / np.sum(want ** 2))
    np.testing.assert_array_equal(per.state_dict()["per_tree_leaves"], leaves)  # priorities outside are kept
    per.set_window(3)  # a range that does not wrap
    assert set(per.sample(2000).indices.tolist()) == ({0, 1} if optimize_memory else {1, 2, 3})
    per.set_window(None)  # everything again, in proportion to the kept priorities
    assert set(per.sample(4000).indices.tolist()) == set(stored.tolist())


def test_shrinking_the_window_past_old_low_priority_items_raises_the_ess_fraction():
    per = PrioritizedReplayBuffer(100, OBS_SPACE, ACT_SPACE, alpha=0.6, seed=0)
    per.add(make_batch(80))
    per.update_priorities(np.arange(80), np.random.default_rng(0).uniform(0.0, 0.05, 80))  # learnt: low |TD|
    per.add(make_batch(20, start=80))  # new items at the max priority seen (initial_TD = 1)
    everything = per.effective_sample_size() / per.window_count()
    per.set_window(40)
    assert per.window_count() == 40
    assert per.effective_sample_size() / per.window_count() > everything
    per.set_window(20)
    assert per.effective_sample_size() / per.window_count() == pytest.approx(1.0)  # the new items alone
