"""MADDPG: joint replay, centralised critics, masking of absent agents, torch/TF parity, learning.

The learning check drives MADDPG with its own loop (``observe_joint`` / ``update``) on a tiny
cooperative ParallelEnv; the trainer integration test goes through DecentralizedTrainer.
"""

import gymnasium as gym
import numpy as np
import pytest

from marl_note.replay.joint import JointReplayBuffer
from marl_note.types import JointTransitions

torch = pytest.importorskip("torch")
from marl_note.agents.torch import MADDPG  # noqa: E402

OBS = {"a": gym.spaces.Box(-1, 1, (4,), np.float32), "b": gym.spaces.Discrete(5)}
ACT = {"a": gym.spaces.Discrete(3, start=1), "b": gym.spaces.Box(np.float32(0), np.float32(2), (2,), np.float32)}


def joint_batch(n, rng, agents=("a", "b"), obs_spaces=OBS, act_spaces=ACT, dead=0.2, term=0.2):
    def sample(space):
        if isinstance(space, gym.spaces.Discrete):
            return space.start + rng.integers(0, space.n, n)
        return rng.uniform(np.maximum(space.low, -1), np.minimum(space.high, 1), (n, *space.shape)).astype(space.dtype)
    alive = rng.random((n, len(agents))) >= dead
    alive[np.arange(n), rng.integers(0, len(agents), n)] = True
    obs = {a: sample(obs_spaces[a]) for a in agents}
    act = {a: sample(act_spaces[a]) for a in agents}
    next_obs = {a: sample(obs_spaces[a]) for a in agents}
    for j, a in enumerate(agents):  # absent agents have zero rows, as the collector pads them
        for d in (obs, act, next_obs):
            d[a][~alive[:, j]] = 0
    terminated = (rng.random((n, len(agents))) < term) & alive
    return JointTransitions(tuple(agents), obs=obs, act=act, rew=rng.normal(size=(n, len(agents))).astype(np.float32),
                            next_obs=next_obs, terminated=terminated,
                            truncated=(rng.random((n, len(agents))) < 0.1) & alive & ~terminated, alive=alive,
                            stream=np.arange(n))


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

def critic_inputs(m, agent):
    seen = []
    hook = m.critic[agent].register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach().clone()))
    return seen, hook


def test_critic_sees_all_observations_and_actions():
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=0, seed=0)
    # a: 4 obs + 3 one-hot actions; b: 5 one-hot obs + 2 actions
    assert m.critic_input_dim("a") == m.critic_input_dim("b") == 4 + 5 + 3 + 2
    assert m.critic["a"][0].in_features == 14 and m.actor["b"][0].in_features == 5
    assert m.actor["a"][-1].out_features == 3 and m.actor["b"][-1].out_features == 2
    batch = joint_batch(6, np.random.default_rng(1), dead=0.0)
    seen, hook = critic_inputs(m, "a")
    m.learn(batch)
    hook.remove()
    x = seen[0]  # the critic's regression input: [obs_a, onehot(obs_b), onehot(act_a), unit(act_b)]
    assert x.shape == (6, 14)
    np.testing.assert_allclose(x[:, :4].numpy(), batch.obs["a"], atol=1e-6)
    np.testing.assert_array_equal(x[:, 4:9].numpy().argmax(1), batch.obs["b"])
    np.testing.assert_array_equal(x[:, 9:12].numpy().argmax(1), batch.act["a"] - 1)
    np.testing.assert_allclose(x[:, 12:].numpy(), batch.act["b"] - 1.0, atol=1e-6)  # [0, 2] -> [-1, 1]

    solo = MADDPG(OBS, ACT, hidden_sizes=(8,), MARL=False, seed=0)  # the original library's flag
    assert not solo.centralized_critic and solo.critic["a"][0].in_features == 4 + 3


def test_absent_agents_are_zeros_and_do_not_change_the_update():
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
    m1 = MADDPG(OBS, ACT, hidden_sizes=(8,), seed=3)
    m2 = MADDPG(OBS, ACT, hidden_sizes=(8,), seed=3)
    seen, hook = critic_inputs(m1, "b")
    m1.learn(batch)
    hook.remove()
    m2.learn(dirty)
    s1, s2 = m1.state_dict(), m2.state_dict()
    for k in s1:
        np.testing.assert_allclose(s1[k], s2[k], atol=1e-6, err_msg=k)
    gone_a = ~batch.alive[:, 0]
    assert gone_a.any() and np.all(seen[0][gone_a][:, :4].numpy() == 0)  # agent a's obs columns


