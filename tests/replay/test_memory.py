"""Replay memory estimate: refused before allocating when it cannot fit, warned when it takes most memory."""
from __future__ import annotations

import tracemalloc
import warnings

import gymnasium as gym
import numpy as np
import pytest

from marl_note.compat.triplet import TripletReplayBuffer
from marl_note.replay import JointReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer, memory
from marl_note.replay.memory import ReplayMemoryError, available_bytes, format_bytes
from marl_note.replay.sum_tree import SumTree

from .helpers import ACT_SPACE, OBS_SPACE, make_batch

PISTONBALL = gym.spaces.Box(0, 255, (120, 457, 3), np.uint8)  # one pistonball frame
FRAME = 120 * 457 * 3
ITEM = 2 * FRAME + 8 + 4 + 1 + 1  # obs + next_obs + int64 action + float32 reward + two flags


def _patch_available(monkeypatch, nbytes):
    monkeypatch.setattr(memory, "available_bytes", lambda: nbytes)


def test_pistonball_estimate_without_allocating():
    tracemalloc.start()
    try:
        est = ReplayBuffer.estimate_nbytes(100_000, PISTONBALL, gym.spaces.Discrete(3))
        per = PrioritizedReplayBuffer.estimate_nbytes(100_000, PISTONBALL, gym.spaces.Discrete(3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert est == 100_000 * ITEM
    assert format_bytes(est) == "32.9 GB"
    assert per == est + SumTree.estimate_nbytes(100_000) == est + 2 * 131072 * 8
    assert peak < 1_000_000


def test_refused_before_allocating(monkeypatch):
    _patch_available(monkeypatch, 4 * 10**9)
    tracemalloc.start()
    try:
        with pytest.raises(ReplayMemoryError) as info:
            ReplayBuffer(100_000, PISTONBALL, gym.spaces.Discrete(3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # nothing near the 32.9 GB (or even one row block) was allocated
    msg = str(info.value)
    for part in ("buffer_size=100000 (the buffer's capacity) needs 32.9 GB", "329 kB per transition", "4 GB",
                 "lower buffer_size", f"at most about {4 * 10**9 // ITEM}"):
        assert part in msg, (part, msg)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("make", [
    lambda cap: PrioritizedReplayBuffer(cap, PISTONBALL, ACT_SPACE),
    lambda cap: TripletReplayBuffer(cap, PISTONBALL, ACT_SPACE),
    lambda cap: JointReplayBuffer(cap, ("a", "b"), {"a": PISTONBALL, "b": PISTONBALL},
                                  {"a": ACT_SPACE, "b": ACT_SPACE}),
], ids=["prioritized", "triplet", "joint"])
def test_every_buffer_kind_is_checked(monkeypatch, make):
    _patch_available(monkeypatch, 10**9)
    with pytest.raises(ReplayMemoryError, match="buffer_size=50000"):
        make(50_000)
    buf = make(100)  # 100 rows fit in 1 GB
    assert 100 * 2 * FRAME < buf.nbytes_estimate < 10**9 * memory.WARN_FRACTION


def test_sum_tree_counts_in_the_check(monkeypatch):
    cap = 1000
    plain = ReplayBuffer.estimate_nbytes(cap, OBS_SPACE, ACT_SPACE)
    tree = SumTree.estimate_nbytes(cap)
    _patch_available(monkeypatch, plain + tree // 2)  # the storage alone fits, storage + tree does not
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ReplayBuffer(cap, OBS_SPACE, ACT_SPACE)
    with pytest.raises(ReplayMemoryError):
        PrioritizedReplayBuffer(cap, OBS_SPACE, ACT_SPACE)


def test_warns_once_above_half(monkeypatch):
    est = ReplayBuffer.estimate_nbytes(1000, OBS_SPACE, ACT_SPACE)
    _patch_available(monkeypatch, int(est * 1.5))
    with pytest.warns(UserWarning, match="buffer_size") as record:
        buf = ReplayBuffer(1000, OBS_SPACE, ACT_SPACE)
        buf.add(make_batch(5, masks=True, discount=True))  # the mask/discount columns are checked, not re-warned
    assert len(record) == 1
    assert buf.nbytes_estimate > est  # now counts the mask and discount columns


def test_mask_column_beyond_memory_is_refused_at_first_add(monkeypatch):
    est = ReplayBuffer.estimate_nbytes(1000, OBS_SPACE, ACT_SPACE)
    _patch_available(monkeypatch, est + 100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buf = ReplayBuffer(1000, OBS_SPACE, ACT_SPACE)
    with pytest.raises(ReplayMemoryError):
        buf.add(make_batch(5, masks=True))
    assert len(buf) == 0


def test_small_buffer_unaffected():
    assert available_bytes() is None or available_bytes() > 0  # real /proc/meminfo where there is one
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        buf = ReplayBuffer(100, OBS_SPACE, ACT_SPACE, seed=0)
        buf.add(make_batch(10))
    assert buf.nbytes_estimate == 100 * (3 * 4 + 3 * 4 + 8 + 4 + 1 + 1)
    assert set(buf.state_dict()) == {"obs", "act", "rew", "next_obs", "terminated", "truncated",
                                     "ptr", "size", "capacity", "rng_state"}


def test_unknown_available_memory_skips_the_check(monkeypatch):
    _patch_available(monkeypatch, None)
    assert ReplayBuffer(10, OBS_SPACE, ACT_SPACE).nbytes_estimate > 0


def test_available_bytes_reads_meminfo(monkeypatch, tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n")
    monkeypatch.setattr(memory, "_MEMINFO", str(fake))
    assert available_bytes() == 8_000_000 * 1024
    monkeypatch.setattr(memory, "_MEMINFO", str(tmp_path / "missing"))
    assert available_bytes() is None
