"""MADDPG in both backends: joint replay, centralised critics, masking of absent agents, torch/TF
parity, saving. Learning and the trainer integration are in test_maddpg_learning.py.
"""
import warnings

import gymnasium as gym
import numpy as np
import pytest

from marl_note.replay.joint import JointReplayBuffer
from marl_note.types import JointTransitions
from tests.agents.maddpg_helpers import BACKENDS, maddpg_class, set_state
from tests.agents.maddpg_helpers import joint_batch as _joint_batch

OBS = {"a": gym.spaces.Box(-1, 1, (4,), np.float32), "b": gym.spaces.Discrete(5)}
ACT = {"a": gym.spaces.Discrete(3, start=1), "b": gym.spaces.Box(np.float32(0), np.float32(2), (2,), np.float32)}


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def MADDPG(backend):
    return maddpg_class(backend)


def joint_batch(n, rng, agents=("a", "b"), dead=0.2, term=0.2):
    return _joint_batch(n, rng, {a: OBS[a] for a in agents}, {a: ACT[a] for a in agents}, dead, term)


# --------------------------------------------------------------------------- joint replay

def test_joint_replay_round_trip_wrap_and_state():
    rng = np.random.default_rng(0)
    buf = JointReplayBuffer(7, ("a", "b"), OBS, ACT, seed=1)
    first, second = joint_batch(5, rng), joint_batch(4, rng)
    assert buf.add(first).tolist() == [0, 1, 2, 3, 4]
    got = buf.get(np.arange(5))
    for a in ("a", "b"):
        np.testing.assert_array_equal(got.obs[a], first.obs[a])
        np.testing.assert_array_equal(got.act[a], first.act[a])
        np.testing.assert_array_equal(got.next_obs[a], first.next_obs[a])
    for k in ("rew", "terminated", "truncated", "alive"):
        np.testing.assert_array_equal(getattr(got, k), getattr(first, k))
    assert buf.add(second).tolist() == [5, 6, 0, 1]  # wraps: rows 0 and 1 now hold second[2:]
    assert len(buf) == 7
    np.testing.assert_array_equal(buf.get([0, 1]).obs["a"], second.obs["a"][2:])
    np.testing.assert_array_equal(buf.get([2]).rew, first.rew[2:3])
    assert buf.get([0]).act["b"].dtype == np.float32 and buf.get([0]).obs["b"].dtype == np.int64

    copy = JointReplayBuffer(7, ("a", "b"), OBS, ACT, seed=99)
    copy.load_state_dict(buf.state_dict())
    s1, s2 = buf.sample(6), copy.sample(6)  # same rows: the sampling rng travels too
    np.testing.assert_array_equal(s1.obs["a"], s2.obs["a"])
    np.testing.assert_array_equal(s1.rew, s2.rew)
    assert s1.obs["b"].shape == (6,) and s1.alive.shape == (6, 2)


def test_joint_replay_rejects_bad_batches():
    buf = JointReplayBuffer(4, ("a", "b"), OBS, ACT)
    rng = np.random.default_rng(0)
    bad = joint_batch(3, rng)
    bad.obs = {"a": bad.obs["a"]}
    with pytest.raises(ValueError, match="dict over all agents"):
        buf.add(bad)
    bad = joint_batch(3, rng)
    bad.rew = bad.rew[:, :1]
    with pytest.raises(ValueError, match="rew"):
        buf.add(bad)
    with pytest.raises(ValueError, match="agents"):
        buf.add(joint_batch(2, rng, agents=("b", "a")))
    assert len(buf) == 0
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)


# --------------------------------------------------------------------------- critic, targets, masking

