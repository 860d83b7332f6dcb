"""PPO in both backends: masked categorical and Gaussian policies, the rollout schedule, seeding and state."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.ppo import PPOConfig
from marl_note.types import Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(4)
BOX = gym.spaces.Box(-1.0, 1.0, (2, 1), np.float32)
SMALL = dict(hidden_sizes=(16,))


@pytest.fixture(params=["torch", "tf", "numpy"])
def PPO(request):
    pytest.importorskip({"torch": "torch", "tf": "tensorflow", "numpy": "numpy"}[request.param])
    return importlib.import_module(f"marl_note.agents.{request.param}").PPO


def random_masks(n, k, rng):
    m = rng.random((n, k)) < 0.5
    m[np.arange(n), rng.integers(0, k, n)] = True
    return m


def rollout(agent, n, rng, masks=False, streams=4):
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    mask = random_masks(n, 4, rng) if masks else None
    act = agent.act(obs, mask, explore=True)
    return Transitions(obs=obs, act=act, rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.normal(size=(n, 3)).astype(np.float32), terminated=rng.random(n) < 0.1,
                       truncated=np.zeros(n, bool), mask=mask, next_mask=random_masks(n, 4, rng) if masks else None,
                       stream=np.arange(n) % streams)


def sharpen(agent, factor):
    """Scale the policy head's last layer (through the numpy state) so the logits really matter."""
    state = agent.state_dict()
    heads = [k for k in state if k.startswith("net.pi.") and k.endswith(".weight")]
    key = max(heads, key=lambda k: int(k.split(".")[2]))
    state[key] = state[key] * factor
    agent.load_state_dict(state)


def logits(agent, obs):
    return agent.nets.policy(agent.encoder(obs)).astype(np.float64)


def test_rejects_unsupported_spaces_and_bad_input(PPO):
    with pytest.raises(TypeError, match="Discrete and Box"):
        PPO(OBS, gym.spaces.MultiDiscrete([2, 2]))
    with pytest.raises(ValueError, match="n_epochs"):
        PPO(OBS, ACT, n_epochs=0)
    with pytest.raises(ValueError, match="clip_range"):
        PPO(OBS, ACT, clip_range=0.0)
    with pytest.raises(ValueError, match="gae_lambda"):
        PPO(OBS, ACT, gae_lambda=1.5)
    agent = PPO(OBS, ACT, seed=0, **SMALL)
    with pytest.raises(ValueError, match=r"obs has shape \(5, 2\)"):
        agent.act(np.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"mask has shape \(5, 3\)"):
        agent.act(np.zeros((5, 3)), mask=np.ones((5, 3), bool))
    with pytest.raises(ValueError, match="transitions.obs"):
        agent.observe(Transitions(obs=np.zeros((2, 4)), act=np.zeros(2, int), rew=np.zeros(2),
                                  next_obs=np.zeros((2, 3)), terminated=np.zeros(2, bool), truncated=np.zeros(2, bool)))


def test_config_is_checked_once_and_read_back():
    cfg = PPOConfig(hidden_sizes=[8, 4], n_steps=16)
    assert cfg.hidden_sizes == (8, 4) and cfg.initial_priority == 0.5 * 1.0 + 0.5 * 1.0
    with pytest.raises(ValueError, match="initial priority"):
        PPOConfig(lambda_=0.0, initial_ratio=0.0)
    with pytest.raises(ValueError, match="activation"):
        PPOConfig(activation="sigmoid")


def test_masked_categorical_sampling_and_greedy(PPO):
    agent = PPO(OBS, ACT, seed=1, **SMALL)
    sharpen(agent, 300.0)
    rng = np.random.default_rng(1)
    obs = np.repeat(rng.normal(size=(1, 3)).astype(np.float32), 20_000, axis=0)
    lg = logits(agent, obs[:1])[0]
    mask = np.ones((20_000, 4), bool)
    mask[:, lg.argmax()] = False
    a = agent.act(obs, mask, explore=True)
    assert mask[np.arange(20_000), a].all()
    p = np.where(mask[0], np.exp(lg - lg.max()), 0.0)
    p /= p.sum()
    f = np.bincount(a, minlength=4) / len(a)
    assert np.all(np.abs(f - p) < 4.5 * np.sqrt(p * (1 - p) / len(a)) + 1e-9), (f, p)
    assert (agent.act(obs[:5], mask[:5]) == np.where(mask[0], lg, -np.inf).argmax()).all()
    many = rng.normal(size=(2000, 3)).astype(np.float32)
    many_mask = random_masks(2000, 4, rng)
    assert many_mask[np.arange(2000), agent.act(many, many_mask, explore=True)].all()
    assert many_mask[np.arange(2000), agent.act(many, many_mask)].all()