def test_target_networks_follow_by_polyak_averaging():
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), tau=0.25, seed=4)
    with torch.no_grad():
        for p in m.critic_target["a"].parameters():
            p.add_(1.0)
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
        MADDPG(OBS, ACT, reward_done_func_ma=lambda jt: (jt.rew[:, 0], jt.terminated)).observe_joint(batch)


def test_state_dict_round_trip():
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

def _trained(seed=6):
    m = MADDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=0, update_steps=2, centralized_critic=False, seed=seed)
    m.observe_joint(joint_batch(16, np.random.default_rng(seed)))
    m.update(8)
    return m


def _greedy_seat_actions(m):
    rng = np.random.default_rng(1)
    obs = {"a": rng.uniform(-1, 1, (5, 4)).astype(np.float32), "b": rng.integers(0, 5, 5)}
    return [s.act(obs[s.agent_id]) for s in m.seat_agents()]


def test_save_restore_round_trip(tmp_path):
    from marl_note.agents.saving import restore
    m = _trained()
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
    m = _trained()
    other = MADDPG(OBS, ACT, hidden_sizes=(8,), centralized_critic=False, seed=9)
    other.restore_param(m.save_param(tmp_path / "weights"))
    keys = m.param_keys()
    assert "a.actor.0.weight" in keys and "b.critic_target.2.bias" in keys
    assert not any("optimizer" in k or "policy" in k or "noise" in k for k in keys)
    for k in keys:
        np.testing.assert_array_equal(other.state_dict()[k], m.state_dict()[k], err_msg=k)
    assert other.updates == 0
    for x, y in zip(_greedy_seat_actions(m), _greedy_seat_actions(other)):
        np.testing.assert_array_equal(x, y)


def test_save_restore_torch_to_tf(tmp_path):
    pytest.importorskip("tensorflow")
    from marl_note.agents.tf import MADDPG as TFMADDPG
    m = _trained()
    path = m.save(tmp_path / "maddpg")
    tf_m = TFMADDPG.restore(path)
    assert type(tf_m) is TFMADDPG and tf_m.action_spaces == m.action_spaces
    (disc, box), (tf_disc, tf_box) = _greedy_seat_actions(m), _greedy_seat_actions(tf_m)
    np.testing.assert_array_equal(disc, tf_disc)  # argmax of the same logits
    np.testing.assert_allclose(box, tf_box, atol=1e-6)  # float32 matmuls differ by an ulp across backends
    with pytest.warns(UserWarning, match="compile"):  # and back again, dropping the TF-only argument
        back = MADDPG.restore(tf_m.save(tmp_path / "maddpg_tf.zip"))
    np.testing.assert_array_equal(back.state_dict()["b.actor.0.weight"], m.state_dict()["b.actor.0.weight"])


# --------------------------------------------------------------------------- seats on a heterogeneous env

def test_seats_act_with_their_own_shapes_on_simple_adversary():
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
    assert m.critic["adversary_0"][0].in_features == 28 + 15


# --------------------------------------------------------------------------- torch / TF parity

def test_torch_tf_parity_of_updates_from_the_same_weights():
    pytest.importorskip("tensorflow")
    tf_maddpg = pytest.importorskip("marl_note.agents.tf.maddpg")
    cfg = dict(hidden_sizes=(16, 16), learning_starts=0, update_steps=2, tau=0.1, actor_lr=1e-3,
               critic_lr=1e-3, seed=8)
    pt, tfa = MADDPG(OBS, ACT, **cfg), tf_maddpg.MADDPG(OBS, ACT, **cfg)
    assert set(pt.state_dict()) == set(tfa.state_dict())
    tfa.load_state_dict(pt.state_dict())
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
        if k not in ("rng", "torch_rng", "b.noise.rng"):
            tol = 1e-4 * (1 + float(np.abs(sp[k]).max(initial=0)))
            np.testing.assert_allclose(st[k], sp[k], atol=tol, rtol=0, err_msg=k)
    np.testing.assert_array_equal(sp["rng"], st["rng"])  # same numbers of Gumbel / sampling draws
    back = MADDPG(OBS, ACT, **cfg)
    back.load_state_dict(st)  # TF -> torch, optimiser moments included
    assert back.updates == 3


# --------------------------------------------------------------------------- learning