def test_critic_sees_all_observations_and_actions(MADDPG, backend):
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=0, seed=0)
    # a: 4 obs + 3 one-hot actions; b: 5 one-hot obs + 2 actions
    assert m.critic_input_dim("a") == m.critic_input_dim("b") == 4 + 5 + 3 + 2
    state = m.state_dict()
    assert state["a.critic.0.weight"].shape == (8, 14) and state["b.actor.0.weight"].shape == (8, 5)
    assert state["a.actor.2.weight"].shape == (3, 8) and state["b.actor.2.weight"].shape == (2, 8)
    batch = joint_batch(6, np.random.default_rng(1), dead=0.0)
    p = m.prepare_batch(batch)  # the critic's inputs: [obs_a, onehot(obs_b), onehot(act_a), unit(act_b)]
    np.testing.assert_allclose(p["obs"][0], batch.obs["a"], atol=1e-6)
    np.testing.assert_array_equal(p["obs"][1].argmax(1), batch.obs["b"])
    np.testing.assert_array_equal(p["act"][0].argmax(1), batch.act["a"] - 1)
    np.testing.assert_allclose(p["act"][1], batch.act["b"] - 1.0, atol=1e-6)  # [0, 2] -> [-1, 1]
    if backend == "torch":  # the order the critic sees them in (TF computes the same: the parity tests)
        seen = []
        hook = m.nets.critic["a"].register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach().clone()))
        m.learn(batch)
        hook.remove()
        np.testing.assert_allclose(seen[0].numpy(), np.concatenate(p["obs"] + p["act"], 1), atol=1e-6)

    solo = MADDPG(OBS, ACT, hidden_sizes=(8,), MARL=False, seed=0)  # the original library's flag
    assert not solo.centralized_critic and solo.state_dict()["a.critic.0.weight"].shape == (8, 4 + 3)


def test_same_seed_gives_the_same_weights_in_both_backends():
    torch_m, tf_m = maddpg_class("torch")(OBS, ACT, hidden_sizes=(8,), seed=3), maddpg_class("tf")(
        OBS, ACT, hidden_sizes=(8,), seed=3)
    st, sf = torch_m.state_dict(), tf_m.state_dict()
    assert st.keys() == sf.keys()
    for k in st:
        np.testing.assert_array_equal(st[k], sf[k], err_msg=k)
    np.testing.assert_array_equal(st["a.actor_target.0.weight"], st["a.actor.0.weight"])  # targets start as copies
    assert not np.array_equal(st["a.actor.0.weight"], maddpg_class("torch")(OBS, ACT, hidden_sizes=(8,), seed=4)
                              .state_dict()["a.actor.0.weight"])


def test_bad_hyperparameters_are_refused_before_anything_is_built(MADDPG):
    for kwargs, error, match in [(dict(tau=0.0), ValueError, r"tau must be in \(0, 1\]"),
                                 (dict(gamma=1.5), ValueError, "gamma must be in"),
                                 (dict(actor_lr=0.0), ValueError, "actor_lr must be a positive"),
                                 (dict(hidden_sizes=(8, 0)), ValueError, "hidden_sizes must be positive"),
                                 (dict(activation="swish"), ValueError, "activation must be one of"),
                                 (dict(learning_starts=-1), ValueError, "learning_starts must be a non-negative"),
                                 (dict(max_grad_norm=0.0), ValueError, "max_grad_norm must be a positive"),
                                 (dict(noise=[1, 2]), TypeError, "noise must be a dict"),
                                 (dict(noise={"c": None}), ValueError, "unknown agents"),
                                 (dict(reward_done_func_ma=3), TypeError, "reward_done_func_ma must be a function")]:
        with pytest.raises(error, match=match):
            MADDPG(OBS, ACT, **kwargs)
    with pytest.raises(TypeError, match="dicts"):
        MADDPG(OBS["a"], ACT["a"])
    with pytest.raises(TypeError, match="Discrete and Box"):
        MADDPG(OBS, {"a": ACT["a"], "b": gym.spaces.MultiBinary(2)})
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=0, seed=0)
    m.observe_joint(joint_batch(4, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        m.update(0)
    with pytest.raises(ValueError, match="agents must be distinct names"):
        m.learn(joint_batch(4, np.random.default_rng(0)), agents=["c"])
    assert m.updates == 0


def test_learning_one_agent_changes_only_its_networks(MADDPG):
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), tau=0.5, seed=2)
    before = m.state_dict()
    metrics = m.learn(joint_batch(16, np.random.default_rng(2), dead=0.0), agents=["b"])
    after = m.state_dict()
    assert set(metrics) == {"critic_loss", "actor_loss", "q_mean"} and m.updates == 1
    for k in m.param_keys():
        assert np.array_equal(after[k], before[k]) == k.startswith("a."), k  # b's nets and targets moved, a's not
    assert "b.critic_optimizer.0.exp_avg" in after and "a.critic_optimizer.0.exp_avg" not in after


