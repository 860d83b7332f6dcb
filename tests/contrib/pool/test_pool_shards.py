"""The pool's shared-memory pieces without processes: shard rings, the weight board, options, shells."""
import os
import pickle

import gymnasium as gym
import numpy as np
import pytest

from marl_note.contrib.pool.board import WeightBoard
from marl_note.contrib.pool.options import PoolOptions
from marl_note.replay.shared import RingFullError, SharedRing

SPECS = {"x": ((2,), np.float32), "i": ((), np.int64)}


def rows(start, n):
    i = np.arange(start, start + n, dtype=np.int64)
    return {"x": np.stack([i, -i], axis=1).astype(np.float32), "i": i}


@pytest.fixture
def ring():
    r = SharedRing.create(SPECS, capacity=8)
    yield r
    r.unlink()


def test_rows_drain_in_order_once(ring):
    ring.write(rows(0, 3))
    ring.write(rows(3, 2))
    got = ring.drain()
    assert got["i"].tolist() == [0, 1, 2, 3, 4] and got["x"][:, 1].tolist() == [0, -1, -2, -3, -4]
    assert len(ring.drain()["i"]) == 0 and len(ring) == 0 and ring.written == 5


def test_full_shard_waits_for_the_reader_then_times_out(ring):
    ring.write(rows(0, 6))
    with pytest.raises(RingFullError, match="not draining"):
        ring.write(rows(6, 4), timeout=0.05)
    assert ring.write(rows(6, 4), timeout=0.05, alive=lambda: False) == 0  # a stopping writer gives up
    ring.drain()
    assert ring.write(rows(6, 4)) == 4 and ring.evicted == 0


def test_window_size_evicts_the_oldest_rows_at_once(ring):
    ring.write(rows(0, 7))
    ring.write(rows(7, 2), evict=5)  # needs 1 row of room, evicts the window of 5
    assert ring.evicted == 5
    assert ring.drain()["i"].tolist() == [5, 6, 7, 8]


def test_window_size_may_be_a_function_of_the_undrained_rows(ring):
    seen = []
    ring.write(rows(0, 8))
    ring.write(rows(8, 1), evict=lambda n: seen.append(n) or n // 2)
    assert seen == [8] and ring.evicted == 4 and ring.drain()["i"].tolist() == [4, 5, 6, 7, 8]


def test_clearing_evicts_only_undrained_rows(ring):
    ring.write(rows(0, 3))
    ring.drain()
    ring.write(rows(3, 3))
    assert ring.evict_oldest(2) == 2 and ring.evict_oldest(10) == 1
    assert ring.evicted == 3 and len(ring.drain()["i"]) == 0


def test_a_reader_drops_rows_evicted_while_it_copied(ring):
    ring.write(rows(0, 6))
    other = SharedRing.attach(ring.handle)  # the writer, in the same process here
    try:
        other.write(rows(6, 6), evict=4)  # rows 0..5 -> rows 4..11 (0..3 overwritten)
        assert ring.drain()["i"].tolist() == list(range(4, 12))
    finally:
        other.close()


def test_bad_batches_are_refused(ring):
    with pytest.raises(ValueError, match="does not fit a ring of capacity 8"):
        ring.write(rows(0, 9))
    with pytest.raises(ValueError, match="missing columns \\['i'\\]"):
        ring.write({"x": np.zeros((1, 2), np.float32)})
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        SharedRing.create(SPECS, capacity=0)


def test_unlink_frees_the_block():
    r = SharedRing.create(SPECS, capacity=4)
    path = os.path.join("/dev/shm", r.handle[0].lstrip("/"))  # this ring's block (not another job's)
    assert os.path.exists(path)
    r.unlink()
    r.unlink()  # idempotent
    assert not os.path.exists(path)


def test_board_reads_each_version_once_and_checks_shapes():
    board = WeightBoard.create({"w": np.zeros((2, 2), np.float32)})
    try:
        assert board.read(newer_than=-1) is None  # nothing published yet
        board.publish({"w": np.ones((2, 2), np.float32)}, version=3)
        arrays, version = board.read(newer_than=-1)
        assert version == 3 and arrays["w"].sum() == 4 and board.read(newer_than=3) is None
        with pytest.raises(ValueError, match="has shape \\(3,\\)"):
            board.publish({"w": np.ones(3, np.float32)}, version=4)
        with pytest.raises(ValueError, match="differ from the board"):
            board.publish({"v": np.ones((2, 2), np.float32)}, version=4)
    finally:
        board.unlink()


@pytest.mark.parametrize("kwargs,match", [
    (dict(actors=0), "actors must be a positive integer"),
    (dict(sync_every=0), "sync_every must be a positive integer"),
    (dict(window_size=0), "window_size must be a positive integer or None"),
    (dict(window_size_=3), "window_size_ needs clearing_freq"),
    (dict(clearing_freq=3), "clearing_freq needs window_size_"),
    (dict(random=1), "random must be True or False"),
    (dict(num_store=0), "num_store must be a positive integer"),
    (dict(actor_timeout=0), "actor_timeout must be a positive number"),
])
def test_pool_options_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PoolOptions(**kwargs)


def test_unknown_pool_option_is_named():
    with pytest.raises(ValueError, match="unknown pool options \\['windowsize'\\]"):
        PoolOptions.build(2, 1, {"windowsize": 3})


def test_acting_shell_acts_like_the_agent_without_its_networks():
    torch = pytest.importorskip("torch")  # noqa: F841
    from marl_note.agents.exploration.policies import EpsGreedyQPolicy
    from marl_note.agents.torch import DQN

    agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), hidden_sizes=(8,), seed=0,
                policy=EpsGreedyQPolicy(1.0, eps_min=0.1, n_steps_annealing=100))
    agent.policy.step(50)
    shell = pickle.loads(pickle.dumps(agent.remote.shell()))
    assert not hasattr(shell.nets, "state_dict") and shell.replay is shell._feed.replay
    shell.remote.load(agent.remote.state(), version=7)
    obs = np.random.default_rng(0).normal(size=(16, 3))
    assert (shell.act(obs) == agent.act(obs)).all()
    assert shell.policy.metrics() == agent.policy.metrics()  # the exploration schedule travels too
