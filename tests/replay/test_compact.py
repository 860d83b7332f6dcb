"""CompactReplayBuffer stores each observation once and gives back what a plain buffer would."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from marl_note.replay import CompactReplayBuffer, NStepAccumulator, PrioritizedReplayBuffer, ReplayBuffer
from marl_note.types import Transitions

OBS = gym.spaces.Box(0, 255, (2, 3), np.uint8)
ACT = gym.spaces.Discrete(10**6)  # the action is the transition's id


def trajectories(num_streams: int, steps: int, seed: int) -> Transitions:
    """Rows of ``num_streams`` interleaved streams (random episode lengths, terminated or truncated ends)."""
    rng = np.random.default_rng(seed)
    rows = []
    state = {s: (rng.integers(0, 256, (2, 3)).astype(np.uint8), 0) for s in range(num_streams)}
    for i in range(steps):
        s = int(rng.integers(num_streams))
        ob, t = state[s]
        nxt = rng.integers(0, 256, (2, 3)).astype(np.uint8)
        end = rng.random() < 0.2
        term = end and rng.random() < 0.5
        rows.append((ob, i, float(rng.normal()), nxt, term, end and not term, s))
        state[s] = (rng.integers(0, 256, (2, 3)).astype(np.uint8), 0) if end else (nxt, t + 1)
    cols = list(zip(*rows))
    return Transitions(obs=np.stack(cols[0]), act=np.array(cols[1]), rew=np.array(cols[2], np.float32),
                       next_obs=np.stack(cols[3]), terminated=np.array(cols[4]), truncated=np.array(cols[5]),
                       stream=np.array(cols[6]))


def feed(buffers, t: Transitions, seed: int = 0, nstep: NStepAccumulator | None = None) -> None:
    """Write ``t`` to every buffer in random-sized chunks (through an n-step accumulator when given)."""
    rng = np.random.default_rng(seed)
    i = 0
    while i < len(t):
        j = i + int(rng.integers(1, 9))
        chunk = t[i:j] if nstep is None else nstep.add(t[i:j])
        if len(chunk):
            for b in buffers:
                b.add(chunk)
        i = j


def by_id(buf) -> dict[int, tuple]:
    idx = buf.stored_indices() if isinstance(buf, CompactReplayBuffer) else np.arange(len(buf))
    got = buf.get(idx)
    out = {}
    for k in range(len(got)):
        out[int(got.act[k])] = (got.obs[k].tolist(), got.next_obs[k].tolist(), float(got.rew[k]),
                                bool(got.terminated[k]), bool(got.truncated[k]),
                                None if got.discount is None else float(got.discount[k]))
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_same_transitions_as_plain_buffer_for_interleaved_streams_with_ends_and_wraparound(n):
    t = trajectories(num_streams=6, steps=600, seed=n)
    plain = ReplayBuffer(10_000, OBS, ACT, seed=0)
    compact = CompactReplayBuffer(200, OBS, ACT, seed=0)  # wraps around several times
    feed([plain, compact], t, nstep=NStepAccumulator(n, 0.9) if n > 1 else None)
    want, got = by_id(plain), by_id(compact)
    assert len(got) == len(compact) > 100
    for k, row in got.items():
        assert row == want[k], k
    # it keeps the most recent transitions
    recent = sorted(want)[-60:]
    assert set(recent) <= set(got)
    # and sampled batches are stored transitions too
    batch = compact.sample(64)
    for k in range(64):
        assert want[int(batch.act[k])][:2] == (batch.obs[k].tolist(), batch.next_obs[k].tolist())


def test_each_observation_is_stored_once():
    t = trajectories(num_streams=3, steps=300, seed=5)
    compact = CompactReplayBuffer(1000, OBS, ACT)
    compact.add(t)
    ends = int(np.count_nonzero(t.terminated | t.truncated))
    open_tails = len(set(t.stream.tolist()))  # at most one pending next frame per stream
    # a frame per transition, plus each episode's first observation (episodes ended and open)
    assert len(compact) == 300
    assert compact.slots_used <= 300 + ends + open_tails


def test_nstep_frames_are_shared_across_the_window():
    t = trajectories(num_streams=2, steps=400, seed=7)
    acc = NStepAccumulator(4, 0.9)
    compact = CompactReplayBuffer(5000, OBS, ACT)
    out = acc.add(t)
    compact.add(out)
    ends = int(np.count_nonzero(t.terminated | t.truncated))
    assert compact.slots_used <= len(out) + 4 * (ends + 2)  # up to n first frames per episode


def test_checkpoint_round_trip_continues_identically():
    t = trajectories(num_streams=4, steps=500, seed=3)
    a = CompactReplayBuffer(150, OBS, ACT, seed=1)
    feed([a], t[:250])
    b = CompactReplayBuffer(150, OBS, ACT, seed=99)
    b.load_state_dict({k: np.asarray(v) for k, v in a.state_dict().items()})
    feed([a, b], t[250:], seed=4)
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)
    np.testing.assert_array_equal(a.sample(32).act, b.sample(32).act)


def test_bad_state_is_refused_before_anything_changes():
    a = CompactReplayBuffer(50, OBS, ACT, seed=1)
    a.add(trajectories(2, 30, seed=0))
    state = a.state_dict()
    b = CompactReplayBuffer(50, OBS, ACT)
    bad = dict(state, next=np.full_like(state["next"], 10_000))
    with pytest.raises(ValueError, match="next"):
        b.load_state_dict(bad)
    assert len(b) == 0
    plain = ReplayBuffer(50, OBS, ACT)
    plain.add(trajectories(2, 5, seed=0))
    with pytest.raises(ValueError, match="plain ReplayBuffer"):
        b.load_state_dict(plain.state_dict())


def test_prioritized_compact_samples_only_stored_transitions_and_zeroes_evicted():
    t = trajectories(num_streams=3, steps=400, seed=11)
    per = PrioritizedReplayBuffer(120, OBS, ACT, seed=0, optimize_memory=True)
    plain = ReplayBuffer(10_000, OBS, ACT)
    feed([per, plain], t)
    want = by_id(plain)
    batch = per.sample(256)
    for k in range(256):
        assert want[int(batch.act[k])][:2] == (batch.obs[k].tolist(), batch.next_obs[k].tolist())
    per.update_priorities(batch.indices, np.linspace(0, 5, 256))
    assert 1.0 <= per.effective_sample_size() <= len(per)
    assert per.priorities().shape == (len(per),)
    restored = PrioritizedReplayBuffer(120, OBS, ACT, optimize_memory=True)
    restored.load_state_dict(per.state_dict())
    np.testing.assert_allclose(restored.priorities(), per.priorities())


def test_prioritized_compact_add_longer_than_the_buffer_gives_no_priority_to_frame_only_slots():
    # one add of more rows than slots evicts its own first rows; a slot of those may end up holding only a
    # frame, and it must get no sampling priority (it used to keep the new rows' max priority)
    t = trajectories(num_streams=2, steps=60, seed=3)
    per = PrioritizedReplayBuffer(16, OBS, ACT, seed=0, optimize_memory=True)
    per.add(t)
    stored = per._buffer.stored_indices()
    leaves = np.asarray(per._tree.leaves)
    assert set(np.flatnonzero(leaves > 0)) == set(stored.tolist())
    batch = per.sample(512)  # raised "slots [...] hold no transition" before
    assert set(batch.indices.tolist()) <= set(stored.tolist())


def test_memory_estimate_counts_frames_once():
    frames = gym.spaces.Box(0, 255, (120, 457, 3), np.uint8)
    plain = ReplayBuffer.estimate_nbytes(100_000, frames, gym.spaces.Discrete(3))
    compact = CompactReplayBuffer.estimate_nbytes(100_000, frames, gym.spaces.Discrete(3))
    assert compact < 0.51 * plain
    small = CompactReplayBuffer(64, OBS, ACT)
    assert small.nbytes_estimate == CompactReplayBuffer.estimate_nbytes(64, OBS, ACT)
    with pytest.raises(ValueError, match="capacity >= 2"):
        CompactReplayBuffer(1, OBS, ACT)


def test_run_checkpoint_round_trips_a_compact_replay(tmp_path):
    """A DQN whose replay stores each frame once: save_run / load_run restore it exactly."""
    pytest.importorskip("torch")
    from marl_note.agents.torch import DQN
    from marl_note.trainers.run_state import RunState, load_run, save_run

    frames = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)  # 192 bytes: "auto" keeps plain, so ask for it
    a = DQN(frames, gym.spaces.Discrete(3), hidden_sizes=(4,), seed=0,
            replay=CompactReplayBuffer(64, frames, gym.spaces.Discrete(3), seed=0))
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (21, 8, 8, 3)).astype(np.uint8)
    a.observe(Transitions(obs=obs[:-1], act=rng.integers(0, 3, 20), rew=rng.normal(size=20).astype(np.float32),
                          next_obs=obs[1:], terminated=np.arange(20) == 9, truncated=np.zeros(20, bool),
                          stream=np.zeros(20, np.int64)))
    assert a.replay.slots_used == 22  # 20 transitions, 2 episodes
    path = save_run(str(tmp_path / "run"), RunState(), [a], {})
    b = DQN(frames, gym.spaces.Discrete(3), hidden_sizes=(4,), seed=1,
            replay=CompactReplayBuffer(64, frames, gym.spaces.Discrete(3), seed=1))
    load_run(path, [b])
    sa, sb = a.replay.state_dict(), b.replay.state_dict()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)
    x, y = a.replay.sample(16), b.replay.sample(16)
    np.testing.assert_array_equal(x.next_obs, y.next_obs)


def test_feed_stores_images_once_by_default_and_vectors_plainly():
    from marl_note.replay import ReplayFeed
    img, vec, act = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8), gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    assert type(ReplayFeed(img, act, buffer_size=10, gamma=0.9).replay) is CompactReplayBuffer
    assert type(ReplayFeed(vec, act, buffer_size=10, gamma=0.9).replay) is ReplayBuffer
    assert type(ReplayFeed(vec, act, buffer_size=10, gamma=0.9, optimize_memory=True).replay) is CompactReplayBuffer
    assert type(ReplayFeed(img, act, buffer_size=10, gamma=0.9, optimize_memory=False).replay) is ReplayBuffer
    per = ReplayFeed(img, act, buffer_size=10, gamma=0.9, PR=True, num_steps=3).replay
    assert per.optimize_memory
    assert type(ReplayFeed(img, act, buffer_size=10, gamma=0.9, augment=lambda t: t).replay) is ReplayBuffer
    with pytest.raises(ValueError, match="optimize_memory must be"):
        ReplayFeed(img, act, buffer_size=10, gamma=0.9, optimize_memory="yes")