def test_absent_agents_are_zeros_and_do_not_change_the_update():
    MADDPG = maddpg_class("torch")  # TF updates are checked equal to these by the parity tests
    rng = np.random.default_rng(2)
    batch = joint_batch(32, rng, dead=0.4)
    noisy = joint_batch(32, rng, dead=0.0)
    dirty = JointTransitions(batch.agents, {a: batch.obs[a].copy() for a in "ab"},
                             {a: batch.act[a].copy() for a in "ab"}, batch.rew.copy(),
                             {a: batch.next_obs[a].copy() for a in "ab"}, batch.terminated, batch.truncated,
                             batch.alive, batch.stream)
    for j, a in enumerate("ab"):  # garbage where the agent is absent must be ignored
        gone = ~batch.alive[:, j]
        dirty.obs[a][gone], dirty.act[a][gone], dirty.next_obs[a][gone] = (
            noisy.obs[a][gone], noisy.act[a][gone], noisy.next_obs[a][gone])
        dirty.rew[gone, j] = 100.0
    gone_a = ~batch.alive[:, 0]
    probe = MADDPG(OBS, ACT, hidden_sizes=(8,), seed=3)
    assert gone_a.any() and np.all(probe.prepare_batch(dirty)["obs"][0][gone_a] == 0)  # agent a's obs columns
    m1, m2 = MADDPG(OBS, ACT, hidden_sizes=(8,), seed=3), MADDPG(OBS, ACT, hidden_sizes=(8,), seed=3)
    m1.learn(batch)
    m2.learn(dirty)
    s1, s2 = m1.state_dict(), m2.state_dict()
    for k in s1:
        np.testing.assert_allclose(s1[k], s2[k], atol=1e-6, err_msg=k)


def test_target_networks_follow_by_polyak_averaging():
    MADDPG = maddpg_class("torch")  # TF updates are checked equal to these by the parity tests
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), tau=0.25, seed=4)
    set_state(m, {k: v + 1.0 for k, v in m.state_dict().items() if k.startswith("a.critic_target.")})
    before = {k: v.copy() for k, v in m.state_dict().items()}
    m.learn(joint_batch(16, np.random.default_rng(4)))
    after = m.state_dict()
    for a in ("a", "b"):
        for net in ("actor", "critic"):
            for k in [k for k in after if k.startswith(f"{a}.{net}.")]:
                tk = k.replace(f".{net}.", f".{net}_target.", 1)
                assert not np.allclose(after[k], before[k]), k  # the online nets learned
                np.testing.assert_allclose(after[tk], 0.75 * before[tk] + 0.25 * after[k], atol=1e-6, err_msg=tk)


def test_reward_done_func_ma_reshapes_at_store_time_and_schedule():
    MADDPG = maddpg_class("torch")  # the core's storing and schedule: one backend is enough
    def shaped(jt):
        return jt.rew.sum(axis=1, keepdims=True).repeat(2, 1), np.zeros_like(jt.terminated)
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=10, replay_ratio=0.5, reward_done_func_ma=shaped, seed=5)
    batch = joint_batch(8, np.random.default_rng(5))
    m.observe_joint(batch)
    stored = m.replay.get(np.arange(8))
    np.testing.assert_allclose(stored.rew[:, 0], batch.rew.sum(1), rtol=1e-6)
    assert not stored.terminated.any()
    assert m.update(4) == {"gradient_steps": 0}  # 8 rows < learning_starts
    m.observe_joint(batch)
    assert m.update(4)["gradient_steps"] == 4  # round(0.5 * 8 new rows)
    assert m.agent_steps == 2 * int(batch.alive.sum())
    with pytest.raises(ValueError, match="reward_done_func_ma"):
        MADDPG(OBS, ACT, hidden_sizes=(8,), reward_done_func_ma=lambda jt: (jt.rew[:, 0], jt.terminated)
               ).observe_joint(batch)