def test_log_prob_matches_reference(PPO):
    agent = PPO(OBS, ACT, seed=2, **SMALL)
    sharpen(agent, 50.0)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(100, 3)).astype(np.float32)
    mask = random_masks(100, 4, rng)
    act = agent.act(obs, mask, explore=True)
    lg = np.where(mask, logits(agent, obs), -np.inf)
    ref = lg[np.arange(100), act] - np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) - lg.max(1)
    np.testing.assert_allclose(agent.log_prob(obs, act, mask), ref, rtol=1e-4, atol=1e-4)
    lg_free = logits(agent, obs)
    ref_free = lg_free[np.arange(100), act] - np.log(np.exp(lg_free).sum(1))
    np.testing.assert_allclose(agent.log_prob(obs, act), ref_free, rtol=1e-4, atol=1e-4)


def test_deterministic_eval_false_samples_when_not_exploring(PPO, tmp_path):
    """explore=False: the arg-max / mean by default; with deterministic_eval=False, draws from the policy (legal
    moves only), and the option survives save/restore."""
    obs = np.repeat(np.random.default_rng(4).normal(size=(1, 3)).astype(np.float32), 4000, axis=0)
    greedy = PPO(OBS, ACT, seed=4, **SMALL)
    assert len(np.unique(greedy.act(obs))) == 1
    agent = PPO(OBS, ACT, seed=4, deterministic_eval=False, **SMALL)
    mask = np.ones((4000, 4), bool)
    mask[:, 0] = False
    a = agent.act(obs, mask)
    assert mask[np.arange(4000), a].all() and len(np.unique(a)) == 3  # near-uniform logits at init
    box = PPO(OBS, BOX, seed=4, deterministic_eval=False, log_std_init=np.log(0.5), **SMALL)
    sample = box.act(obs)
    np.testing.assert_allclose(sample.std(0), 0.5, atol=0.03)
    np.testing.assert_allclose(sample.mean(0), PPO(OBS, BOX, seed=4, **SMALL).act(obs[:1])[0], atol=0.03)
    box.save(str(tmp_path / "ppo"))
    back = type(box).restore(str(tmp_path / "ppo"))
    assert back.deterministic_eval is False and back.act(obs[:500]).std(0).min() > 0.4
    with pytest.raises(TypeError):
        PPO(OBS, ACT, deterministic_eval=False, nonsense=1)


def test_gaussian_box_actions(PPO):
    agent = PPO(OBS, BOX, seed=3, log_std_init=np.log(0.5), **SMALL)
    obs = np.repeat(np.random.default_rng(3).normal(size=(1, 3)).astype(np.float32), 20_000, axis=0)
    mean = agent.act(obs[:4])
    assert mean.shape == (4, 2, 1) and mean.dtype == np.float32
    sample = agent.act(obs, explore=True)
    assert sample.shape == (20_000, 2, 1)
    np.testing.assert_allclose(sample.mean(0), mean[0], atol=0.02)
    np.testing.assert_allclose(sample.std(0), 0.5, atol=0.02)
    wide = PPO(OBS, BOX, seed=3, log_std_init=np.log(5.0), **SMALL).act(obs[:200], explore=True)
    assert np.abs(wide).max() > 1.0  # raw samples, unclipped
    a = sample[:10]
    ref = (-0.5 * ((a - mean[0]) / 0.5) ** 2 - np.log(0.5) - 0.5 * np.log(2 * np.pi)).reshape(10, -1).sum(1)
    np.testing.assert_allclose(agent.log_prob(obs[:10], a), ref, rtol=1e-4, atol=1e-4)
    agent2 = PPO(OBS, BOX, seed=3, n_steps=32, n_epochs=2, **SMALL)
    agent2.observe(Transitions(obs=obs[:32], act=agent2.act(obs[:32], explore=True), rew=np.ones(32),
                               next_obs=obs[:32], terminated=np.zeros(32, bool), truncated=np.zeros(32, bool)))
    before = agent2.state_dict()["net.log_std"]
    assert agent2.update(16)["gradient_steps"] == 4
    assert not np.array_equal(before, agent2.state_dict()["net.log_std"])  # the log-std learns too


def test_update_waits_for_n_steps_then_trains_on_all_and_clears(PPO):
    agent = PPO(OBS, ACT, seed=4, n_steps=100, n_epochs=3, **SMALL)
    rng = np.random.default_rng(4)
    agent.observe(rollout(agent, 60, rng))
    assert agent.update(32) == {"gradient_steps": 0}
    agent.observe(rollout(agent, 60, rng))
    m = agent.update(32)
    assert m["gradient_steps"] == 3 * 4 == agent.updates  # 120 items in minibatches of 32: 4 per epoch
    assert len(agent.rollout) == 0 and agent.agent_steps == 120
    for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance"):
        assert np.isfinite(m[k])
    assert agent.update(32) == {"gradient_steps": 0}
    agent.observe(rollout(agent, 100, rng))
    with pytest.raises(ValueError, match="batch_size"):
        agent.update(0)
    assert agent.n_steps == 100 and agent.gamma == 0.99  # hyperparameters read as attributes


