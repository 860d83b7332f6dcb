"""MAPPO / IPPO: critic inputs, dead agents and masks in the loss, backend parity, checkpoints, training."""
from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3

import marl_note.agents.torch.mappo as torch_mappo
from marl_note.types import JointTransitions

AGENTS = ("a", "b")
OBS = {a: gym.spaces.Box(-9, 9, (2,), np.float32) for a in AGENTS}
ACTS = {a: gym.spaces.Discrete(3) for a in AGENTS}
STATE = gym.spaces.Box(-9, 9, (3,), np.float32)


def joint(n: int = 8, seed: int = 0, state: bool = False, alive=None, mask=None) -> JointTransitions:
    rng = np.random.default_rng(seed)
    obs = {a: rng.normal(size=(n, 2)).astype(np.float32) for a in AGENTS}
    nxt = {a: rng.normal(size=(n, 2)).astype(np.float32) for a in AGENTS}
    term = np.zeros((n, 2), bool)
    term[-1] = True
    return JointTransitions(AGENTS, obs=obs, act={a: rng.integers(0, 3, n) for a in AGENTS},
                            rew=rng.normal(size=(n, 2)).astype(np.float32), next_obs=nxt, terminated=term,
                            truncated=np.zeros((n, 2), bool), alive=np.ones((n, 2), bool) if alive is None else alive,
                            stream=np.zeros(n, np.int64), mask=mask,
                            state=rng.normal(size=(n, 3)).astype(np.float32) if state else None,
                            next_state=rng.normal(size=(n, 3)).astype(np.float32) if state else None)


def make(backend: str = "torch", **kw):
    mod = torch_mappo if backend == "torch" else pytest.importorskip("marl_note.agents.tf.mappo")
    return mod.MAPPO(OBS, ACTS, hidden_sizes=(8,), seed=0, **kw)


def test_central_critic_input_is_the_state_then_the_agent_id():
    m = make(state_space=STATE)
    obs = {"a": np.array([[1.0, 2.0]]), "b": np.array([[3.0, 4.0]])}
    got = m.critic_inputs(obs, np.array([[7.0, 8.0, 9.0]]))
    assert got["a"].tolist() == [[7.0, 8.0, 9.0, 1.0, 0.0]]
    assert got["b"].tolist() == [[7.0, 8.0, 9.0, 0.0, 1.0]]
    with pytest.raises(ValueError, match="carry no state"):
        m.critic_inputs(obs, None)


def test_central_critic_falls_back_to_the_joint_observation_with_agent_ids():
    m = make()
    got = m.critic_inputs({"a": np.array([[1.0, 2.0]]), "b": np.array([[3.0, 4.0]])}, None)
    assert got["a"].tolist() == [[1.0, 2.0, 3.0, 4.0, 1.0, 0.0]]
    assert got["b"].tolist() == [[1.0, 2.0, 3.0, 4.0, 0.0, 1.0]]
    per_seat = make(share_actor=False)  # one critic per seat: no id
    assert per_seat.critic_inputs({"a": np.array([[1.0, 2.0]]), "b": np.array([[3.0, 4.0]])},
                                  None)["b"].tolist() == [[1.0, 2.0, 3.0, 4.0]]


def test_local_critic_reads_the_agents_own_observation():
    m = make(critic="local")
    got = m.critic_inputs({"a": np.array([[1.0, 2.0]]), "b": np.array([[3.0, 4.0]])}, np.ones((1, 3)))
    assert got["b"].tolist() == [[3.0, 4.0, 0.0, 1.0]]


def _loss(m, batch) -> float:
    m.observe_joint(batch)
    data = m.rollout()
    m._rows = []
    mb = m.minibatch(data, np.arange(len(batch)))
    return float(m.nets.loss(mb)[0].detach())