class MatchCueEnv:
    """Two agents, episodes of 4 steps; each step shows a cue c in {0, 1, 2} (agent_0 as a one-hot,
    agent_1 as a 4-vector with the one-hot shifted by one) and pays both 1 iff both play c."""

    possible_agents = ["agent_0", "agent_1"]
    metadata = {"name": "match_cue"}

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.spaces = {"agent_0": gym.spaces.Box(0, 1, (3,), np.float32), "agent_1": gym.spaces.Box(0, 1, (4,), np.float32)}

    def observation_space(self, agent):
        return self.spaces[agent]

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _obs(self):
        self.cue = int(self.rng.integers(0, 3))
        o0, o1 = np.zeros(3, np.float32), np.zeros(4, np.float32)
        o0[self.cue], o1[self.cue + 1] = 1, 1
        return {"agent_0": o0, "agent_1": o1}

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        r = float(actions["agent_0"] == actions["agent_1"] == self.cue)
        self.t += 1
        done = self.t >= 4
        return (self._obs(), {a: r for a in self.agents}, {a: False for a in self.agents},
                {a: done for a in self.agents}, {a: {} for a in self.agents})


def run_episodes(m, envs, n_rounds, explore, learn, rng):
    agents = tuple(envs[0].possible_agents)
    obs = [e.reset()[0] for e in envs]
    total = 0.0
    for _ in range(n_rounds):
        acts = {a: m.act_agent(a, np.stack([o[a] for o in obs]), explore=explore) for a in agents}
        rows = [e.step({a: int(acts[a][k]) for a in agents}) for k, e in enumerate(envs)]
        total += sum(r[1]["agent_0"] for r in rows)
        if learn:
            m.observe_joint(JointTransitions(
                agents, obs={a: np.stack([o[a] for o in obs]) for a in agents}, act=acts,
                rew=np.array([[r[1][a] for a in agents] for r in rows], np.float32),
                next_obs={a: np.stack([r[0][a] for r in rows]) for a in agents},
                terminated=np.zeros((len(envs), 2), bool),
                truncated=np.array([[r[3][a] for a in agents] for r in rows]), alive=np.ones((len(envs), 2), bool)))
            m.update(64)
        obs = [e.reset()[0] if r[3]["agent_0"] else r[0] for e, r in zip(envs, rows)]
    return total / (n_rounds * len(envs))


def test_maddpg_learns_to_coordinate_on_the_cue():
    envs = [MatchCueEnv(seed=i) for i in range(8)]
    m = MADDPG({a: envs[0].observation_space(a) for a in envs[0].possible_agents},
               {a: envs[0].action_space(a) for a in envs[0].possible_agents}, hidden_sizes=(32, 32),
               learning_starts=64, replay_ratio=0.25, gamma=0.5, tau=0.05, seed=0)
    rng = np.random.default_rng(0)
    random_rate = run_episodes(m, envs, 40, explore=True, learn=False, rng=rng)
    run_episodes(m, envs, 100, explore=True, learn=True, rng=rng)
    greedy_rate = run_episodes(m, envs, 40, explore=False, learn=False, rng=rng)
    assert random_rate < 0.3  # about 1/9 by chance
    assert greedy_rate > 0.8, (random_rate, greedy_rate)


# --------------------------------------------------------------------------- through the trainer

def test_trainer_delivers_joint_rows_on_simple_spread():
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer(lambda: simple_spread_v3.parallel_env(max_cycles=25), num_train_envs=2,
                                   num_test_envs=2, batch_size=32, update_freq=50, test_freq=8,
                                   episodes_per_train=8, episodes_per_test=2, seed=0)
    m = MADDPG.from_trainer(trainer, hidden_sizes=(16,), learning_starts=64, replay_ratio=0.1, seed=0)
    seen = []
    observe_joint = m.observe_joint
    m.observe_joint = lambda jt: (seen.append(jt), observe_joint(jt))
    stats = trainer.train(m.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
    rows = sum(len(jt) for jt in seen)
    assert rows == len(m.replay) == stats["num_collected_steps"] == 8 * 25  # one row per env step
    assert m.agent_steps == stats["num_collected_agent_steps"] == 3 * rows
    assert all(jt.alive.all() and jt.obs["agent_2"].shape[1:] == (18,) for jt in seen)
    assert sum(int(jt.truncated.all(axis=1).sum()) for jt in seen) == 8  # each episode ends once
    assert m.updates == stats["num_gradient_steps"] > 0  # one update per step, not one per seat
    result = trainer.test(m.seat_agents(), episodes=2)
    assert result["rewards"].shape == (2, 3)
    trainer.close()
