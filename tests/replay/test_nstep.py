import numpy as np
import pytest

from marl_note.replay import NStepAccumulator, ReplayBuffer
from marl_note.types import Transitions
from tests.replay.helpers import ACT_SPACE, OBS_SPACE


def random_stream_data(rng, length, n_streams, p_term=0.1, p_trunc=0.05, masks=True):
    """One-step transitions; obs[:, 0] is a unique id, next_obs[:, 0] = id + 0.5."""
    ids = np.arange(length, dtype=np.float32)
    mask = rng.random((length, 4)) < 0.5 if masks else None
    return Transitions(obs=np.stack([ids, ids * 2], 1), act=rng.integers(0, 4, length),
                       rew=rng.normal(size=length).astype(np.float32),
                       next_obs=np.stack([ids + 0.5, ids], 1), terminated=rng.random(length) < p_term,
                       truncated=rng.random(length) < p_trunc, mask=mask,
                       next_mask=None if mask is None else ~mask,
                       stream=rng.integers(0, n_streams, length) if n_streams else None)


def nstep_reference(t: Transitions, n: int, gamma: float, flushed: bool) -> dict[float, dict]:
    """Keyed by first-step id: the n-step transition each one-step transition becomes."""
    streams = np.zeros(len(t), int) if t.stream is None else t.stream
    out = {}
    for s in set(streams.tolist()):
        idx = [i for i in range(len(t)) if streams[i] == s]
        for pos, i in enumerate(idx):
            window = []
            for j in idx[pos:]:
                window.append(j)
                if t.terminated[j] or t.truncated[j] or len(window) == n:
                    break
            last = window[-1]
            complete = len(window) == n or t.terminated[last] or t.truncated[last]
            if not complete and not flushed:
                continue
            out[float(t.obs[i, 0])] = dict(
                rew=sum(gamma ** k * float(t.rew[j]) for k, j in enumerate(window)),
                next_obs=t.next_obs[last], terminated=bool(t.terminated[last]), truncated=bool(t.truncated[last]),
                discount=gamma ** len(window), act=int(t.act[i]), stream=int(streams[i]),
                mask=None if t.mask is None else t.mask[i],
                next_mask=None if t.next_mask is None else t.next_mask[last])
    return out


def check_against(out: Transitions, ref: dict):
    assert len(out) == len(ref)
    assert sorted(out.obs[:, 0].tolist()) == sorted(ref)
    for i in range(len(out)):
        r = ref[float(out.obs[i, 0])]
        assert out.rew[i] == pytest.approx(r["rew"], rel=1e-5, abs=1e-5)
        np.testing.assert_array_equal(out.next_obs[i], r["next_obs"])
        assert out.terminated[i] == r["terminated"] and out.truncated[i] == r["truncated"]
        assert out.discount[i] == pytest.approx(r["discount"], rel=1e-6)
        assert out.act[i] == r["act"]
        if out.stream is not None:
            assert out.stream[i] == r["stream"]
        if r["mask"] is not None:
            np.testing.assert_array_equal(out.mask[i], r["mask"])
            np.testing.assert_array_equal(out.next_mask[i], r["next_mask"])


@pytest.mark.parametrize("n,gamma,n_streams,chunk,seed", [
    (1, 0.9, 1, 7, 0), (3, 0.9, 1, 5, 1), (3, 0.99, 4, 1, 2), (5, 0.5, 3, 13, 3), (4, 1.0, 0, 6, 4),
    (2, 0.0, 6, 64, 5), (10, 0.95, 2, 9, 6),
])
def test_matches_brute_force_reference(n, gamma, n_streams, chunk, seed):
    rng = np.random.default_rng(seed)
    data = random_stream_data(rng, 300, n_streams)
    acc = NStepAccumulator(n, gamma)
    outs = [acc.add(data[i:i + chunk]) for i in range(0, len(data), chunk)]
    ready = Transitions.concatenate(outs)
    check_against(ready, nstep_reference(data, n, gamma, flushed=False))
    rest = acc.flush()
    assert len(acc) == 0
    check_against(Transitions.concatenate([ready, rest]), nstep_reference(data, n, gamma, flushed=True))
    assert ready.obs.dtype == data.obs.dtype and ready.discount.dtype == np.float32