@pytest.mark.parametrize("share_actor", [True, False])
def test_a_dead_agents_rows_do_not_change_the_loss(share_actor):
    alive = np.ones((8, 2), bool)
    alive[2:5, 1] = False  # agent b did not act in rows 2-4
    base = joint(alive=alive)
    changed = joint(alive=alive)
    changed.act["b"] = changed.act["b"].copy()
    changed.act["b"][2:5] = (changed.act["b"][2:5] + 1) % 3
    changed.obs["b"] = changed.obs["b"].copy()
    changed.obs["b"][2:5] += 5.0
    changed.rew[2:5, 1] += 100.0
    assert _loss(make(share_actor=share_actor, critic="local"), base) == pytest.approx(
        _loss(make(share_actor=share_actor, critic="local"), changed), rel=1e-6)
    alive_changed = joint(alive=np.ones((8, 2), bool))  # and the same change in live rows does change it
    alive_changed.rew[2:5, 1] += 100.0
    assert _loss(make(share_actor=share_actor, critic="local"), joint(alive=np.ones((8, 2), bool))) != \
        pytest.approx(_loss(make(share_actor=share_actor, critic="local"), alive_changed), rel=1e-3)


def test_action_masks_are_honoured_in_acting_and_in_the_probabilities():
    m = make()
    mask = np.zeros((50, 3), bool)
    mask[:, 1] = True
    for explore in (True, False):
        assert (m.act_agent("a", np.random.default_rng(0).normal(size=(50, 2)), mask, explore=explore) == 1).all()
    masks = {a: np.tile([True, False, True], (8, 1)) for a in AGENTS}
    batch = joint(mask=masks)
    for a in AGENTS:
        batch.act[a] = np.where(batch.act[a] == 1, 0, batch.act[a])
    m.observe_joint(batch)
    data = m.rollout()
    probs = np.exp(data["logp"]["a"])
    assert np.all(probs > 0.3)  # two legal actions share the probability (near uniform at the start)
    bad = joint(mask=masks)
    bad.act["a"][:] = 5
    with pytest.raises(ValueError, match="outside"):
        m.observe_joint(bad)


@pytest.mark.parametrize("kw", [{}, {"share_actor": False, "critic": "local"}, {"state_space": STATE}])
def test_torch_and_tf_take_the_same_update_from_the_same_weights(kw):
    pytest.importorskip("tensorflow")
    t, f = make("torch", n_steps=8, n_epochs=2, **kw), make("tf", n_steps=8, n_epochs=2, **kw)
    theirs = f.state_dict()
    for name, value in t.state_dict().items():
        if ".weight" in name or ".bias" in name:
            np.testing.assert_array_equal(value, theirs[name])
    batch = joint(state="state_space" in kw)
    for agent in (t, f):
        agent.observe_joint(batch)
    mt, mf = t.update(batch_size=4), f.update(batch_size=4)
    assert mt["gradient_steps"] == mf["gradient_steps"] == 4
    for key in ("policy_loss", "value_loss", "entropy"):
        assert mt[key] == pytest.approx(mf[key], rel=1e-3, abs=1e-5)
    st, sf = t.state_dict(), f.state_dict()
    for name in st:
        if name.endswith((".weight", ".bias")) and "optimizer" not in name:
            np.testing.assert_allclose(st[name], sf[name], rtol=1e-3, atol=1e-5, err_msg=name)


def test_checkpoint_round_trip_torch_to_tf_and_back(tmp_path):
    tf_mappo = pytest.importorskip("marl_note.agents.tf.mappo")
    m = make("torch", n_steps=8, n_epochs=1, state_space=STATE, critic="central")
    m.observe_joint(joint(state=True))
    m.update(batch_size=8)
    path = m.save(os.fspath(tmp_path / "m"))
    back = tf_mappo.MAPPO.restore(path)
    assert back.state_space == STATE and back.cfg == m.cfg
    obs = np.random.default_rng(1).normal(size=(6, 2)).astype(np.float32)
    np.testing.assert_array_equal(back.act_agent("b", obs), m.act_agent("b", obs))
    assert float(back.value_stats.mean) == float(m.value_stats.mean)
    again = torch_mappo.MAPPO.restore(back.save(os.fspath(tmp_path / "t")))
    theirs = again.state_dict()
    for k, v in m.state_dict().items():
        np.testing.assert_allclose(theirs[k], v, rtol=1e-6, err_msg=k)
    ippo = torch_mappo.IPPO.restore(torch_mappo.IPPO(OBS, ACTS, hidden_sizes=(4,), seed=0).save(
        os.fspath(tmp_path / "i")))
    assert ippo.cfg.critic == "local"


