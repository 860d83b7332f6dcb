"""Replay options on the off-policy agents: prioritized replay, n-step returns and HER (torch backend)."""

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from marl_note.agents.torch import DDPG, DQN, PPO  # noqa: E402
from marl_note.envs.goal_envs import BitFlippingEnv, PointReachEnv  # noqa: E402
from marl_note.replay import HERReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer  # noqa: E402
from marl_note.replay.feed import ReplayFeed  # noqa: E402
from marl_note.types import Transitions  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def batch(n, rng, **over):
    t = dict(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
             rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
             terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool))
    t.update(over)
    return Transitions(**t)


def params(agent):
    """The online network's weights, from the numpy state."""
    return {k: v for k, v in agent.state_dict().items() if k.startswith("q_net.")}


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def net_q(agent, name, obs):
    """Q-values ``[B, n]`` of ``agent``'s network ``name`` ("q_net" or "target_net"), through a twin."""
    twin = type(agent)(agent.observation_space, agent.action_space, hidden_sizes=agent.config["hidden_sizes"])
    state = agent.state_dict()
    twin.load_state_dict({**twin.state_dict(), **{"q_net" + k[len(name):]: v for k, v in state.items()
                                                   if k.startswith(name + ".")}})
    return twin.q_values(obs)


# --------------------------------------------------------------------------- prioritized replay

def test_prioritized_dqn_feeds_back_td_errors_and_uses_weights():
    rng = np.random.default_rng(0)
    agent = DQN(OBS, ACT, PR=True, alpha=0.6, beta=0.4, initial_TD=1.0, learning_starts=1, update_steps=1,
                hidden_sizes=(16,), seed=0)
    assert isinstance(agent.replay, PrioritizedReplayBuffer)
    assert (agent.replay.alpha, agent.replay.beta_initial) == (0.6, 0.4)
    agent.observe(batch(64, rng))
    assert agent.replay.effective_sample_size() == pytest.approx(64.0)  # all at initial_TD
    sample = agent.replay.sample
    # weights are used: zero importance weights give a zero loss and leave the network alone
    agent.replay.sample = lambda n: _with_weights(sample(n), 0.0)
    before = params(agent)
    m = agent.update(32)
    assert m["loss"] == 0.0 and same(params(agent), before)
    seen = {}

    def spy(n):
        seen["batch"] = b = sample(n)
        return b

    agent.replay.sample = spy
    ess0 = agent.replay.effective_sample_size()
    assert ess0 < 64.0  # the zero-weight step already fed back |TD| of its sample
    tree0 = agent.replay._tree.leaves[:64].copy()
    agent.update(32)
    b = seen["batch"]
    assert b.weights is not None and b.indices.shape == (32,) and b.weights.max() == pytest.approx(1.0)
    assert agent.replay.effective_sample_size() != ess0
    tree1 = agent.replay._tree.leaves[:64]
    untouched = np.setdiff1d(np.arange(64), b.indices)
    np.testing.assert_array_equal(tree1[untouched], tree0[untouched])  # only the sampled items changed
    assert not np.allclose(tree1[b.indices], tree0[b.indices])
    assert not same(params(agent), before)  # real weights: it learns


def _with_weights(b, w):
    b.weights = np.full(len(b), w, np.float32)
    return b


def test_prioritized_weighted_loss_matches_manual():
    rng = np.random.default_rng(1)
    agent = DQN(OBS, ACT, PR=True, learning_starts=1, update_steps=1, hidden_sizes=(8,), criterion="mse",
                max_grad_norm=None, seed=1)
    agent.observe(batch(16, rng))
    agent.replay.set_priorities(np.arange(16), np.linspace(0.1, 3.0, 16))
    b = agent.replay.sample(8)
    assert b.weights.max() == pytest.approx(1.0) and b.weights.min() < 1.0
    q = agent.q_values(b.obs)[np.arange(8), b.act]
    target = agent.td_target(b)
    expected = float(np.mean(b.weights * (q - target) ** 2))
    agent.replay.sample = lambda n: b
    assert agent.update(8)["loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=-0.1), "alpha must be a finite number >= 0"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(beta=1.5), r"beta must lie in \[0, 1\]"),
    (dict(beta=-0.1), "beta"),
    (dict(initial_TD=0.0), "initial_td must be a positive"),
    (dict(alpha="big"), "alpha must be a number"),
    (dict(num_steps=0), "num_steps must be a positive integer"),
])
def test_invalid_replay_options_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DQN(OBS, ACT, PR=True, **kwargs)
    with pytest.raises(ValueError, match=match):
        DDPG(OBS, gym.spaces.Box(-1, 1, (2,)), PR=True, **kwargs)


