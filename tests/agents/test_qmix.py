"""VDN and QMIX in both backends: the mixers (sum; monotonic in every agent's Q), masks in acting and in
the targets, dead agents out of the mixer and the loss, team reward and bootstrapping, torch/TF
parity of updates, checkpoints across backends, refused configurations.
"""
import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.qmix import QMIXConfig
from marl_note.types import JointTransitions
from tests.agents.maddpg_helpers import joint_batch as _joint_batch
from tests.agents.maddpg_helpers import set_state

BACKENDS = ["torch", "tf"]  # VDN and QMIX have no numpy backend (yet)

OBS = {"a": gym.spaces.Box(-1, 1, (4,), np.float32), "b": gym.spaces.Box(-1, 1, (3,), np.float32),
       "c": gym.spaces.Discrete(5)}
ACT = {"a": gym.spaces.Discrete(3, start=1), "b": gym.spaces.Discrete(4), "c": gym.spaces.Discrete(4)}
SMALL = dict(hidden_sizes=(16,), mixing_embed=8, hypernet_hidden=16, learning_starts=0)


def qmix_class(backend, name="QMIX"):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    return getattr(importlib.import_module(f"marl_note.agents.{backend}"), name)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def joint_batch(n, rng, dead=0.2, term=0.2, masks=False):
    batch = _joint_batch(n, rng, OBS, ACT, dead, term)
    if masks:
        def legal(a):
            m = rng.random((n, ACT[a].n)) < 0.5
            m[np.arange(n), rng.integers(0, ACT[a].n, n)] = True
            return m
        batch.mask = {a: legal(a) for a in ACT}
        batch.next_mask = {a: legal(a) for a in ACT}
    return batch


def const_q(agent, values):
    """State entries making every Q-network output ``values`` whatever its input: last layer weights
    zero, bias ``values`` (shared net ``q_net`` or per seat), online and target alike."""
    out = {}
    for net in agent.nets.weight_names:
        if net.endswith(("q_net", "target_net")):
            last = 2 * len(agent.cfg.hidden_sizes)
            width = agent.out_dim[agent.agents[0]] if agent.shared else agent.out_dim[net.split(".")[0]]
            bias = np.full(width, -5.0, np.float32)
            bias[:len(values)] = values
            out[f"{net}.{last}.weight"] = np.zeros_like(agent.state_dict()[f"{net}.{last}.weight"])
            out[f"{net}.{last}.bias"] = bias
    return out


# --------------------------------------------------------------------------- the mixers

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_qmix_mixer_is_monotonic_in_every_agent_q(backend, seed):
    """dQ_tot/dQ_i >= 0 by autograd at random Q-values and states, with hypernetwork weights drawn
    wide (half of them negative): the absolute values make the mixing weights non-negative."""
    QMIX = qmix_class(backend)
    q = QMIX(OBS, ACT, **SMALL, seed=seed)
    rng = np.random.default_rng(seed)
    set_state(q, {k: rng.normal(0, 1.0, v.shape) for k, v in q.state_dict().items() if k.startswith("mixer.")
                  and k.endswith(("weight", "bias"))})
    qs = rng.normal(0, 5, (256, 3)).astype(np.float32)
    state = rng.normal(0, 2, (256, q.state_dim)).astype(np.float32)
    if backend == "torch":
        import torch
        x = torch.tensor(qs, requires_grad=True)
        grad = torch.autograd.grad(q.nets.mix(x, torch.tensor(state)).sum(), x)[0].numpy()
    else:
        import tensorflow as tf
        x = tf.Variable(qs)
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(q.nets.mix(x, tf.constant(state)))
        grad = tape.gradient(total, x).numpy()
    assert grad.shape == (256, 3) and (grad >= 0).all() and (grad > 0).mean() > 0.5, grad.min()


def test_vdn_mixer_is_the_sum_of_the_acting_agents_q_values(backend):
    VDN = qmix_class(backend, "VDN")
    v = VDN(OBS, ACT, **SMALL, seed=3)
    rng = np.random.default_rng(3)
    batch = joint_batch(64, rng)
    expected = np.zeros(64, np.float32)
    for j, a in enumerate(v.agents):
        qa = v.q_values(a, batch.obs[a])
        chosen = qa[np.arange(64), np.asarray(batch.act[a]) - ACT[a].start]
        expected += np.where(batch.alive[:, j], chosen, 0.0)
    np.testing.assert_allclose(v.q_tot(batch), expected, atol=1e-5)
    assert not [k for k in v.state_dict() if "mixer" in k]