def test_the_gae_pass_in_pieces_gives_the_update_of_one_pass(PPO, monkeypatch):
    # the update's pass over the rollout runs EVAL_ROWS rows at a time (a budget can stop it between two)
    import marl_note.agents.ppo as ppo

    states = []
    for rows in (10**6, 7):  # one pass; pieces of 7 rows (the last one shorter)
        monkeypatch.setattr(ppo, "EVAL_ROWS", rows)
        agent = PPO(OBS, ACT, seed=4, n_steps=60, n_epochs=2, **SMALL)
        agent.observe(rollout(agent, 60, np.random.default_rng(4)))
        assert agent.update(32)["gradient_steps"] == 4
        states.append(agent.state_dict())
    for k in states[0]:
        np.testing.assert_allclose(states[1][k], states[0][k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_first_step_sees_behaviour_policy(PPO):
    """Old log-probs are those of the acting network: the first ratio is exactly 1."""
    agent = PPO(OBS, ACT, seed=5, n_steps=64, n_epochs=1, **SMALL)
    agent.observe(rollout(agent, 64, np.random.default_rng(5), masks=True))
    m = agent.update(64)  # one minibatch, one step
    assert m["gradient_steps"] == 1
    assert m["approx_kl"] == 0.0 and m["clip_fraction"] == 0.0
    assert abs(m["policy_loss"]) < 1e-6  # -mean(normalised advantages) with ratio 1


@pytest.mark.parametrize("shared", [False, True])
def test_masked_training_stays_finite_and_legal(PPO, shared):
    agent = PPO(OBS, ACT, seed=6, n_steps=128, n_epochs=4, ent_coef=0.01, shared=shared, lr=1e-2, **SMALL)
    rng = np.random.default_rng(6)
    for _ in range(2):
        agent.observe(rollout(agent, 128, rng, masks=True))
        m = agent.update(32)
        assert m["gradient_steps"] == 16 and np.isfinite(m["entropy"]) and np.isfinite(m["policy_loss"])
    assert all(np.isfinite(w).all() for w in agent.state_dict().values() if w.dtype.kind == "f")
    obs = rng.normal(size=(500, 3)).astype(np.float32)
    mask = random_masks(500, 4, rng)
    assert mask[np.arange(500), agent.act(obs, mask, explore=True)].all()


def test_shared_trunk_without_hidden_layers_is_the_identity(PPO):
    agent = PPO(OBS, ACT, seed=6, n_steps=16, n_epochs=1, shared=True, hidden_sizes=())
    assert not any(k.startswith("net.trunk") for k in agent.state_dict())
    agent.observe(rollout(agent, 16, np.random.default_rng(6)))
    assert agent.update(8)["gradient_steps"] == 2


def test_target_kl_stops_early(PPO):
    agent = PPO(OBS, ACT, seed=7, n_steps=64, n_epochs=50, lr=0.05, target_kl=1e-4, **SMALL)
    agent.observe(rollout(agent, 64, np.random.default_rng(7)))
    assert 0 < agent.update(16)["gradient_steps"] < 50 * 4


def _trained(PPO, seed, space=ACT):
    agent = PPO(OBS, space, seed=seed, n_steps=64, n_epochs=2, **SMALL)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 3)).astype(np.float32)
    agent.observe(Transitions(obs=obs, act=agent.act(obs, explore=True), rew=rng.normal(size=64).astype(np.float32),
                              next_obs=obs, terminated=rng.random(64) < 0.2, truncated=np.zeros(64, bool),
                              stream=np.arange(64) % 4))
    agent.update(16)
    return agent


@pytest.mark.parametrize("space", [ACT, BOX], ids=["discrete", "box"])
def test_seeding_and_state_dict_round_trip(PPO, space):
    a = _trained(PPO, 11, space)
    sa = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in sa.values())
    assert "torch_rng" not in sa
    sb = _trained(PPO, 11, space).state_dict()  # same seed, same data: the same run (bit for bit)
    assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)
    other = PPO(OBS, space, seed=12, **SMALL).state_dict()["net.pi.0.weight"]
    assert not np.array_equal(PPO(OBS, space, seed=11, **SMALL).state_dict()["net.pi.0.weight"], other)
    clone = PPO(OBS, space, seed=0, n_steps=64, n_epochs=2, **SMALL)
    clone.load_state_dict(sa)
    assert (clone.agent_steps, clone.updates) == (a.agent_steps, a.updates)
    obs = np.random.default_rng(9).normal(size=(32, 3)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(a.act(obs, explore=True), clone.act(obs, explore=True))
    np.testing.assert_array_equal(a.act(obs), clone.act(obs))
    with pytest.raises(ValueError, match="shape"):
        PPO(OBS, space, hidden_sizes=(8,)).load_state_dict(sa)
