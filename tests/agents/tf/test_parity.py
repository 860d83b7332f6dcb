"""Cross-backend parity: the same numpy weights and the same batch give the same step in TF and torch.

Weights always go through ``load_state_dict`` from one backend into the other (no reliance on
either backend's initialisation), then both agents act and learn on identical inputs.
"""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

import gymnasium as gym  # noqa: E402

from marl_note.agents import tf as tf_agents  # noqa: E402
from marl_note.agents import torch as torch_agents  # noqa: E402
from marl_note.agents.exploration.policies import EpsGreedyQPolicy  # noqa: E402
from marl_note.types import Transitions  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(5, start=1)
TOL = 1e-4
MAX_DIFFS: dict[str, float] = {}


def random_masks(n, k, rng):
    m = rng.random((n, k)) < 0.5
    m[np.arange(n), rng.integers(0, k, n)] = True
    return m


def dqn_batch(n, rng, weights=False):
    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(1, 6, n),
                       rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.3, truncated=rng.random(n) < 0.2,
                       mask=random_masks(n, 5, rng), next_mask=random_masks(n, 5, rng),
                       weights=rng.uniform(0.2, 1.0, n).astype(np.float32) if weights else None,
                       indices=np.arange(n))


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


def assert_states_close(a, b, name, tol=TOL, skip=("rng", "torch_rng")):
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    worst = 0.0
    for k in a:
        assert np.asarray(a[k]).shape == np.asarray(b[k]).shape, k
        assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, (k, a[k].dtype, b[k].dtype)
        if k in skip:
            continue
        diff = float(np.max(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)), initial=0.0))
        assert diff <= tol * (1 + float(np.max(np.abs(a[k]), initial=0.0))), (k, diff)
        worst = max(worst, diff)
    MAX_DIFFS[name] = max(MAX_DIFFS.get(name, 0.0), worst)
    return worst


@pytest.mark.parametrize("double,criterion,tau,weights,dueling", [(True, "huber", None, False, False),
                                                           (False, "mse", 0.1, True, False),
                                                           (True, "huber", None, True, True)])
def test_dqn_update_parity(double, criterion, tau, weights, dueling):
    rng = np.random.default_rng(0)
    batches = [dqn_batch(32, rng, weights) for _ in range(3)]
    cfg = dict(hidden_sizes=(16, 16), double=double, criterion=criterion, tau=tau, target_update=2,
               update_steps=3, learning_starts=0, gamma=0.9, seed=1, dueling=dueling)
    pt = torch_agents.DQN(OBS, ACT, replay=FixedReplay(batches), **cfg)
    tfa = tf_agents.DQN(OBS, ACT, replay=FixedReplay(batches), **cfg)
    noise = np.random.default_rng(0)  # a target net that differs from the online net
    pt.load_state_dict({k: v + 0.1 * noise.normal(size=v.shape).astype(np.float32) if k.startswith("target_net.")
                        else v for k, v in pt.state_dict().items()})
    tfa.load_state_dict(pt.state_dict())
    assert_states_close(pt.state_dict(), tfa.state_dict(), "dqn load", tol=0)

    b = batches[0]
    np.testing.assert_allclose(tfa.q_values(b.obs), pt.q_values(b.obs), atol=TOL)
    np.testing.assert_array_equal(tfa.act(b.obs, b.mask), pt.act(b.obs, b.mask))
    np.testing.assert_array_equal(tfa.act(b.obs), pt.act(b.obs))
    np.testing.assert_allclose(tfa.td_target(b), pt.td_target(b), atol=TOL)

    m_pt, m_tf = pt.update(32), tfa.update(32)
    assert m_pt["gradient_steps"] == m_tf["gradient_steps"] == 3
    for k in ("loss", "q_mean", "td_abs"):
        assert abs(m_pt[k] - m_tf[k]) <= TOL * (1 + abs(m_pt[k])), (k, m_pt[k], m_tf[k])
    MAX_DIFFS["dqn loss"] = max(MAX_DIFFS.get("dqn loss", 0.0), abs(m_pt["loss"] - m_tf["loss"]))
    sp, st = pt.state_dict(), tfa.state_dict()
    assert "optimizer.0.exp_avg" in st and st["optimizer.0.step"] == 3
    assert_states_close(sp, st, "dqn 3 steps")
    if weights:
        np.testing.assert_allclose(tfa.replay.calls[-1], pt.replay.calls[-1], atol=TOL)
    # greedy actions agree after learning too, masks included
    np.testing.assert_array_equal(tfa.act(b.obs, b.mask), pt.act(b.obs, b.mask))


def test_dqn_full_update_parity_with_real_replay_and_exploration():
    """Same seed: same replay sampling and exploration rng draws, so whole runs stay in step."""
    cfg = dict(hidden_sizes=(16,), learning_starts=20, seed=3, policy=EpsGreedyQPolicy(0.5, 0.1, 200))
    pt = torch_agents.DQN(OBS, ACT, **cfg)
    cfg["policy"] = EpsGreedyQPolicy(0.5, 0.1, 200)
    tfa = tf_agents.DQN(OBS, ACT, **cfg)
    assert_states_close(pt.state_dict(), tfa.state_dict(), "dqn init", tol=0)  # the same numpy init
    rng = np.random.default_rng(3)
    for _ in range(3):
        b = dqn_batch(24, rng)
        b.weights = b.indices = None
        np.testing.assert_array_equal(tfa.act(b.obs, b.mask, explore=True), pt.act(b.obs, b.mask, explore=True))
        pt.observe(b), tfa.observe(b)
        pt.update(8), tfa.update(8)
    assert_states_close(pt.state_dict(), tfa.state_dict(), "dqn full")