def test_state_dict_round_trip():
    MADDPG = maddpg_class("torch")  # TF updates are checked equal to these by the parity tests
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=0, update_steps=2, seed=6)
    m.observe_joint(joint_batch(16, np.random.default_rng(6)))
    m.update(8)
    state = m.state_dict()
    assert {"a.actor.0.weight", "b.critic_target.2.bias", "a.critic_optimizer.0.exp_avg", "a.policy.steps",
            "b.noise.rng", "rng", "updates"} <= set(state)
    assert all(isinstance(v, np.ndarray) for v in state.values())
    fresh = MADDPG(OBS, ACT, hidden_sizes=(8,), seed=7)
    fresh.load_state_dict(state)
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    np.testing.assert_array_equal(fresh.act_agent("a", obs), m.act_agent("a", obs))
    np.testing.assert_array_equal(fresh.act_agent("a", obs, explore=True), m.act_agent("a", obs, explore=True))
    assert fresh.updates == 2


# --------------------------------------------------------------------------- save / restore

def _trained(MADDPG, seed=6):
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=0, update_steps=2, centralized_critic=False, seed=seed)
    m.observe_joint(joint_batch(16, np.random.default_rng(seed)))
    m.update(8)
    return m


def _greedy_seat_actions(m):
    rng = np.random.default_rng(1)
    obs = {"a": rng.uniform(-1, 1, (5, 4)).astype(np.float32), "b": rng.integers(0, 5, 5)}
    return [s.act(obs[s.agent_id]) for s in m.seat_agents()]


def test_save_restore_round_trip(tmp_path):
    MADDPG = maddpg_class("torch")  # TF saves and restores in test_save_restore_across_backends
    from marl_note.agents.checkpoints import restore
    m = _trained(MADDPG)
    path = m.save(tmp_path / "maddpg.zip", include_replay=True)
    again = MADDPG.restore(path)
    assert type(again) is MADDPG and list(again.observation_spaces) == ["a", "b"]
    assert again.observation_spaces == m.observation_spaces and again.action_spaces == m.action_spaces
    assert again.config["hidden_sizes"] == (8,) and again.centralized_critic is False
    assert "observation_spaces" not in again.config
    state, loaded = m.state_dict(), again.state_dict()
    assert set(state) == set(loaded)
    for k in state:
        np.testing.assert_array_equal(state[k], loaded[k], err_msg=k)
    assert len(again.replay) == len(m.replay) == 16
    for x, y in zip(_greedy_seat_actions(m), _greedy_seat_actions(again)):
        np.testing.assert_array_equal(x, y)
    assert type(restore(path)) is MADDPG
    # both keep learning identically from the restored state
    assert m.update(8) == again.update(8)