def test_conflicting_replay_options():
    replay = ReplayBuffer(10, OBS, ACT)
    with pytest.raises(ValueError, match="either replay"):
        DQN(OBS, ACT, PR=True, replay=replay)
    env = BitFlippingEnv(4)
    with pytest.raises(ValueError, match="HER needs a goal env"):
        DQN(OBS, ACT, her=True, compute_reward=env.compute_reward)
    with pytest.raises(ValueError, match="HER needs a reward function"):
        DQN(env.observation_space, env.action_space, her=True)
    with pytest.raises(ValueError, match="cannot be combined with HER"):
        DQN(env.observation_space, env.action_space, her=True, PR=True, compute_reward=env.compute_reward)
    with pytest.raises(ValueError, match="num_steps > 1"):
        DQN(env.observation_space, env.action_space, her=True, num_steps=3, compute_reward=env.compute_reward)
    with pytest.raises(ValueError, match="unknown her options"):
        DQN(env.observation_space, env.action_space, her=dict(strategy="future", K=4),
            compute_reward=env.compute_reward)
    DQN(gym.spaces.Dict({"a": OBS}), ACT)  # a plain Dict observation is flattened by the agent
    with pytest.raises(ValueError, match="HER needs a goal env"):
        DQN(gym.spaces.Dict({"a": OBS}), ACT, her=True, compute_reward=env.compute_reward)


# --------------------------------------------------------------------------- n-step returns

def test_nstep_dqn_target_equals_brute_force():
    gamma, n = 0.9, 3
    agent = DQN(OBS, ACT, num_steps=n, gamma=gamma, learning_starts=1, hidden_sizes=(16,), seed=2)
    rng = np.random.default_rng(2)
    # two interleaved streams: stream 0 runs 5 steps and terminates, stream 1 runs 4 and is truncated
    lengths, ends = {0: 5, 1: 4}, {0: "terminated", 1: "truncated"}
    obs = {s: rng.normal(size=(lengths[s] + 1, 4)).astype(np.float32) for s in lengths}
    rew = {s: rng.normal(size=lengths[s]).astype(np.float32) for s in lengths}
    act = {s: rng.integers(0, 3, lengths[s]) for s in lengths}
    for t in range(5):
        rows = [s for s in (0, 1) if t < lengths[s]]
        last = {s: t == lengths[s] - 1 for s in rows}
        agent.observe(Transitions(
            obs=np.stack([obs[s][t] for s in rows]), act=np.array([act[s][t] for s in rows]),
            rew=np.array([rew[s][t] for s in rows], np.float32), next_obs=np.stack([obs[s][t + 1] for s in rows]),
            terminated=np.array([last[s] and ends[s] == "terminated" for s in rows]),
            truncated=np.array([last[s] and ends[s] == "truncated" for s in rows]), stream=np.array(rows)))
    assert len(agent.replay) == 9 and len(agent._feed.nstep) == 0  # every window released at the episode ends
    stored = agent.replay.get(np.arange(9))

    expected = {}
    for s in lengths:
        for t in range(lengths[s]):
            k = min(n, lengths[s] - t)
            g = sum(gamma ** i * float(rew[s][t + i]) for i in range(k))
            end = t + k
            terminal = end == lengths[s] and ends[s] == "terminated"
            best = int(np.argmax(net_q(agent, "q_net", obs[s][end][None])[0]))  # double DQN: online net chooses
            boot = 0.0 if terminal else gamma ** k * float(net_q(agent, "target_net", obs[s][end][None])[0, best])
            expected[(s, t)] = (g + boot, gamma ** k, obs[s][t])
    got = agent.td_target(stored)
    for i in range(9):
        match = [key for key, (_, _, o) in expected.items() if np.array_equal(o, stored.obs[i])]
        assert len(match) == 1
        target, discount, _ = expected[match[0]]
        assert stored.discount[i] == pytest.approx(discount)
        assert got[i] == pytest.approx(target, rel=1e-5, abs=1e-5)
    assert agent.update(4)["gradient_steps"] >= 1


def test_nstep_with_prioritized_replay():
    agent = DQN(OBS, ACT, num_steps=2, PR=True, learning_starts=1, update_steps=2, hidden_sizes=(8,), seed=3)
    rng = np.random.default_rng(3)
    for _ in range(4):
        agent.observe(batch(4, rng, terminated=np.zeros(4, bool), stream=np.arange(4)))
    assert isinstance(agent.replay, PrioritizedReplayBuffer) and len(agent.replay) == 12
    assert np.allclose(agent.replay.column("discount"), agent.gamma ** 2)
    agent.update(8)
    assert agent.replay.effective_sample_size() < 12