def test_state_dicts_load_across_backends_both_ways():
    tfa = tf_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=4, learning_starts=1, update_steps=2)
    rng = np.random.default_rng(4)
    tfa.observe(dqn_batch(16, rng)), tfa.update(4)
    pt = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=5)
    pt.load_state_dict(tfa.state_dict())  # TF -> torch, optimiser moments included
    assert_states_close(tfa.state_dict(), pt.state_dict(), "dqn tf->torch", tol=0, skip=())
    fresh = tf_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=6)
    torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=7).load_state_dict(fresh.state_dict())
    for space in (ACT, gym.spaces.Box(-1, 1, (2,), np.float32)):
        for shared in (False, True):
            a = torch_agents.PPO(OBS, space, hidden_sizes=(8,), shared=shared, seed=8)
            b = tf_agents.PPO(OBS, space, hidden_sizes=(8,), shared=shared, seed=8)
            sa, sb = a.state_dict(), b.state_dict()
            assert list(sa) == list(sb)
            assert all(sa[k].shape == sb[k].shape and sa[k].dtype == sb[k].dtype for k in sa)
            a.load_state_dict(sb)
            b.load_state_dict(sa)


def ppo_rollout(agent, n, rng, space):
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    mask = random_masks(n, 5, rng) if space is ACT else None
    act = agent.act(obs, mask, explore=True)
    return Transitions(obs=obs, act=act, rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.normal(size=(n, 4)).astype(np.float32), terminated=rng.random(n) < 0.1,
                       truncated=rng.random(n) < 0.05, mask=mask,
                       next_mask=random_masks(n, 5, rng) if mask is not None else None, stream=np.arange(n) % 4)


@pytest.mark.parametrize("space,shared,epochs,batch,pr", [
    (ACT, False, 1, 64, False), (ACT, True, 2, 32, False),
    (gym.spaces.Box(-1, 1, (2, 1), np.float32), False, 2, 32, False), (ACT, False, 2, 32, True)],
    ids=["masked-1x1", "masked-shared-2x2", "box-2x2", "prioritized-2x2"])
def test_ppo_update_parity(space, shared, epochs, batch, pr):
    cfg = dict(hidden_sizes=(16, 16), shared=shared, n_steps=64, n_epochs=epochs, ent_coef=0.01, lr=1e-2,
               log_std_init=-0.5, seed=2, PR=pr)
    pt = torch_agents.PPO(OBS, space, **cfg)
    tfa = tf_agents.PPO(OBS, space, **cfg)
    state = pt.state_dict()  # a sharper policy than the 0.01-gain init, so logits really matter
    head = "net.pi.0.weight" if shared else "net.pi.4.weight"
    state[head] = state[head] * 100.0
    pt.load_state_dict(state)
    tfa.load_state_dict(pt.state_dict())
    rng = np.random.default_rng(2)
    data = ppo_rollout(pt, 64, rng, space)
    obs, mask = data.obs, data.mask
    np.testing.assert_allclose(tfa.act(obs, mask), pt.act(obs, mask), atol=TOL)  # equal for ints
    np.testing.assert_allclose(tfa.log_prob(obs, data.act, mask), pt.log_prob(obs, data.act, mask), atol=TOL)
    # same exploration rng state, same policy: the same sampled actions
    tfa.rng.bit_generator.state = pt.rng.bit_generator.state  # ppo_rollout drew from pt.rng only
    np.testing.assert_allclose(tfa.act(obs, mask, explore=True), pt.act(obs, mask, explore=True), atol=TOL)
    pt.observe(data), tfa.observe(data)
    m_pt, m_tf = pt.update(batch), tfa.update(batch)
    assert m_pt["gradient_steps"] == m_tf["gradient_steps"] == epochs * 64 // batch
    assert m_pt.keys() == m_tf.keys()
    for k in m_pt:
        assert abs(m_pt[k] - m_tf[k]) <= TOL * (1 + abs(m_pt[k])), (k, m_pt[k], m_tf[k])
    MAX_DIFFS["ppo loss"] = max(MAX_DIFFS.get("ppo loss", 0.0), abs(m_pt["policy_loss"] - m_tf["policy_loss"]),
                                abs(m_pt["value_loss"] - m_tf["value_loss"]))
    assert_states_close(pt.state_dict(), tfa.state_dict(), "ppo update")
    np.testing.assert_allclose(tfa.act(obs, mask), pt.act(obs, mask), atol=TOL)  # equal for ints


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("space", [ACT, gym.spaces.Box(-1, 1, (2, 1), np.float32)], ids=["discrete", "box"])
def test_ppo_same_seed_same_initial_weights_in_both_backends(space, shared):
    """Weights are drawn in numpy from the agent's seed, so both backends start from the same ones."""
    cfg = dict(hidden_sizes=(8, 8), shared=shared, log_std_init=-0.3, seed=5)
    sa, sb = torch_agents.PPO(OBS, space, **cfg).state_dict(), tf_agents.PPO(OBS, space, **cfg).state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


@pytest.mark.parametrize("name", ["DQN", "PPO"])
def test_same_constructor_arguments_and_defaults(name):
    import inspect

    ours = dict(inspect.signature(getattr(tf_agents, name).__init__).parameters)
    theirs = inspect.signature(getattr(torch_agents, name).__init__).parameters
    assert ours.pop("strategy").default is None  # TF only: a tf.distribute strategy, never recorded
    assert list(ours) == list(theirs)
    assert {k: p.default for k, p in ours.items()} == {k: p.default for k, p in theirs.items()}


def test_report_max_diffs(capsys):
    with capsys.disabled():
        print("\nmax abs diffs torch vs tf:", {k: f"{v:.2e}" for k, v in sorted(MAX_DIFFS.items())})
