"""MADDPG with action masks in both backends: masks in the joint replay, legal target actions, torch/TF parity."""

import gymnasium as gym
import numpy as np
import pytest

from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.replay.joint import JointReplayBuffer
from marl_note.trainers import Collector
from marl_note.types import JointTransitions
from tests.agents.maddpg_helpers import BACKENDS, maddpg_class, set_state
from tests.scripted_envs import MaskedRaceEnv

OBS = {"a": gym.spaces.Box(-1, 1, (4,), np.float32), "b": gym.spaces.Box(-1, 1, (2,), np.float32)}
ACT = {"a": gym.spaces.Discrete(5), "b": gym.spaces.Discrete(3, start=1)}


@pytest.fixture(params=BACKENDS)
def MADDPG(request):
    return maddpg_class(request.param)


def random_masks(rng, n, k):
    mask = rng.random((n, k)) < 0.4
    mask[np.arange(n), rng.integers(0, k, n)] = True  # at least one legal action per row
    return mask


def masked_batch(n, rng, dead=0.2):
    agents = ("a", "b")
    alive = rng.random((n, 2)) >= dead
    alive[np.arange(n), rng.integers(0, 2, n)] = True
    mask = {a: random_masks(rng, n, int(ACT[a].n)) for a in agents}
    next_mask = {a: random_masks(rng, n, int(ACT[a].n)) for a in agents}
    act = {a: ACT[a].start + mask[a].argmax(axis=1) for a in agents}
    obs = {a: rng.uniform(-1, 1, (n, *OBS[a].shape)).astype(np.float32) for a in agents}
    next_obs = {a: rng.uniform(-1, 1, (n, *OBS[a].shape)).astype(np.float32) for a in agents}
    for j, a in enumerate(agents):  # padded like the collector: zeros, all-True masks
        for d in (obs, act, next_obs):
            d[a][~alive[:, j]] = 0
        mask[a][~alive[:, j]] = True
    terminated = (rng.random((n, 2)) < 0.2) & alive
    return JointTransitions(agents, obs=obs, act=act, rew=rng.normal(size=(n, 2)).astype(np.float32),
                            next_obs=next_obs, terminated=terminated, truncated=np.zeros((n, 2), bool), alive=alive,
                            stream=np.arange(n), mask=mask, next_mask=next_mask)


def unmasked(batch):
    return JointTransitions(batch.agents, batch.obs, batch.act, batch.rew, batch.next_obs, batch.terminated,
                            batch.truncated, batch.alive, batch.stream)


# --------------------------------------------------------------------------- collector -> replay

def test_masks_of_a_masked_parallel_env_reach_the_joint_replay_per_agent():
    MADDPG = maddpg_class("torch")  # the collector and replay see only the numpy core
    spec = make_spec(adapt(MaskedRaceEnv()))
    m = MADDPG(dict(spec.observation_spaces), dict(spec.action_spaces), hidden_sizes=(8,), learning_starts=0,
               update_steps=1, seed=0)
    col = Collector(SyncVectorEnv([MaskedRaceEnv] * 2), spec, m.seat_agents(), explore=[True, True],
                    learn=[True, True])
    col.reset(seed=0)
    col.collect(n_episodes=4)  # MaskedRaceEnv asserts that every action MADDPG took was legal
    col.flush()
    assert m.replay.has_masks and len(m.replay) == 12
    stored = m.replay.get(np.arange(12))
    t = stored.obs["b"][:, 0].astype(int)  # b acts every step: its observation is the step count
    for j, a in enumerate(("a", "b")):
        alive = stored.alive[:, j]
        expected = np.array([MaskedRaceEnv.legal(a, k) for k in t])
        np.testing.assert_array_equal(stored.mask[a][alive], expected[alive])
        assert stored.mask[a][~alive].all()  # padding rows are unconstrained
        next_expected = np.array([MaskedRaceEnv.legal(a, k + 1) for k in t])
        np.testing.assert_array_equal(stored.next_mask[a][alive], next_expected[alive])
        assert expected[alive][np.arange(alive.sum()), stored.act[a][alive]].all()  # legal actions taken
    assert m.update(4)["gradient_steps"] == 1


def test_joint_replay_round_trip_of_masks():
    rng = np.random.default_rng(0)
    buf = JointReplayBuffer(5, ("a", "b"), OBS, ACT, seed=1)
    first, second = masked_batch(4, rng), masked_batch(3, rng)
    buf.add(first)
    got = buf.get(np.arange(4))
    for a in ("a", "b"):
        np.testing.assert_array_equal(got.mask[a], first.mask[a])
        np.testing.assert_array_equal(got.next_mask[a], first.next_mask[a])
    buf.add(second)  # wraps: rows 0 and 1 hold second[1:]
    np.testing.assert_array_equal(buf.get([0, 1]).next_mask["b"], second.next_mask["b"][1:])
    copy = JointReplayBuffer(5, ("a", "b"), OBS, ACT, seed=9)
    copy.load_state_dict(buf.state_dict())
    s1, s2 = buf.sample(8), copy.sample(8)
    assert copy.has_masks and s1.mask["a"].dtype == bool and s1.mask["a"].shape == (8, 5)
    np.testing.assert_array_equal(s1.mask["a"], s2.mask["a"])
    np.testing.assert_array_equal(s1.next_mask["b"], s2.next_mask["b"])
    plain = JointReplayBuffer(5, ("a", "b"), OBS, ACT)
    plain.add(unmasked(first))
    assert not plain.has_masks and plain.get([0]).mask is None
    copy.load_state_dict(plain.state_dict())  # and back to no masks
    assert not copy.has_masks and copy.sample(2).next_mask is None