def test_bad_options_are_refused_before_any_work():
    with pytest.raises(ValueError, match="share_actor=False"):
        torch_mappo.MAPPO({"a": OBS["a"], "b": gym.spaces.Box(-1, 1, (5,))}, ACTS)
    with pytest.raises(TypeError, match="Discrete actions"):
        torch_mappo.MAPPO(OBS, {"a": ACTS["a"], "b": gym.spaces.Box(-1, 1, (2,))})
    with pytest.raises(ValueError, match="critic must be"):
        make(critic="global")


def test_trains_on_simple_spread_with_the_env_state():
    from marl_note.trainers import DecentralizedTrainer

    def env():
        return simple_spread_v3.parallel_env(max_cycles=5)
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, update_freq=20, episodes_per_train=8,
                                   episodes_per_test=1, test_freq=8, batch_size=20, seed=0)
    m = torch_mappo.MAPPO.from_trainer(trainer, hidden_sizes=(8,), n_steps=20, n_epochs=1, seed=0)
    assert m.state_space.shape == (54,) and m.critic_input_dim == 54 + 3
    stats = trainer.train(m.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
    trainer.close()
    assert stats["num_gradient_steps"] >= 1 and m.updates >= 1


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_cli_tiny_run(tmp_path, algo, capsys):
    """In this process, as tests/cli/test_cli_qmix.py does (``python -m marl_note`` itself is run by
    tests/cli/test_cli.py): a subprocess only added a torch start-up."""
    from marl_note.cli import main

    out = tmp_path / "run"
    assert main(["train", "--env", "simple_spread_v3", "--algo", algo, "--env-steps", "200", "--out", os.fspath(out),
                 "--quiet"]) == 0, capsys.readouterr().err[-2000:]
    assert (out / "last").exists()


def test_unlike_seats_train_one_actor_per_seat_over_the_env_state():
    """simple_speaker_listener: the speaker sees 3 features and has 3 actions, the listener 11 and 5."""
    from mpe2 import simple_speaker_listener_v4

    from marl_note.trainers import DecentralizedTrainer

    def env():
        return simple_speaker_listener_v4.parallel_env(max_cycles=5)
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, update_freq=20, episodes_per_train=8,
                                   episodes_per_test=1, test_freq=8, batch_size=20, seed=0)
    with pytest.raises(ValueError, match="share_actor=False"):
        torch_mappo.MAPPO.from_trainer(trainer)
    m = torch_mappo.MAPPO.from_trainer(trainer, share_actor=False, hidden_sizes=(8,), n_steps=20, n_epochs=1, seed=0)
    assert m.groups == ("speaker_0", "listener_0") and m.critic_input_dim == m.state_space.shape[0] == 14
    shapes = {name: value.shape for name, value in m.state_dict().items()}
    assert shapes["speaker_0.actor.0.weight"] == (8, 3) and shapes["listener_0.actor.0.weight"] == (8, 11)
    assert shapes["speaker_0.actor.2.weight"] == (3, 8) and shapes["listener_0.actor.2.weight"] == (5, 8)
    assert shapes["speaker_0.critic.0.weight"] == shapes["listener_0.critic.0.weight"] == (8, 14)
    stats = trainer.train(m.seat_agents(), learning_mask=[1, 1], plot=False, progress=False)
    assert stats["num_gradient_steps"] >= 1
    speaker, listener = m.seat_agents()
    assert set(speaker.act(np.zeros((64, 3)), explore=True)) <= {0, 1, 2}
    assert set(listener.act(np.zeros((64, 11)), explore=True)) == {0, 1, 2, 3, 4}
    result = trainer.test(m.seat_agents(), episodes=2)
    trainer.close()
    assert np.isfinite(result["rewards"]).all()
