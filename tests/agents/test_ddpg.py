"""DDPG in every backend: acting in the bounds, noise, targets, Polyak updates, state, learning, HER, parity."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.ddpg import DDPGConfig, DDPGCore
from marl_note.agents.exploration.noise import GaussianWhiteNoiseProcess, OrnsteinUhlenbeckProcess
from marl_note.agents.networks import mlp_forward
from marl_note.envs.goal_envs import PointReachEnv
from marl_note.replay import HERReplayBuffer, PrioritizedReplayBuffer
from marl_note.types import Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32))


def backend(name):
    pytest.importorskip({"torch": "torch", "tf": "tensorflow", "numpy": "numpy"}[name])
    return importlib.import_module(f"marl_note.agents.{name}")


@pytest.fixture(params=["torch", "tf", "numpy"])
def DDPG(request):
    return backend(request.param).DDPG


def batch(n, rng, **over):
    t = dict(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), act=rng.uniform(ACT.low, ACT.high, (n, 2)),
             rew=rng.normal(size=n).astype(np.float32), next_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
             terminated=rng.random(n) < 0.3, truncated=np.zeros(n, bool))
    t.update(over)
    return Transitions(**t)


def test_rejects_bad_spaces_and_options(DDPG):
    with pytest.raises(TypeError, match="Box action space"):
        DDPG(OBS, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="finite"):
        DDPG(OBS, gym.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ValueError, match="tau"):
        DDPG(OBS, ACT, tau=0.0)
    with pytest.raises(ValueError, match="target_clip"):
        DDPG(OBS, ACT, target_clip=(0.0, -1.0))
    with pytest.raises(ValueError, match="noise process size"):
        DDPG(OBS, ACT, noise=GaussianWhiteNoiseProcess(size=3))
    with pytest.raises(TypeError, match="sample"):
        DDPG(OBS, ACT, noise=object())
    with pytest.raises(ValueError, match="beta"):
        DDPG(OBS, ACT, PR=True, beta=3.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(actor_lr=0.0), "actor_lr must be a positive"), (dict(critic_lr=-1e-3), "critic_lr must be a positive"),
    (dict(learning_starts=-1), "learning_starts must be a non-negative integer"),
    (dict(update_steps=1.5), "update_steps must be a non-negative integer"),
    (dict(replay_ratio=-0.5), "replay_ratio must be a finite number >= 0"),
    (dict(max_grad_norm=0.0), "max_grad_norm must be a positive"), (dict(action_l2=-1.0), "action_l2"),
    (dict(activation="sigmoid"), "unknown activation"), (dict(hidden_sizes=(8, 0)), "hidden_sizes"),
    (dict(target_clip=(1.0,)), "target_clip must be a"), (dict(gamma=1.5), r"gamma must be in \[0, 1\]"),
])
def test_config_checks_every_hyperparameter_once(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DDPGConfig(**kwargs)
    with pytest.raises(ValueError, match=match):
        backend("torch").DDPG(OBS, ACT, **kwargs)


def test_the_core_needs_a_backend_and_matches_the_config_defaults():
    with pytest.raises(TypeError, match="no backend"):
        DDPGCore(OBS, ACT)
    agent = backend("torch").DDPG(OBS, ACT, hidden_sizes=[16], target_clip=[-1, 0], seed=0)
    assert agent.cfg == DDPGConfig(hidden_sizes=(16,), target_clip=(-1.0, 0.0), torso="mlp")  # the torso resolved
    assert agent.config["gamma"] == DDPGConfig.gamma and agent.config["hidden_sizes"] == [16]


def test_actions_are_squashed_into_asymmetric_bounds(DDPG):
    agent = DDPG(OBS, ACT, hidden_sizes=(16,), seed=0)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)
    greedy = agent.act(obs)
    assert greedy.shape == (64, 2) and greedy.dtype == np.float32
    np.testing.assert_array_equal(greedy, agent.act(obs))  # deterministic without exploration
    unit = agent.unit_actions(obs)
    np.testing.assert_allclose(greedy, np.stack([(unit[:, 0] + 1) / 2, 2 * unit[:, 1]], 1), rtol=1e-6, atol=1e-6)
    state = agent.state_dict()
    state["actor.2.bias"][:] = 100.0  # saturate the actor: actions hit the bounds exactly, never beyond
    agent.load_state_dict(state)
    np.testing.assert_allclose(agent.act(obs), np.tile(ACT.high, (64, 1)))
    noisy = agent.act(obs, explore=True)
    assert np.all(noisy >= ACT.low) and np.all(noisy <= ACT.high)


def test_default_noise_is_ten_percent_of_half_range(DDPG):
    agent = DDPG(OBS, ACT, hidden_sizes=(16,), seed=1)
    obs = np.zeros((4000, 3), np.float32)
    diff = agent.act(obs, explore=True) - agent.act(obs)
    std = diff.std(axis=0)
    np.testing.assert_allclose(std, [0.1 * 0.5, 0.1 * 2.0], rtol=0.1)


def test_batched_ou_noise_restarts_rows_whose_episodes_ended(DDPG):
    ou = OrnsteinUhlenbeckProcess(theta=0.15, sigma=0.3, size=(3, 2), seed=0)
    agent = DDPG(OBS, ACT, noise=ou, hidden_sizes=(8,), seed=2)
    rng = np.random.default_rng(2)
    agent.act(np.zeros((3, 3), np.float32), explore=True)
    assert np.all(ou.x_prev != 0)
    agent.observe(batch(3, rng, terminated=np.array([False, True, False]), stream=np.arange(3)))
    assert np.all(ou.x_prev[1] == 0) and np.all(ou.x_prev[[0, 2]] != 0)
    with pytest.raises(ValueError, match="holds 3 rows"):
        agent.act(np.zeros((2, 3), np.float32), explore=True)


def test_td_target_and_polyak_targets(DDPG):
    rng = np.random.default_rng(3)
    agent = DDPG(OBS, ACT, hidden_sizes=(16,), gamma=0.9, tau=0.1, learning_starts=1, update_steps=1, seed=3)
    b = batch(32, rng)
    w = agent.state_dict()
    nx = np.asarray(b.next_obs)
    mu = np.tanh(mlp_forward(w, "actor_target", nx, "relu"))
    q_next = mlp_forward(w, "critic_target", np.concatenate([nx, mu], 1), "relu")[:, 0]
    np.testing.assert_allclose(agent.td_target(b), b.rew + 0.9 * (~b.terminated) * q_next, rtol=1e-5, atol=1e-5)
    clipped = DDPG(OBS, ACT, hidden_sizes=(16,), target_clip=(-0.01, 0.01), seed=3)
    assert np.abs(clipped.td_target(b)).max() <= 0.01 + 1e-7
    agent.observe(b)
    m = agent.update(16)
    assert m["gradient_steps"] == 1 and {"critic_loss", "actor_loss", "q_mean", "td_abs", "noise_sigma"} <= set(m)
    after = agent.state_dict()
    for key in w:
        if key.startswith("actor_target."):
            source = after[key.replace("actor_target", "actor")]
            np.testing.assert_allclose(after[key], 0.9 * w[key] + 0.1 * source, rtol=1e-5, atol=1e-7)


def test_update_schedule_like_dqn(DDPG):
    rng = np.random.default_rng(4)
    agent = DDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=20, replay_ratio=0.5, seed=4)
    agent.observe(batch(10, rng))
    assert agent.update(8) == {"gradient_steps": 0}
    agent.observe(batch(30, rng))
    assert agent.update(8)["gradient_steps"] == 15
    assert agent.update(8)["gradient_steps"] == 1
    assert agent.updates == 16


def test_prioritized_ddpg_feeds_back_td(DDPG):
    rng = np.random.default_rng(5)
    agent = DDPG(OBS, ACT, PR=True, hidden_sizes=(8,), learning_starts=1, update_steps=2, seed=5)
    assert isinstance(agent.replay, PrioritizedReplayBuffer) and agent.prioritized
    agent.observe(batch(40, rng))
    agent.update(16)
    assert agent.replay.effective_sample_size() < 40


def _run(agent, seed):
    rng = np.random.default_rng(seed)
    for _ in range(3):
        agent.observe(batch(20, rng))
        agent.update(8)
    return agent


def test_seeded_runs_identical_and_state_round_trip(DDPG):
    kw = dict(hidden_sizes=(16,), learning_starts=10, seed=6)
    a, b = _run(DDPG(OBS, ACT, **kw), 0), _run(DDPG(OBS, ACT, **kw), 0)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(isinstance(v, np.ndarray) for v in sa.values()) and all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert {"actor.0.weight", "critic.2.bias", "actor_target.2.weight", "critic_target.0.weight",
            "actor_optimizer.lr", "critic_optimizer.lr", "noise.n_steps", "noise.rng"} <= set(sa)
    assert sa["actor.0.weight"].shape == (16, 3) and sa["critic.0.weight"].shape == (16, 5)
    c = DDPG(OBS, ACT, hidden_sizes=(16,), learning_starts=10, seed=99)
    c.load_state_dict({k: v.copy() for k, v in sa.items()})
    obs = np.random.default_rng(1).uniform(-1, 1, (32, 3)).astype(np.float32)
    np.testing.assert_array_equal(a.act(obs, explore=True), c.act(obs, explore=True))
    c.replay.load_state_dict(a.replay.state_dict())
    a.update(8), c.update(8)
    np.testing.assert_array_equal(a.act(obs), c.act(obs))
    np.testing.assert_array_equal(a.q_values(obs, a.act(obs)), c.q_values(obs, c.act(obs)))


def test_learns_a_contextual_bandit(DDPG):
    """One-step task: reward -(a - target(obs))^2; the greedy action must track the target."""
    obs_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    act_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    agent = DDPG(obs_space, act_space, hidden_sizes=(32, 32), learning_starts=64, update_steps=1,
                 actor_lr=3e-3, critic_lr=3e-3, noise=GaussianWhiteNoiseProcess(sigma=0.3, size=(1,), seed=7),
                 seed=7)
    rng = np.random.default_rng(7)
    for _ in range(400):
        obs = rng.uniform(-1, 1, (8, 1)).astype(np.float32)
        a = agent.act(obs, explore=True)
        rew = -((a[:, 0] - 0.8 * obs[:, 0]) ** 2)
        agent.observe(Transitions(obs=obs, act=a, rew=rew, next_obs=obs, terminated=np.ones(8, bool),
                                  truncated=np.zeros(8, bool)))
        agent.update(64)
    test = np.linspace(-1, 1, 21, dtype=np.float32)[:, None]
    err = np.abs(agent.act(test)[:, 0] - 0.8 * test[:, 0])
    assert err.mean() < 0.1, err


def test_her_on_point_reach_takes_goal_dicts(DDPG):
    env = PointReachEnv(max_steps=10)
    agent = DDPG(env.observation_space, env.action_space, her=dict(strategy="future", k=4),
                 compute_reward=env.compute_reward, hidden_sizes=(16,), learning_starts=10, seed=8)
    assert isinstance(agent.replay, HERReplayBuffer) and agent.encoder.dim == 4
    assert agent.observation_space is env.observation_space
    for ep in range(3):
        obs, _ = env.reset(seed=ep)
        done = False
        while not done:
            one = {k: v[None] for k, v in obs.items()}
            a = agent.act(one, explore=True)
            nxt, r, term, trunc, _ = env.step(a[0])
            agent.observe(Transitions(obs=one, act=a, rew=np.array([r], np.float32),
                                      next_obs={k: v[None] for k, v in nxt.items()},
                                      terminated=np.array([term]), truncated=np.array([trunc])))
            obs, done = nxt, term or trunc
    assert len(agent.replay) == agent.agent_steps
    sample = agent.replay.sample_relabeled(64)
    assert sample.relabeled.any()
    m = agent.update(32)
    assert m["gradient_steps"] >= 1 and np.isfinite(m["critic_loss"])


def test_trainer_runs_ddpg_her_on_goal_env():
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer(lambda: PointReachEnv(max_steps=10), num_train_envs=2, num_test_envs=2,
                                   episodes_per_train=6, test_freq=6, episodes_per_test=2, update_freq=10, seed=0)
    env = PointReachEnv()
    agent = backend("torch").DDPG(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                                  her=dict(strategy="future", k=4), compute_reward=env.compute_reward,
                                  hidden_sizes=(8,), learning_starts=10, seed=0)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    assert stats["num_collected_episodes"] >= 6 and stats["num_gradient_steps"] > 0
    assert len(agent.replay) == agent.agent_steps


def test_augment_stores_mirrored_transitions(DDPG):
    def mirror(t):  # a symmetry of a made-up task: negate observations and the second action number
        act = np.array(t.act, copy=True)
        act[:, 1] = -act[:, 1]
        return Transitions(obs=-t.obs, act=act, rew=t.rew, next_obs=-t.next_obs, terminated=t.terminated,
                           truncated=t.truncated)

    real = batch(6, np.random.default_rng(3))
    agent = DDPG(OBS, ACT, seed=0, augment=mirror)
    agent.observe(real)
    assert len(agent.replay) == 12 and agent.agent_steps == 6
    stored = agent.replay.get(np.arange(12))
    np.testing.assert_allclose(stored.obs[6:], -real.obs)
    np.testing.assert_allclose(stored.act[6:, 1], -np.asarray(real.act)[:, 1], rtol=1e-6)


def test_torch_compile_option_falls_back_to_the_eager_step(monkeypatch):
    torch = pytest.importorskip("torch")
    DDPG = backend("torch").DDPG
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (_ for _ in ()).throw(RuntimeError("nope")))
    b = batch(16, np.random.default_rng(9))
    with pytest.warns(RuntimeWarning, match="DDPG critic loss"):
        agents = [DDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=1, update_steps=2, seed=0, compile=c)
                  for c in (False, True)]
        for agent in agents:
            agent.observe(b)
            agent.update(8)
    a, c = (agent.state_dict() for agent in agents)
    assert all(np.array_equal(a[k], c[k]) for k in a)


# --------------------------------------------------------------------------- TF backend at parity

class FixedReplay:
    """Replay stand-in whose ``sample`` returns the next of a list of explicit batches."""

    def __init__(self, batches):
        self.batches, self.calls = list(batches), []

    def __len__(self):
        return 10**6

    def add(self, transitions):
        pass

    def sample(self, batch_size):
        return self.batches.pop(0)

    def update_priorities(self, indices, td_errors):
        self.calls.append(np.asarray(td_errors).copy())


def test_tf_ddpg_matches_torch_step_for_step():
    torch_agents, tf_agents = backend("torch"), backend("tf")
    rng = np.random.default_rng(10)
    batches = [batch(32, rng) for _ in range(3)]
    batches[1].weights, batches[1].indices = rng.uniform(0.2, 1, 32).astype(np.float32), np.arange(32)
    kw = dict(hidden_sizes=(16, 16), learning_starts=0, update_steps=1, gamma=0.9, tau=0.2, action_l2=0.5,
              target_clip=(-5.0, 5.0), max_grad_norm=1.0, seed=11)
    pt = torch_agents.DDPG(OBS, ACT, replay=FixedReplay(batches), **kw)
    tfa = tf_agents.DDPG(OBS, ACT, replay=FixedReplay(batches), **kw)
    st, sf = pt.state_dict(), tfa.state_dict()
    assert st.keys() == sf.keys()  # and the same seed draws the same weights and generators in both backends
    assert all(np.array_equal(st[k], sf[k]) for k in st), [k for k in st if not np.array_equal(st[k], sf[k])]
    obs = rng.uniform(-1, 1, (20, 3)).astype(np.float32)
    np.testing.assert_allclose(tfa.act(obs), pt.act(obs), atol=1e-5)
    np.testing.assert_allclose(tfa.act(obs, explore=True), pt.act(obs, explore=True), atol=1e-5)  # same noise rng
    np.testing.assert_allclose(tfa.td_target(batches[0]), pt.td_target(batches[0]), atol=1e-5)
    for _ in range(3):
        mt, mf = pt.update(32), tfa.update(32)
        assert mt["critic_loss"] == pytest.approx(mf["critic_loss"], rel=1e-4, abs=1e-6)
        assert mt["actor_loss"] == pytest.approx(mf["actor_loss"], rel=1e-4, abs=1e-6)
    st, sf = pt.state_dict(), tfa.state_dict()
    for k in st:
        if k not in ("rng", "noise.rng"):
            np.testing.assert_allclose(np.asarray(sf[k], np.float64), np.asarray(st[k], np.float64),
                                       rtol=1e-4, atol=1e-5, err_msg=k)
    assert len(pt.replay.calls) == len(tfa.replay.calls) == 1  # the weighted batch fed back |TD|
    np.testing.assert_allclose(np.abs(tfa.replay.calls[0]), np.abs(pt.replay.calls[0]), rtol=1e-4, atol=1e-5)
    back = torch_agents.DDPG(OBS, ACT, **{**kw, "seed": 99})
    back.load_state_dict(tfa.state_dict())  # and back into torch
    np.testing.assert_allclose(back.act(obs), tfa.act(obs), atol=1e-5)


def test_a_checkpoint_moves_between_backends(tmp_path):
    torch_agents, tf_agents = backend("torch"), backend("tf")
    agent = _run(tf_agents.DDPG(OBS, ACT, hidden_sizes=(8,), learning_starts=10, seed=12), 1)
    path = agent.save(tmp_path / "ddpg.zip")
    restored = torch_agents.DDPG.restore(path)
    assert type(restored) is torch_agents.DDPG and restored.updates == agent.updates
    obs = np.random.default_rng(2).uniform(-1, 1, (8, 3)).astype(np.float32)
    np.testing.assert_allclose(restored.act(obs), agent.act(obs), atol=1e-5)
    np.testing.assert_allclose(restored.act(obs, explore=True), agent.act(obs, explore=True), atol=1e-5)