# --------------------------------------------------------------------------- masks

@pytest.mark.parametrize("double", [True, False])
def test_an_illegal_next_action_with_the_highest_q_is_not_the_target(backend, double):
    QMIX = qmix_class(backend)
    for mixer in ("vdn", "qmix"):
        q = QMIX(OBS, ACT, **SMALL, mixer=mixer, double=double, gamma=0.5, team_reward="sum", seed=4)
        set_state(q, const_q(q, [1.0, 2.0, 10.0]))  # action index 2 is the best ...
        batch = joint_batch(16, np.random.default_rng(4), dead=0.0, term=0.0)
        batch.mask = {a: np.ones((16, ACT[a].n), bool) for a in ACT}
        batch.next_mask = {a: np.ones((16, ACT[a].n), bool) for a in ACT}
        free = q.td_target(batch)
        for a in ACT:
            batch.next_mask[a][:, 2] = False  # ... and illegal at the next step
        masked = q.td_target(batch)
        if mixer == "vdn":  # r + gamma * sum of the chosen next Q-values
            rew = batch.rew.sum(axis=1)
            np.testing.assert_allclose(free, rew + 0.5 * 30.0, atol=1e-4)
            np.testing.assert_allclose(masked, rew + 0.5 * 6.0, atol=1e-4)
        else:  # monotonic: the masked target mixes smaller Q-values
            assert (masked < free).all()
            q_next = q.nets.mix(*_tensors(backend, np.full((16, 3), 2.0, np.float32),
                                          q.prepare_batch(batch)["next_state"]), target=True)
            np.testing.assert_allclose(masked, batch.rew.sum(axis=1) + 0.5 * np.asarray(q_next), atol=1e-4)


def _tensors(backend, *arrays):
    if backend == "torch":
        import torch
        return [torch.tensor(x) for x in arrays]
    import tensorflow as tf
    return [tf.constant(x) for x in arrays]


def test_acting_explores_only_legal_actions_and_a_seat_never_gets_another_seats_action(backend):
    """Shared weights: the network has max(n_actions) outputs; agent 'a' (3 actions, start 1) never
    gets an action outside its space, exploring or not, and masks are honoured."""
    q = qmix_class(backend)(OBS, ACT, **SMALL, seed=5)
    set_state(q, const_q(q, [0.0, 0.0, 0.0, 9.0]))  # the 4th output is the best: not an action of 'a'
    obs = np.zeros((200, 4), np.float32)
    assert set(q.act_agent("a", obs).tolist()) == {1}  # argmax over its own 3 actions (ties: the first)
    assert set(q.act_agent("b", np.zeros((200, 3), np.float32)).tolist()) == {3}
    mask = np.zeros((200, 3), bool)
    mask[:, 1] = True
    assert set(q.act_agent("a", obs, mask, explore=True).tolist()) == {2}
    explored = q.act_agent("a", obs, explore=True)
    assert set(explored.tolist()) == {1, 2, 3}  # eps = 1 at the start: uniform over the 3 actions


# --------------------------------------------------------------------------- dead agents, rewards, bootstrapping

