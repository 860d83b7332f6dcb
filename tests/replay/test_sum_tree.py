import numpy as np
import pytest

from marl_note.replay import SumTree


@pytest.mark.parametrize("capacity", [1, 2, 5, 8, 37, 1000])
def test_random_updates_match_naive_prefix_sums(capacity):
    rng = np.random.default_rng(capacity)
    tree, naive = SumTree(capacity), np.zeros(capacity)
    for _ in range(20):
        idx = rng.integers(0, capacity, rng.integers(1, 3 * capacity + 1))
        p = rng.random(idx.shape[0]) * (rng.random(idx.shape[0]) < 0.7)  # ~30% zeros
        tree.update(idx, p)
        for i, v in zip(idx, p):  # sequential: the last write of a repeated index wins
            naive[i] = v
        assert tree.total == pytest.approx(naive.sum())
        np.testing.assert_allclose(tree.leaves, naive)
        if naive.sum() > 0:
            values = rng.random(500) * naive.sum()
            expected = np.searchsorted(np.cumsum(naive), values, side="right")
            np.testing.assert_array_equal(tree.find(values), expected)


def test_find_never_lands_on_zero_priority_items_even_at_the_edges():
    tree = SumTree(7)
    tree.update(np.arange(7), np.array([0.0, 0.1, 0.0, 0.0, 0.2, 0.0, 0.0]))
    got = tree.find(np.array([0.0, 0.1, 0.3, tree.total, np.nextafter(tree.total, 0)]))
    assert set(got.tolist()) <= {1, 4}
    samples = tree.sample(10000, np.random.default_rng(0))
    assert set(samples.tolist()) == {1, 4}


def test_intervals_are_half_open_on_the_left():
    tree = SumTree(5)
    tree.update(np.arange(5), np.array([1.0, 1.0, 0.0, 1.0, 1.0]))
    assert tree.find(np.array([0.0, 1.0, 2.0, 3.0, 3.5, 4.0])).tolist() == [0, 1, 3, 4, 4, 4]


def test_add_is_a_ring():
    tree = SumTree(3)
    assert tree.add(np.array([1.0, 2.0])).tolist() == [0, 1]
    assert tree.add(np.array([3.0, 4.0])).tolist() == [2, 0]
    np.testing.assert_allclose(tree.leaves, [4.0, 2.0, 3.0])
    assert sorted(tree.add(np.arange(10.0, 15.0)).tolist()) == [0, 1, 2]  # keeps the last 3
    np.testing.assert_allclose(np.sort(tree.leaves), [12.0, 13.0, 14.0])
    assert tree.total == pytest.approx(39.0)


@pytest.mark.parametrize("priorities,match", [([1.0, -0.5], "non-negative"), ([np.nan, 1.0], "finite"),
                                              ([np.inf, 1.0], "finite"), ([1.0], "shape")])
def test_bad_priorities_leave_tree_untouched(priorities, match):
    tree = SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(ValueError, match=match):
        tree.update(np.array([0, 1]), np.array(priorities))
    np.testing.assert_allclose(tree.leaves, [1.0, 2.0, 3.0, 4.0])
    assert tree.total == 10.0


def test_bad_indices_and_empty_sampling():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="indices"):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError, match="indices"):
        tree.update(np.array([0.5]), np.array([1.0]))
    with pytest.raises(ValueError, match="zero"):
        tree.sample(3, np.random.default_rng(0))


def test_state_dict_roundtrip_rebuilds_sums():
    tree = SumTree(6)
    tree.add(np.array([0.5, 1.5, 2.0, 0.0, 3.0]))
    other = SumTree(6)
    other.load_state_dict(tree.state_dict())
    assert other.total == pytest.approx(7.0)
    values = np.linspace(0, 6.99, 50)
    np.testing.assert_array_equal(other.find(values), tree.find(values))
    assert other.add(np.array([9.0])).tolist() == [5]
    with pytest.raises(ValueError, match="shape"):
        other.load_state_dict({"leaves": np.ones(5), "ptr": np.int64(0)})