# --------------------------------------------------------------------------- HER with DQN

def _bit_episode(env, agent, seed):
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        one = {k: v[None] for k, v in obs.items()}
        a = agent.act(one, explore=True)
        nxt, r, term, trunc, _ = env.step(int(a[0]))
        agent.observe(Transitions(obs=one, act=a, rew=np.array([r], np.float32),
                                  next_obs={k: v[None] for k, v in nxt.items()}, terminated=np.array([term]),
                                  truncated=np.array([trunc]), stream=np.zeros(1, int)))
        obs, done = nxt, term or trunc


def test_dqn_her_on_bit_flipping_takes_goal_dicts():
    env = BitFlippingEnv(5)
    agent = DQN(env.observation_space, env.action_space, her=dict(strategy="future", k=4),
                compute_reward=env.compute_reward, learning_starts=5, hidden_sizes=(16,), seed=4)
    assert isinstance(agent.replay, HERReplayBuffer) and agent.observation_space is env.observation_space
    assert agent.encoder.dim == 10
    for ep in range(3):
        _bit_episode(env, agent, ep)
    assert len(agent.replay) == agent.agent_steps and agent.replay.num_pending == 0
    m = agent.update(16)
    assert m["gradient_steps"] >= 1 and np.isfinite(m["loss"])
    with pytest.raises(ValueError, match="dict of batched arrays"):
        agent.act(np.zeros((1, 10)))


def test_dqn_her_learns_small_bit_flipping():
    n = 5
    env = BitFlippingEnv(n)
    from marl_note.agents.exploration.policies import EpsGreedyQPolicy
    agent = DQN(env.observation_space, env.action_space, her=dict(strategy="future", k=4),
                compute_reward=env.compute_reward, learning_starts=100, hidden_sizes=(64,), gamma=0.9, tau=0.05,
                update_steps=8, policy=EpsGreedyQPolicy(0.2), seed=5)
    for ep in range(150):
        _bit_episode(env, agent, ep)
        agent.update(64)
    wins = 0
    for ep in range(40):
        obs, _ = env.reset(seed=1000 + ep)
        for _ in range(n):
            obs, r, term, trunc, _ = env.step(int(agent.act({k: v[None] for k, v in obs.items()})[0]))
            if term or trunc:
                break
        wins += term
    assert wins >= 30  # greedy success rate >= 0.75 after 150 episodes (random play: ~0.03)


def test_goal_env_without_her_stores_flat_observations():
    env = BitFlippingEnv(3)
    feed = ReplayFeed(env.observation_space, env.action_space, buffer_size=10, gamma=0.9)
    assert type(feed.replay) is ReplayBuffer and feed.replay.observation_space.shape == (6,)
    obs, _ = env.reset(seed=0)
    one = {k: v[None] for k, v in obs.items()}
    feed.add(Transitions(obs=one, act=np.array([0]), rew=np.array([-1.0]), next_obs=one,
                         terminated=np.array([False]), truncated=np.array([False])))
    np.testing.assert_array_equal(feed.replay.column("obs")[0], np.concatenate([obs["observation"],
                                                                               obs["desired_goal"]]))


def test_user_her_buffer_is_used_as_is():
    env = PointReachEnv()
    buf = HERReplayBuffer.from_env(env, capacity=100, strategy="final", k=2, seed=0)
    agent = DDPG(env.observation_space, env.action_space, replay=buf, hidden_sizes=(8,), seed=0)
    assert agent.replay is buf and agent._feed.her


# --------------------------------------------------------------------------- PPO prioritized minibatches

def _ppo_rollout(agent, rng, n=32):
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    a = agent.act(obs, explore=True)
    agent.observe(Transitions(obs=obs, act=a, rew=rng.normal(size=n).astype(np.float32),
                              next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                              terminated=rng.random(n) < 0.1, truncated=np.zeros(n, bool), stream=np.zeros(n, int)))