def test_dead_agents_are_out_of_the_mixer_and_the_loss(backend):
    """Rows where an agent did not act (or is gone at the next step) give the same Q_tot, target and
    gradient step whatever its stored observation and action there: the core masks them itself."""
    QMIX = qmix_class(backend)
    rng = np.random.default_rng(6)
    batch = joint_batch(64, rng, dead=0.4, term=0.3)
    garbage = JointTransitions(batch.agents, obs={a: v.copy() for a, v in batch.obs.items()},
                               act={a: v.copy() for a, v in batch.act.items()}, rew=batch.rew,
                               next_obs={a: v.copy() for a, v in batch.next_obs.items()},
                               terminated=batch.terminated, truncated=batch.truncated, alive=batch.alive)
    for j, a in enumerate(batch.agents):
        dead, gone = ~batch.alive[:, j], ~batch.alive[:, j] | batch.terminated[:, j]
        if a == "c":
            garbage.obs[a][dead], garbage.next_obs[a][gone] = 4, 3
        else:
            garbage.obs[a][dead] = rng.uniform(-1, 1, (dead.sum(), OBS[a].shape[0]))
            garbage.next_obs[a][gone] = rng.uniform(-1, 1, (gone.sum(), OBS[a].shape[0]))
        garbage.act[a][dead] = ACT[a].start + ACT[a].n - 1
    assert not all(np.array_equal(batch.obs[a], garbage.obs[a]) for a in batch.agents)
    for mixer in ("vdn", "qmix"):
        one, two = (QMIX(OBS, ACT, **SMALL, mixer=mixer, seed=6) for _ in range(2))
        np.testing.assert_allclose(one.q_tot(garbage), one.q_tot(batch), atol=1e-6)
        np.testing.assert_allclose(one.td_target(garbage), one.td_target(batch), atol=1e-6)
        one.learn(batch), two.learn(garbage)
        theirs = two.state_dict()
        for k, v in one.state_dict().items():
            np.testing.assert_allclose(theirs[k], v, atol=1e-6, err_msg=k)
    # and the dead rows do matter when the agent is marked alive there (the test could fail)
    alive = JointTransitions(**{**garbage.__dict__, "alive": np.ones_like(batch.alive)})
    q = QMIX(OBS, ACT, **SMALL, mixer="vdn", seed=6)
    assert not np.allclose(q.q_tot(alive), q.q_tot(batch), atol=1e-4)


def test_team_reward_and_which_steps_bootstrap(backend):
    QMIX = qmix_class(backend)
    n = 4
    obs = {a: np.zeros((n, *OBS[a].shape), OBS[a].dtype) if a != "c" else np.zeros(n, np.int64) for a in OBS}
    act = {a: np.full(n, ACT[a].start) for a in ACT}
    alive = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]], bool)
    terminated = np.array([[0, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]], bool)  # row 1: everyone who acted ended
    truncated = np.array([[1, 1, 1], [0, 0, 0], [0, 1, 1], [0, 0, 0]], bool)  # truncation bootstraps
    rew = np.array([[1, 2, 3], [3, 3, 0], [0, 0, 3], [1, 1, 1]], np.float32)
    batch = JointTransitions(tuple(OBS), obs=obs, act=act, rew=rew, next_obs=obs, terminated=terminated,
                             truncated=truncated, alive=alive)
    for team, r in (("sum", [6, 6, 3, 3]), ("mean", [2, 3, 1, 1])):
        q = QMIX(OBS, ACT, **SMALL, mixer="vdn", team_reward=team, gamma=0.5, seed=7)
        set_state(q, const_q(q, [1.0, 1.0, 1.0, 1.0]))
        # next Q_tot = number of agents still live at the next step (each Q = 1)
        np.testing.assert_allclose(q.td_target(batch), np.array(r) + 0.5 * np.array([3, 0, 2, 3]), atol=1e-5)


def test_standardized_rewards_enter_the_target_by_the_stored_rows_running_statistics(backend, tmp_path):
    """standardize_rewards: the target's reward is (team reward - mean) / std over every stored row where
    an agent acted (rows where none did are left out of the statistics), batch after batch; the
    statistics survive a checkpoint (into the other backend); without the option the target is as before."""
    QMIX = qmix_class(backend)
    rng = np.random.default_rng(3)
    first, second = joint_batch(40, rng), joint_batch(24, rng)
    for b in (first, second):
        b.rew = rng.normal(-2.0, 3.0, b.rew.shape).astype(np.float32)
    first.alive[:5] = False  # five rows where no agent acted
    plain = QMIX(OBS, ACT, **SMALL, seed=5)
    std = QMIX(OBS, ACT, **SMALL, standardize_rewards=True, seed=5)
    for q in (plain, std):
        q.observe_joint(first)
        q.observe_joint(second)
    seen = np.concatenate([std.team_reward(b.rew, b.alive)[b.alive.any(axis=1)] for b in (first, second)])
    assert len(seen) == 59
    np.testing.assert_allclose([std.reward_stats.mean, std.reward_stats.std], [seen.mean(), seen.std()], rtol=1e-6)
    probe = joint_batch(16, rng)
    team = plain.team_reward(probe.rew, probe.alive)
    np.testing.assert_allclose(std.td_target(probe) - plain.td_target(probe),
                               (team - seen.mean()) / seen.std() - team, rtol=1e-4, atol=1e-4)
    assert {"reward_norm.mean", "reward_norm.var", "reward_norm.count"} <= set(std.state_dict())
    assert not any(k.startswith("reward_norm.") for k in plain.state_dict())
    other = qmix_class("tf" if backend == "torch" else "torch")
    moved = other.restore(std.save(tmp_path / "std"))
    assert moved.cfg.standardize_rewards and float(moved.reward_stats.count) == 59
    np.testing.assert_allclose(moved.td_target(probe), std.td_target(probe), atol=1e-4)


