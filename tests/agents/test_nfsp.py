"""NFSP: per-episode mixing by eta, the average policy's probabilities, one-update parity between the
numpy, torch and TF backends, checkpoints with both buffers across backends, the collector telling it
episode starts, and learning Kuhn poker (exploitability measured by OpenSpiel's best response)."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.base import EpisodeAware
from marl_note.agents.nfsp import NFSPConfig
from marl_note.agents.numpy import NFSP
from marl_note.types import Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
TINY = dict(hidden_sizes=(16,), learning_starts=8, sl_learning_starts=8, update_steps=1)


def backend(name):
    if name == "numpy":
        return NFSP
    return pytest.importorskip(f"marl_note.agents.{name}").NFSP


def transitions(n, rng):
    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                       rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.3, truncated=np.zeros(n, bool),
                       next_mask=rng.random((n, 3)) < 0.7)


def assert_same_state(a, b, atol=1e-5):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys(), set(sa) ^ set(sb)
    for k in sa:
        x, y = np.asarray(sa[k]), np.asarray(sb[k])
        if x.dtype.kind == "f":
            np.testing.assert_allclose(x, y, rtol=0, atol=atol, err_msg=k)
        else:
            np.testing.assert_array_equal(x, y, err_msg=k)


# --------------------------------------------------------------------------- acting

def test_each_episode_plays_one_policy_the_best_response_with_chance_eta():
    """Best-response acts are the ones stored in the reservoir: within an episode all three acts of an env
    are stored or none is, and about eta of the episodes are best-response episodes, per env."""
    agent = NFSP(OBS, ACT, eta=0.3, seed=0, reservoir_size=100_000, **{k: v for k, v in TINY.items()
                                                                         if k != "update_steps"})
    assert isinstance(agent, EpisodeAware)
    obs = np.zeros((2, 4), np.float32)
    stored = {0: [], 1: []}
    for _ in range(1500):
        agent.begin_episode(np.array([0, 1]))
        before = agent.reservoir.added
        per_env = np.zeros(2, int)
        for _ in range(3):
            n0 = agent.reservoir.added
            agent.act(obs, explore=True, env_ids=np.array([0, 1]))
            # rows are in env order, so which env's row went to the reservoir shows in the count
            per_env += np.array([agent.modes[0], agent.modes[1]], int)
            assert agent.reservoir.added - n0 == agent.modes[0] + agent.modes[1]
        assert agent.reservoir.added - before == per_env.sum()
        for env in (0, 1):
            assert per_env[env] in (0, 3)
            stored[env].append(per_env[env] == 3)
    for env in (0, 1):
        assert abs(np.mean(stored[env]) - 0.3) < 0.05, np.mean(stored[env])
    assert abs(np.mean(np.equal(stored[0], stored[1])) - (0.3**2 + 0.7**2)) < 0.05  # independent per env


def test_eta_zero_and_one_play_only_the_average_or_only_the_best_response():
    obs = np.zeros((4, 4), np.float32)
    never, always = NFSP(OBS, ACT, eta=0.0, seed=0, **TINY), NFSP(OBS, ACT, eta=1.0, seed=0, **TINY)
    for _ in range(5):
        for agent in (never, always):
            agent.begin_episode(np.arange(4))
            agent.act(obs, explore=True, env_ids=np.arange(4))
    assert never.reservoir.added == 0 and always.reservoir.added == 20


@pytest.mark.parametrize("name", ["numpy", "torch", "tf"])
def test_policy_probs_are_the_average_policy_over_legal_actions(name):
    agent = backend(name)(OBS, ACT, seed=1, **TINY)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    mask = rng.random((64, 3)) < 0.6
    mask[np.arange(64), rng.integers(0, 3, 64)] = True  # at least one legal action per row
    probs = agent.policy_probs(obs, mask)
    assert probs.shape == (64, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-9)
    assert (probs[~mask] == 0).all() and (probs[mask] > 0).all()
    logits = agent.average_logits(obs)
    z = np.exp(logits - logits.max(axis=1, keepdims=True)) * mask
    np.testing.assert_allclose(probs, z / z.sum(axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(agent.policy_probs(obs).sum(axis=1), 1.0, atol=1e-9)


def test_evaluation_samples_the_average_policy_or_takes_its_argmax():
    agent = NFSP(OBS, ACT, seed=2, **TINY)
    obs = np.tile(np.array([[0.5, -0.2, 0.1, 0.9]], np.float32), (20_000, 1))
    probs = agent.policy_probs(obs[:1])[0]
    freq = np.bincount(agent.act(obs) , minlength=3) / len(obs)
    np.testing.assert_allclose(freq, probs, atol=0.02)
    greedy = NFSP(OBS, ACT, seed=2, deterministic_eval=True, **TINY)
    assert set(greedy.act(obs[:50]).tolist()) == {int(probs.argmax())}


def test_bad_options_are_refused_before_anything_is_built():
    with pytest.raises(ValueError, match="eta must be in"):
        NFSP(OBS, ACT, eta=-0.1)
    with pytest.raises(ValueError, match="sl_lr must be a positive"):
        NFSPConfig(sl_lr=0)
    with pytest.raises(ValueError, match="NFSP takes MLP torsos only"):
        NFSPConfig(torso="conv")
    with pytest.raises(TypeError, match="Discrete action space"):
        NFSP(OBS, gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="NFSP takes MLP torsos only"):
        NFSP(gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), ACT)


# --------------------------------------------------------------------------- learning, parity, checkpoints

def _trained_pair(names, seed=3):
    agents = [backend(n)(OBS, ACT, seed=seed, **TINY) for n in names]
    rng = np.random.default_rng(seed)
    rows = (rng.normal(size=(40, 4)).astype(np.float32), rng.integers(0, 3, 40), rng.random((40, 3)) < 0.7)
    rows[2][np.arange(40), rows[1]] = True
    batch = transitions(32, rng)
    for agent in agents:
        agent.reservoir.add(*rows)
        agent.observe(batch)
    return agents, batch


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_the_best_response_learns_the_mean_of_poker_sized_returns(name):
    """Poker returns are +-1 and +-2 chips. A best response must rank actions by their expected return:
    here action 0 wins +2 or -2 (mean 0.4) and action 1 a sure +1, so action 1 is the best. The Huber
    TD loss (DQN's default) fits a median-like value to action 0 (about 1.33 here) and prefers it;
    NFSP's default loss is the squared one, as in the paper and OpenSpiel."""
    agent = backend(name)(gym.spaces.Box(0.0, 1.0, (2,), np.float32), gym.spaces.Discrete(2),
                          hidden_sizes=(16,), lr=0.01, learning_starts=8, seed=0)
    n = 200
    act = np.repeat([0, 1], n // 2)
    rew = np.where(act == 1, 1.0, np.where(np.arange(n) % 5 < 3, 2.0, -2.0)).astype(np.float32)  # 60% +2, 40% -2
    obs = np.tile(np.array([1.0, 0.0], np.float32), (n, 1))
    agent.observe(Transitions(obs=obs, act=act, rew=rew, next_obs=obs, terminated=np.ones(n, bool),
                              truncated=np.zeros(n, bool)))
    for _ in range(400):
        agent.learn(agent.replay.sample(64))
    q = agent.q_values(obs[:1])[0]
    assert q[0] == pytest.approx(0.4, abs=0.25) and q[1] == pytest.approx(1.0, abs=0.25)
    assert int(np.argmax(q)) == 1


@pytest.mark.parametrize("other", ["torch", "tf"])
def test_one_update_gives_the_same_weights_in_numpy_and_the_framework(other):
    """From identical weights and data, one update (a DQN step and a supervised step of the average
    network) writes the same weights, optimiser slots and counters in both backends."""
    (ours, theirs), _ = _trained_pair(["numpy", other])
    assert_same_state(ours, theirs, atol=0)
    m1, m2 = ours.update(16), theirs.update(16)
    assert m1["gradient_steps"] == m2["gradient_steps"] == 1
    assert m1["sl_loss"] == pytest.approx(m2["sl_loss"], rel=1e-5)
    assert ours.sl_updates == theirs.sl_updates == 1
    assert_same_state(ours, theirs)
    before = NFSP(OBS, ACT, seed=3, **TINY).state_dict()
    assert not np.allclose(before["avg_net.0.weight"], ours.state_dict()["avg_net.0.weight"])


def test_checkpoints_keep_both_buffers_across_numpy_torch_and_tf(tmp_path):
    """save(include_replay=True) in each backend restores in the next with the same weights, the replay
    and the reservoir; the restored agent then updates exactly as the original."""
    tnfsp = backend("torch")
    fnfsp = backend("tf")
    (agent,), _ = _trained_pair(["numpy"])
    agent.update(16)
    path = agent.save(str(tmp_path / "numpy"), include_replay=True)
    in_torch = tnfsp.restore(path)
    in_tf = fnfsp.restore(in_torch.save(str(tmp_path / "torch"), include_replay=True))
    back = NFSP.restore(in_tf.save(str(tmp_path / "tf"), include_replay=True))
    for restored in (in_torch, in_tf, back):
        assert_same_state(restored, agent, atol=0)
        assert len(restored.replay) == len(agent.replay) == 32
        assert restored.reservoir.added == agent.reservoir.added == 40
        theirs = restored.replay.state_dict()
        for k, v in agent.replay.state_dict().items():
            np.testing.assert_array_equal(theirs[k], v, err_msg=k)
    rng = np.random.default_rng(9)
    more = transitions(8, rng)
    for a in (agent, back):
        a.observe(more)
        a.update(16)
    assert_same_state(back, agent)


def test_a_replay_state_that_does_not_fit_is_refused_and_nothing_changes():
    (agent,), _ = _trained_pair(["numpy"])
    state = agent.replay.state_dict()
    before = agent.reservoir.state_dict()
    bad = dict(state)
    bad["sl.obs"] = np.zeros((40, 7), np.float32)
    with pytest.raises(ValueError, match="reservoir state 'obs' must have shape"):
        agent.replay.load_state_dict(bad)
    with pytest.raises(ValueError, match="must start with 'rl.' or 'sl.'"):
        agent.replay.load_state_dict({**state, "obs": np.zeros(1)})
    np.testing.assert_array_equal(agent.reservoir.state_dict()["obs"], before["obs"])


# --------------------------------------------------------------------------- through the trainer, on Kuhn poker

def _kuhn():
    pytest.importorskip("shimmy")
    pytest.importorskip("pyspiel")
    from marl_note.envs.openspiel import openspiel_env

    return lambda: openspiel_env("kuhn_poker")


def test_the_collector_tells_episode_aware_agents_each_episode_start():
    from marl_note.envs import SyncVectorEnv, adapt, make_spec
    from marl_note.trainers.collector import Collector

    make = _kuhn()
    spec = make_spec(adapt(make()))
    agents = [NFSP(spec.observation_space(a), spec.action_space(a), seed=k, **TINY)
              for k, a in enumerate(spec.possible_agents)]
    began = []
    for k, agent in enumerate(agents):
        original = agent.begin_episode
        agent.begin_episode = lambda ids, k=k, original=original: (began.append((k, int(ids[0]))), original(ids))
    col = Collector(SyncVectorEnv([make] * 3), spec, agents, explore=[True, True], learn=[True, True])
    col.reset(seed=0)
    stats = col.collect(n_episodes=30)
    # every env told at reset, then once per finished episode, each seat's agent once
    for k in (0, 1):
        assert sum(1 for who, _ in began if who == k) == 3 + stats.episodes
    assert sorted({env for _, env in began}) == [0, 1, 2]


def test_self_play_on_kuhn_poker_gets_less_exploitable_than_uniform_random():
    """A few seconds of NFSP self-play (one agent per seat, numpy): the average policy's exploitability,
    computed exactly by OpenSpiel's best response, falls well below uniform random's 0.458."""
    from marl_note.trainers import DecentralizedTrainer
    from marl_note.trainers.exploitability import exploitability

    make = _kuhn()
    trainer = DecentralizedTrainer(make, num_train_envs=8, num_test_envs=1, batch_size=32, update_freq=64,
                                   test_freq=10**9, episodes_per_train=2000, episodes_per_test=1, seed=0)
    agents = [NFSP(trainer.observation_space(a), trainer.action_space(a), hidden_sizes=(64,), replay_ratio=1.0,
                   lr=0.01, sl_lr=0.01, eta=0.3, learning_starts=64, sl_learning_starts=64, seed=k)
              for k, a in enumerate(trainer.spec.possible_agents)]
    start = exploitability(agents, "kuhn_poker").exploitability
    trainer.train(agents, learning_mask=[1, 1], plot=False, progress=False, baseline=None)
    end = exploitability(agents, "kuhn_poker").exploitability
    assert end < 0.3 < start, (start, end)


def test_cli_trains_nfsp_on_kuhn_poker_for_a_tiny_budget_and_reports_exploitability(tmp_path, capsys):
    import re

    _kuhn()
    from marl_note.cli import main

    out = str(tmp_path / "run")
    status = main(["train", "--env", "openspiel/kuhn_poker", "--algo", "nfsp", "--backend", "numpy",
                   "--env-steps", "300", "--num-envs", "2", "--test-episodes", "2", "--eval-episodes", "0", "--quiet",
                   "--out", out, "--agent-arg", "hidden_sizes=[8]", "--agent-arg", "learning_starts=16",
                   "--agent-arg", "sl_learning_starts=16"])
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    value = float(re.search(r"exploitability of the last policies: ([0-9.]+)", captured.out).group(1))
    assert 0.0 <= value < 3.0
    import os

    from marl_note.agents.checkpoints import restore
    saved = sorted(os.listdir(os.path.join(out, "last")))
    assert len(saved) == 2  # one NFSP agent per seat
    agent = restore(os.path.join(out, "last", saved[0]))
    assert type(agent).__name__ == "NFSP" and agent.updates > 0 and agent.sl_updates > 0