def test_save_param_restore_param(tmp_path):
    MADDPG = maddpg_class("torch")  # TF saves and restores in test_save_restore_across_backends
    m = _trained(MADDPG)
    other = MADDPG(OBS, ACT, hidden_sizes=(8,), centralized_critic=False, seed=9)
    other.restore_param(m.save_param(tmp_path / "weights"))
    keys = m.param_keys()
    assert "a.actor.0.weight" in keys and "b.critic_target.2.bias" in keys
    assert not any("optimizer" in k or "policy" in k or "noise" in k for k in keys)
    theirs, ours = other.state_dict(), m.state_dict()
    for k in keys:
        np.testing.assert_array_equal(theirs[k], ours[k], err_msg=k)
    assert other.updates == 0
    for x, y in zip(_greedy_seat_actions(m), _greedy_seat_actions(other)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("source", BACKENDS)
def test_save_restore_across_backends(tmp_path, source):
    other = "tf" if source == "torch" else "torch"
    Source, Other = maddpg_class(source), maddpg_class(other)
    m = _trained(Source)
    moved = Other.restore(m.save(tmp_path / "maddpg"))
    assert type(moved) is Other and moved.action_spaces == m.action_spaces
    (disc, box), (o_disc, o_box) = _greedy_seat_actions(m), _greedy_seat_actions(moved)
    np.testing.assert_array_equal(disc, o_disc)  # argmax of the same logits
    np.testing.assert_allclose(box, o_box, atol=1e-6)  # float32 matmuls differ by an ulp across backends
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # both backends take the same arguments: nothing is dropped
        back = Source.restore(moved.save(tmp_path / "back.zip"))
    theirs = back.state_dict()
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(theirs[k], v, err_msg=k)


def test_compile_is_for_tf_and_a_warning_in_torch(MADDPG, backend):
    if backend == "numpy":
        with pytest.warns(RuntimeWarning, match="compile=True has nothing to compile"):
            assert not MADDPG(OBS, ACT, hidden_sizes=(8,), compile=True).nets.compile
        return
    if backend == "torch":
        with pytest.warns(UserWarning, match="compile=True has no effect"):
            MADDPG(OBS, ACT, hidden_sizes=(8,), compile=True)
        return
    assert MADDPG(OBS, ACT, hidden_sizes=(8,), compile=True).nets.compile  # XLA runs in the non-finite tests' DQN-XLA


# --------------------------------------------------------------------------- seats on a heterogeneous env

def test_seats_act_with_their_own_shapes_on_simple_adversary(MADDPG):
    simple_adversary_v3 = pytest.importorskip("mpe2.simple_adversary_v3")
    env = simple_adversary_v3.parallel_env()
    obs, _ = env.reset(seed=0)
    m = MADDPG({a: env.observation_space(a) for a in env.possible_agents},
               {a: env.action_space(a) for a in env.possible_agents}, hidden_sizes=(16,), seed=0)
    seats = m.seat_agents()
    assert [s.agent_id for s in seats] == list(env.possible_agents)
    assert [s.observation_space.shape for s in seats] == [(8,), (10,), (10,)]
    assert all(s.joint_learner is m for s in seats)
    for s in seats:
        batch = np.stack([obs[s.agent_id]] * 3)
        for explore in (False, True):
            a = s.act(batch, explore=explore)
            assert a.shape == (3,) and all(s.action_space.contains(int(x)) for x in a)
        mask = np.zeros((3, 5), bool)
        mask[:, 2] = True
        assert s.act(batch, mask=mask, explore=True).tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="shape"):
        seats[0].act(np.zeros((3, 10), np.float32))
    # critics are centralised over 8 + 10 + 10 observations and 3 x 5 one-hot actions
    assert m.state_dict()["adversary_0.critic.0.weight"].shape[1] == 28 + 15


# --------------------------------------------------------------------------- torch / TF parity

def test_torch_tf_parity_of_updates_from_the_same_weights():
    cfg = dict(hidden_sizes=(16, 16), learning_starts=0, update_steps=2, tau=0.1, actor_lr=1e-3,
               critic_lr=1e-3, seed=8)
    pt, tfa = maddpg_class("torch")(OBS, ACT, **cfg), maddpg_class("tf")(OBS, ACT, **cfg)
    assert set(pt.state_dict()) == set(tfa.state_dict())
    rng = np.random.default_rng(8)
    batch = joint_batch(32, rng)
    for a in ("a", "b"):
        obs = batch.obs[a]
        np.testing.assert_allclose(tfa.actor_outputs(a, obs), pt.actor_outputs(a, obs), atol=1e-5)
        np.testing.assert_allclose(tfa.act_agent(a, obs, explore=True), pt.act_agent(a, obs, explore=True), atol=1e-5)
    m_pt, m_tf = pt.learn(batch), tfa.learn(batch)
    for k in m_pt:
        assert abs(m_pt[k] - m_tf[k]) <= 1e-4 * (1 + abs(m_pt[k])), (k, m_pt[k], m_tf[k])
    pt.observe_joint(joint_batch(64, rng)), tfa.observe_joint(pt.replay.get(np.arange(64)))
    tfa.replay.load_state_dict(pt.replay.state_dict())
    assert pt.update(16)["gradient_steps"] == tfa.update(16)["gradient_steps"] == 2
    sp, st = pt.state_dict(), tfa.state_dict()
    assert sp.keys() == st.keys()
    for k in sp:
        assert sp[k].shape == st[k].shape and sp[k].dtype == st[k].dtype, k
        if k not in ("rng", "b.noise.rng"):
            tol = 1e-4 * (1 + float(np.abs(sp[k]).max(initial=0)))
            np.testing.assert_allclose(st[k], sp[k], atol=tol, rtol=0, err_msg=k)
    np.testing.assert_array_equal(sp["rng"], st["rng"])  # same numbers of Gumbel / sampling draws
    back = maddpg_class("torch")(OBS, ACT, **cfg)
    back.load_state_dict(st)  # TF -> torch, optimiser moments included
    assert back.updates == 3