@pytest.mark.parametrize("n,n_streams,chunk,seed", [(3, 4, 17, 0), (5, 8, 64, 1), (2, 1, 3, 2)])
def test_release_order_is_by_last_step_then_first(n, n_streams, chunk, seed):
    """Windows come out as they complete: by the arrival of their last step, then of their first (ids are
    arrival order here: obs[:, 0] is a step's id and next_obs[:, 0] - 0.5 its last step's); a flush releases
    stream by stream in the order the streams were first seen, each in arrival order."""
    data = random_stream_data(np.random.default_rng(seed), 400, n_streams)
    acc = NStepAccumulator(n, 0.9)
    released = 0
    for i in range(0, len(data), chunk):
        out = acc.add(data[i:i + chunk])
        keys = list(zip((out.next_obs[:, 0] - 0.5).tolist(), out.obs[:, 0].tolist()))
        assert keys == sorted(keys)
        assert all(last >= i for last, _ in keys)  # completed by a step of this batch
        released += len(out)
    rest = acc.flush()
    first_seen = list(dict.fromkeys(data.stream.tolist()))
    keys = [(first_seen.index(s), first) for s, first in zip(rest.stream.tolist(), rest.obs[:, 0].tolist())]
    assert keys == sorted(keys) and released + len(rest) == len(data)


def test_interleaved_streams_do_not_mix():
    def mk(s, r, term=False):
        return Transitions(obs=np.array([[r]]), act=np.array([0]), rew=np.array([r]), next_obs=np.array([[r + 0.5]]),
                           terminated=np.array([term]), truncated=np.array([False]), stream=np.array([s]))

    acc = NStepAccumulator(2, 1.0)
    assert len(acc.add(Transitions.concatenate([mk(0, 1.0), mk(1, 10.0)]))) == 0
    out = acc.add(Transitions.concatenate([mk(1, 20.0), mk(0, 2.0, term=True)]))
    assert out.stream.tolist() == [1, 0, 0]
    assert out.rew.tolist() == [30.0, 3.0, 2.0]
    assert out.next_obs[:, 0].tolist() == [20.5, 2.5, 2.5]
    assert out.discount.tolist() == [1.0, 1.0, 1.0]  # gamma = 1
    assert len(acc) == 1  # stream 1's second step is still waiting


def test_truncation_cuts_windows_and_output_feeds_a_replay_buffer():
    acc = NStepAccumulator(3, 0.5)
    data = Transitions(obs=np.arange(8, dtype=np.float32)[:, None].repeat(3, 1), act=np.zeros(8, int),
                       rew=np.ones(8, np.float32), next_obs=np.zeros((8, 3), np.float32),
                       terminated=np.zeros(8, bool), truncated=np.eye(8, dtype=bool)[1])
    out = acc.add(data)
    # ids 0,1 end at the truncation at step 1; ids 2..5 have full windows; 6,7 held back
    assert out.obs[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(out.rew, [1.5, 1.0, 1.75, 1.75, 1.75, 1.75])
    np.testing.assert_allclose(out.discount, [0.25, 0.5, 0.125, 0.125, 0.125, 0.125])
    assert out.truncated.tolist() == [True, True, False, False, False, False]
    buf = ReplayBuffer(16, OBS_SPACE, ACT_SPACE)
    buf.add(out)
    np.testing.assert_allclose(buf.column("discount"), out.discount)


def test_empty_outputs_keep_shapes():
    acc = NStepAccumulator(3, 0.9)
    assert len(acc.flush()) == 0
    out = acc.add(random_stream_data(np.random.default_rng(0), 1, 1, p_term=0, p_trunc=0))
    assert len(out) == 0 and out.obs.shape == (0, 2) and out.mask.shape == (0, 4) and out.stream.shape == (0,)


def test_bad_input():
    with pytest.raises(ValueError, match="n must"):
        NStepAccumulator(0, 0.9)
    with pytest.raises(ValueError, match="gamma"):
        NStepAccumulator(3, 1.1)
    acc = NStepAccumulator(3, 0.9)
    data = random_stream_data(np.random.default_rng(0), 5, 2, p_term=0, p_trunc=0)
    acc.add(data[:2])
    held = len(acc)
    with pytest.raises(ValueError, match="mask"):
        acc.add(Transitions(**{**vars(data[2:]), "mask": None, "next_mask": None}))
    with pytest.raises(ValueError, match="stream"):
        acc.add(Transitions(**{**vars(data[2:]), "stream": None}))
    with pytest.raises(ValueError, match="discount"):
        acc.add(Transitions(**{**vars(data[2:]), "discount": np.ones(3, np.float32)}))
    with pytest.raises(ValueError, match="next_obs"):
        acc.add(Transitions(**{**vars(data[2:]), "next_obs": np.zeros((2, 2))}))
    assert len(acc) == held