# --------------------------------------------------------------------------- targets, schedule, exploration

def test_targets_are_copied_every_target_update_steps_or_follow_by_polyak(backend):
    QMIX = qmix_class(backend)
    rng = np.random.default_rng(8)
    batch = joint_batch(32, rng)
    q = QMIX(OBS, ACT, **SMALL, target_update=2, seed=8)
    start = q.state_dict()
    q.learn(batch)
    s = q.state_dict()
    assert not np.allclose(s["q_net.0.weight"], start["q_net.0.weight"])
    for k in ("target_net.0.weight", "target_mixer.hyper_w1.0.weight"):
        np.testing.assert_array_equal(s[k], start[k])
    q.learn(batch)
    s = q.state_dict()
    for k in ("q_net.0.weight", "mixer.hyper_w1.0.weight", "mixer.value.2.bias"):
        np.testing.assert_array_equal(s[QMIX.target_name(k)], s[k])
    p = QMIX(OBS, ACT, **SMALL, tau=0.25, seed=8)
    p.learn(batch)
    s = p.state_dict()
    np.testing.assert_allclose(s["target_net.0.weight"], 0.75 * start["target_net.0.weight"]
                               + 0.25 * s["q_net.0.weight"], atol=1e-6)


def test_update_schedule_eps_annealing_and_the_replay_of_joint_rows(backend):
    QMIX = qmix_class(backend)
    q = QMIX(OBS, ACT, **{**SMALL, "learning_starts": 40}, replay_ratio=0.25, eps_anneal_steps=100, seed=9)
    rng = np.random.default_rng(9)
    q.observe_joint(joint_batch(32, rng))
    assert q.update(8) == {"gradient_steps": 0} and q.policy.eps == pytest.approx(1 - 0.95 * 0.32)
    q.observe_joint(joint_batch(16, rng, masks=False))
    metrics = q.update(8)
    assert metrics["gradient_steps"] == 4 and {"loss", "q_tot_mean", "td_abs", "eps"} <= set(metrics)
    assert len(q.replay) == 48 and q.updates == 4 and q.agent_steps > 0


def test_per_seat_networks_and_shared_ones(backend):
    QMIX = qmix_class(backend)
    shared, own = QMIX(OBS, ACT, **SMALL, seed=1), QMIX(OBS, ACT, **SMALL, share_weights=False, seed=1)
    assert shared.state_dict()["q_net.0.weight"].shape == (16, 5 + 3)  # widest observation (c: one-hot 5) + 3 ids
    assert [own.state_dict()[f"{a}.q_net.0.weight"].shape for a in "abc"] == [(16, 4), (16, 3), (16, 5)]
    assert [own.state_dict()[f"{a}.q_net.2.bias"].shape for a in "abc"] == [(3,), (4,), (4,)]
    batch = joint_batch(32, np.random.default_rng(1), masks=True)
    before = own.state_dict()
    own.learn(batch)
    after = own.state_dict()
    assert all(not np.allclose(after[f"{a}.q_net.0.weight"], before[f"{a}.q_net.0.weight"]) for a in "abc")


# --------------------------------------------------------------------------- parity and checkpoints

@pytest.mark.parametrize("mixer, share", [("qmix", True), ("vdn", False)])
def test_torch_tf_parity_of_updates_from_the_same_weights(mixer, share):
    cfg = dict(SMALL, mixer=mixer, share_weights=share, update_steps=2, target_update=1, lr=1e-3, seed=11)
    pt, tfa = qmix_class("torch")(OBS, ACT, **cfg), qmix_class("tf")(OBS, ACT, **cfg)
    sp, st = pt.state_dict(), tfa.state_dict()
    assert sp.keys() == st.keys()
    for k in sp:
        np.testing.assert_array_equal(sp[k], st[k], err_msg=k)
    rng = np.random.default_rng(11)
    batch = joint_batch(64, rng, masks=True)
    np.testing.assert_allclose(tfa.td_target(batch), pt.td_target(batch), atol=1e-4)
    m_pt, m_tf = pt.learn(batch), tfa.learn(batch)
    for k in m_pt:
        assert abs(m_pt[k] - m_tf[k]) <= 1e-4 * (1 + abs(m_pt[k])), (k, m_pt[k], m_tf[k])
    more = joint_batch(64, rng, masks=True)
    pt.observe_joint(more), tfa.observe_joint(more)
    assert pt.update(16)["gradient_steps"] == tfa.update(16)["gradient_steps"] == 2
    sp, st = pt.state_dict(), tfa.state_dict()
    for k in sp:
        if k != "rng":
            tol = 1e-4 * (1 + float(np.abs(sp[k]).max(initial=0)))
            np.testing.assert_allclose(st[k], sp[k], atol=tol, rtol=0, err_msg=k)
    assert pt.updates == tfa.updates == 3