def test_joint_replay_refuses_inconsistent_masks():
    rng = np.random.default_rng(1)
    buf = JointReplayBuffer(8, ("a", "b"), OBS, ACT)
    buf.add(masked_batch(2, rng))
    with pytest.raises(ValueError, match="has none"):
        buf.add(unmasked(masked_batch(2, rng)))
    plain = JointReplayBuffer(8, ("a", "b"), OBS, ACT)
    plain.add(unmasked(masked_batch(2, rng)))
    with pytest.raises(ValueError, match="without them"):
        plain.add(masked_batch(2, rng))
    half = masked_batch(2, rng)
    half.next_mask = None
    with pytest.raises(ValueError, match="both or neither"):
        JointReplayBuffer(8, ("a", "b"), OBS, ACT).add(half)
    wide = masked_batch(2, rng)
    wide.mask["a"] = np.ones((2, 4), bool)
    with pytest.raises(ValueError, match=r"mask\.a"):
        JointReplayBuffer(8, ("a", "b"), OBS, ACT).add(wide)
    box = JointReplayBuffer(8, ("a", "b"), OBS, {"a": ACT["a"], "b": gym.spaces.Box(-1, 1, (3,))})
    boxed = masked_batch(2, rng)
    boxed.act["b"] = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="Discrete"):
        box.add(boxed)
    assert len(buf) == 2 and len(plain) == 2


# --------------------------------------------------------------------------- legal targets

def target_next_actions(m, batch):
    """The next-step actions the target critics see, per agent (one-hot rows)."""
    acts = m.nets.target_actions(m.prepare_batch(batch))
    return dict(zip(m.agents, acts))


def biased_targets(MADDPG):
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), seed=0)
    # target actors that prefer action 0 strongly
    set_state(m, {f"{a}.actor_target.2.bias": [50.0] + [0.0] * (m.act_dim[a] - 1) for a in ("a", "b")})
    return m


def test_target_actions_never_pick_illegal_actions(MADDPG):
    batch = masked_batch(256, np.random.default_rng(2))
    next_live = batch.alive & ~batch.terminated
    acts = target_next_actions(biased_targets(MADDPG), batch)
    free = target_next_actions(biased_targets(MADDPG), unmasked(batch))
    for j, a in enumerate(("a", "b")):
        live = next_live[:, j]
        one_hot = acts[a][live]
        assert np.all(one_hot.sum(axis=1) == 1)
        assert np.all(batch.next_mask[a][live][one_hot > 0])  # the chosen action is legal in every row
        assert np.all(acts[a][~live] == 0)  # gone agents stay zeros
        assert not np.all(batch.next_mask[a][live][free[a][live] > 0])  # unmasked, illegal ones are chosen


def test_the_update_uses_the_legal_target_actions():
    """What the target critic sees in a gradient step are those actions (seen through a torch hook)."""
    m = biased_targets(maddpg_class("torch"))
    batch = masked_batch(64, np.random.default_rng(4))
    seen = []
    hook = m.nets.critic_target["a"].register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach().clone()))
    expected = np.concatenate(list(target_next_actions(m, batch).values()), 1)
    m.learn(batch)
    hook.remove()
    np.testing.assert_array_equal(seen[0].numpy()[:, sum(m.obs_dim.values()):], expected)


def test_rows_that_allow_nothing_are_unconstrained():
    m = maddpg_class("torch")(OBS, ACT, hidden_sizes=(8,), seed=0)  # the core's batch: one backend is enough
    batch = masked_batch(4, np.random.default_rng(3), dead=0.0)
    batch.next_mask["a"][0] = False
    p = m.prepare_batch(batch)
    assert p["next_mask"][0][0].tolist() == [1.0] * 5 and p["next_mask"][0].dtype == np.float32
    np.testing.assert_array_equal(p["next_mask"][0][1:], batch.next_mask["a"][1:].astype(np.float32))
    assert np.all(m.prepare_batch(unmasked(batch))["mask"][1] == 1.0)


# --------------------------------------------------------------------------- torch / TF parity

def test_torch_tf_parity_with_masks():
    cfg = dict(hidden_sizes=(16, 16), learning_starts=0, update_steps=2, tau=0.1, actor_lr=1e-3, critic_lr=1e-3,
               seed=8)
    pt, tfa = maddpg_class("torch")(OBS, ACT, **cfg), maddpg_class("tf")(OBS, ACT, **cfg)
    rng = np.random.default_rng(8)
    batch = masked_batch(64, rng)
    p = pt.prepare_batch(batch)
    for x, y in zip(pt.nets.target_actions(p), tfa.nets.target_actions(p)):
        np.testing.assert_array_equal(x, y)
    tfa.load_state_dict(pt.state_dict())  # prepare_batch drew Gumbel noise from pt's rng only
    m_pt, m_tf = pt.learn(batch), tfa.learn(batch)
    for k in m_pt:
        assert abs(m_pt[k] - m_tf[k]) <= 1e-4 * (1 + abs(m_pt[k])), (k, m_pt[k], m_tf[k])
    more = masked_batch(64, rng)
    pt.observe_joint(more), tfa.observe_joint(more)
    tfa.replay.load_state_dict(pt.replay.state_dict())  # the same sampled rows
    assert pt.update(16)["gradient_steps"] == tfa.update(16)["gradient_steps"] == 2
    sp, st = pt.state_dict(), tfa.state_dict()
    for k in sp:
        if k != "rng":
            tol = 1e-4 * (1 + float(np.abs(sp[k]).max(initial=0)))
            np.testing.assert_allclose(st[k], sp[k], atol=tol, rtol=0, err_msg=k)
    # the masks change the update: the same weights on the unmasked batch give other losses
    fresh = maddpg_class("torch")(OBS, ACT, **cfg)
    assert fresh.learn(unmasked(batch))["critic_loss"] != m_pt["critic_loss"]