def test_ppo_prioritized_minibatches():
    rng = np.random.default_rng(6)
    agent = PPO(OBS, ACT, PR=True, alpha=0.6, beta=0.4, lambda_=0.5, initial_ratio=1.0, n_steps=32, n_epochs=2,
                hidden_sizes=(8,), seed=6)
    _ppo_rollout(agent, rng)
    m = agent.update(8)
    assert m["gradient_steps"] == 8 and np.isfinite(m["policy_loss"])
    assert 1.0 <= m["per_ess"] < 32.0
    with pytest.raises(ValueError, match="lambda_"):
        PPO(OBS, ACT, PR=True, lambda_=2.0)
    with pytest.raises(ValueError, match="beta"):
        PPO(OBS, ACT, PR=True, beta=2.0)
    plain = PPO(OBS, ACT, n_steps=32, n_epochs=2, hidden_sizes=(8,), seed=6)
    _ppo_rollout(plain, np.random.default_rng(6))
    assert "per_ess" not in plain.update(8)


def test_tf_dqn_takes_the_same_replay_options():
    tf_agents = pytest.importorskip("marl_note.agents.tf")
    rng = np.random.default_rng(8)
    agent = tf_agents.DQN(OBS, ACT, PR=True, num_steps=2, learning_starts=1, update_steps=2, hidden_sizes=(8,),
                          seed=8)
    assert isinstance(agent.replay, PrioritizedReplayBuffer)
    for _ in range(3):
        agent.observe(batch(4, rng, terminated=np.zeros(4, bool), stream=np.arange(4)))
    assert len(agent.replay) == 8 and np.allclose(agent.replay.column("discount"), agent.gamma ** 2)
    agent.update(8)
    assert agent.replay.effective_sample_size() < 8
    with pytest.raises(ValueError, match="alpha"):
        tf_agents.DQN(OBS, ACT, PR=True, alpha=-1)
    env = BitFlippingEnv(4)
    her = tf_agents.DQN(env.observation_space, env.action_space, her=dict(strategy="future", k=4),
                        compute_reward=env.compute_reward, learning_starts=2, hidden_sizes=(8,), seed=8)
    _bit_episode(env, her, 0)
    assert isinstance(her.replay, HERReplayBuffer) and her.update(4)["gradient_steps"] >= 1


def negate(t):
    """A test symmetry: negated observations, actions reversed (a -> 2 - a)."""
    return Transitions(obs=-t.obs, act=2 - np.asarray(t.act), rew=t.rew, next_obs=-t.next_obs,
                       terminated=t.terminated, truncated=t.truncated, discount=t.discount, stream=t.stream)


def test_augment_stores_each_batch_and_its_images_counting_only_real_steps():
    rng = np.random.default_rng(0)
    agent = DQN(OBS, ACT, seed=0, learning_starts=10**6, augment=lambda t: [negate(t), t])
    real = batch(8, rng)
    agent.observe(real)
    assert len(agent.replay) == 24 and agent.agent_steps == 8  # the real batch plus two images
    stored = agent.replay.get(np.arange(24))
    rows = {(tuple(np.round(o, 5)), int(a)) for o, a in zip(stored.obs, stored.act)}
    assert rows == ({(tuple(np.round(o, 5)), int(a)) for o, a in zip(real.obs, real.act)}
                    | {(tuple(np.round(-o, 5)), 2 - int(a)) for o, a in zip(real.obs, real.act)})


def test_augment_sees_nstep_transitions():
    seen = []
    agent = DQN(OBS, ACT, seed=0, num_steps=3, gamma=0.5, augment=lambda t: seen.append(t) or negate(t))
    rng = np.random.default_rng(1)
    for _ in range(4):  # one stream, no episode end: n-step rows come out from the third step on
        agent.observe(batch(1, rng, terminated=np.zeros(1, bool), stream=np.zeros(1, np.int64)))
    assert [len(t) for t in seen] == [1, 1] and seen[0].discount.tolist() == [0.125]
    assert len(agent.replay) == 4


@pytest.mark.parametrize("augment, error, match", [
    (lambda t: t.obs, TypeError, "augment must return Transitions"),
    (lambda t: Transitions(obs=t.obs[:, :2], act=t.act, rew=t.rew, next_obs=t.next_obs[:, :2],
                           terminated=t.terminated, truncated=t.truncated), ValueError, r"obs rows of shape \(2,\)"),
])
def test_augment_that_returns_bad_batches_fails_clearly(augment, error, match):
    agent = DQN(OBS, ACT, seed=0, augment=augment)
    with pytest.raises(error, match=match):
        agent.observe(batch(4, np.random.default_rng(0)))


def test_augment_option_errors():
    with pytest.raises(TypeError, match="augment must be a function"):
        DQN(OBS, ACT, augment="mirror")
    env = BitFlippingEnv(n_bits=3)
    with pytest.raises(ValueError, match="augment cannot be combined with HER"):
        DQN(env.observation_space, env.action_space, her=dict(strategy="future", k=4),
            compute_reward=env.compute_reward, augment=negate)