@pytest.mark.parametrize("source", BACKENDS)
@pytest.mark.parametrize("name", ["QMIX", "VDN"])
def test_save_restore_across_backends(tmp_path, source, name):
    other = "tf" if source == "torch" else "torch"
    Source, Other = qmix_class(source, name), qmix_class(other, name)
    q = Source(OBS, ACT, **SMALL, share_weights=name == "QMIX", seed=12)
    rng = np.random.default_rng(12)
    q.observe_joint(joint_batch(32, rng, masks=True))
    q.update(8)
    moved = Other.restore(q.save(tmp_path / "q"))
    assert type(moved) is Other and moved.mixer == q.mixer and moved.shared == q.shared
    for a in q.agents:
        obs = joint_batch(16, rng).obs[a]
        np.testing.assert_allclose(moved.q_values(a, obs), q.q_values(a, obs), atol=1e-5)
        np.testing.assert_array_equal(moved.act_agent(a, obs), q.act_agent(a, obs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # both backends take the same arguments: nothing is dropped
        back = Source.restore(moved.save(tmp_path / "back.zip"))
    for k, v in q.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[k], v, err_msg=k)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, error, message", [
    (dict(mixer="sum"), ValueError, r"mixer must be one of \['vdn', 'qmix'\], got 'sum'"),
    (dict(team_reward="max"), ValueError, r"team_reward must be one of \['sum', 'mean'\]"),
    (dict(tau=0.0), ValueError, r"tau must be in \(0, 1\]"),
    (dict(eps_min=1.5), ValueError, r"eps_min must be in \[0, 1\]"),
    (dict(mixing_embed=0), ValueError, r"mixing_embed must be a positive integer"),
])
def test_bad_hyperparameters_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        QMIXConfig(**kwargs)


def test_bad_spaces_are_refused_before_anything_is_built(backend):
    QMIX = qmix_class(backend)
    with pytest.raises(TypeError, match=r"QMIX needs Discrete actions \(one Q-value per action\); agent 'a' has Box"):
        QMIX({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Box(-1, 1, (2,))})
    with pytest.raises(ValueError, match="VDN has no conv torso yet: agent 'a' observes images"):
        qmix_class(backend, "VDN")({"a": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)}, {"a": gym.spaces.Discrete(2)})
    with pytest.raises(ValueError, match="observation and action spaces must cover the same non-empty agents"):
        QMIX({"a": gym.spaces.Box(-1, 1, (2,))}, {"b": gym.spaces.Discrete(2)})


# --------------------------------------------------------------------------- the env's global state

def test_the_mixer_reads_the_envs_state_when_the_trainer_has_one():
    """On simple_spread (MPE has state()), from_trainer builds the mixer on the env's state: the joint rows
    carry it into replay, and Q_tot changes with the state alone; the fallback (no state) ignores it."""
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    from marl_note.trainers import DecentralizedTrainer

    QMIX = qmix_class("torch")
    trainer = DecentralizedTrainer(lambda: simple_spread_v3.parallel_env(max_cycles=5), num_train_envs=2,
                                   num_test_envs=1, batch_size=16, update_freq=20, test_freq=100, episodes_per_train=4,
                                   episodes_per_test=1, seed=0)
    try:
        shape = trainer.spec.state_space.shape
        q = QMIX.from_trainer(trainer, **{**SMALL, "learning_starts": 10}, seed=0)
        assert q.cfg.state_shape == tuple(shape) and q.state_dim == int(np.prod(shape))
        assert q.state_dict()["mixer.hyper_w1.0.weight"].shape[1] == q.state_dim
        stats = trainer.train(q.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
        assert stats["num_gradient_steps"] > 0 and q.replay.has_state
    finally:
        trainer.close()
    batch = q.replay.sample(32)
    assert batch.state.shape == (32, *shape) and np.abs(batch.state).sum() > 0
    moved = JointTransitions(**{**batch.__dict__, "state": batch.state + 1.0})
    assert not np.allclose(q.q_tot(moved), q.q_tot(batch))
    with pytest.raises(ValueError, match=r"built with state_shape=\(\d+,\) .* but the batch has no state/next_state"):
        q.observe_joint(JointTransitions(**{**batch.__dict__, "state": None, "next_state": None}))
    fallback = QMIX(q.observation_spaces, q.action_spaces, **SMALL, seed=0)
    assert fallback.state_dim == sum(q.obs_dim.values())
    np.testing.assert_allclose(fallback.q_tot(moved), fallback.q_tot(batch))


# --------------------------------------------------------------------------- a cooperative env with action masks

def test_on_hanabi_masks_hold_in_acting_and_the_seat_not_on_turn_can_only_wait_in_the_targets():
    """Hanabi with every seat acting (cooperative_parallel_env): training explores and tests greedily without
    an illegal action (the env refuses one); every stored row has both agents acting, and the target
    takes the wait Q-value of the seat not on turn at the next step however large another of its
    Q-values is, and the best legal one of the seat on turn (VDN: a sum, checked by hand)."""
    pytest.importorskip("pyspiel")
    from marl_note.envs.openspiel import cooperative_parallel_env
    from marl_note.trainers import DecentralizedTrainer

    params = dict(players=2, colors=2, ranks=3, hand_size=2, max_information_tokens=3, max_life_tokens=1)
    VDN = qmix_class("torch", "VDN")
    trainer = DecentralizedTrainer(lambda: cooperative_parallel_env("hanabi", **params), num_train_envs=2,
                                   num_test_envs=2, batch_size=16, update_freq=20, test_freq=1000,
                                   episodes_per_train=30, episodes_per_test=4, seed=0)
    try:
        v = VDN.from_trainer(trainer, **{**SMALL, "learning_starts": 32}, gamma=0.5, team_reward="sum", seed=0)
        stats = trainer.train(v.seat_agents(), learning_mask=[1, 1], plot=False, progress=False, baseline=None)
        assert stats["num_gradient_steps"] > 0
        trainer.test(v.seat_agents(), episodes=4)
    finally:
        trainer.close()
    batch = v.replay.sample(64)
    assert batch.alive.all()
    wait = 9
    values = np.arange(1.0, 11.0, dtype=np.float32)
    values[wait] = 1.0
    values[0] = 50.0  # the highest Q-value: legal for the seat on turn at times, never for the one waiting
    set_state(v, const_q(v, values))
    go_on = ~batch.terminated.any(axis=1)
    assert go_on.sum() > 10 and batch.terminated[~go_on].all()  # a game ends for both seats at once
    best = np.zeros(64, np.float32)
    for a in v.agents:
        best += np.where(batch.next_mask[a], values, -np.inf).max(axis=1)
    waits = sum((batch.next_mask[a].sum(axis=1) == 1) & batch.next_mask[a][:, wait] for a in v.agents)
    assert (waits[go_on] == 1).all()  # at every next step that is played, exactly one seat waits
    expected = batch.rew.sum(axis=1) + 0.5 * np.where(go_on, best, 0.0)
    np.testing.assert_allclose(v.td_target(batch), expected, atol=1e-4)


def test_a_turn_based_env_is_refused_before_any_row_is_stored():
    """On an AEC env only one seat acts per step: a joint row would hold the others as if dead (out of the
    mixer) and the mover's next observation before its own next turn, so the trainer refuses VDN/QMIX
    there (cooperative_parallel_env plays a turn-based cooperative game with every seat acting)."""
    from pettingzoo.classic import rps_v2

    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer(rps_v2.env, num_train_envs=1, num_test_envs=1, episodes_per_train=2,
                                   episodes_per_test=1, seed=0)
    try:
        assert trainer.spec.turn_based
        q = qmix_class("torch").from_trainer(trainer, **SMALL, seed=0)
        with pytest.raises(TypeError, match="learns from joint per-step data, which needs a Parallel env; this env "
                                            "is turn-based"):
            trainer.train(q.seat_agents(), learning_mask=[1, 1], plot=False, progress=False)
    finally:
        trainer.close()
    assert len(q.replay) == 0
