import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import gymnasium as gym  # noqa: E402

from marl_note.agents.policies import BoltzmannQPolicy, EpsGreedyQPolicy  # noqa: E402
from marl_note.agents.tf import DQN  # noqa: E402
from marl_note.replay import ReplayBuffer  # noqa: E402
from marl_note.types import Transitions  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(5)
SMALL = dict(hidden_sizes=(16,))


def batch(n, rng, obs_dim=4, n_act=5, masks=False, **over):
    t = dict(obs=rng.normal(size=(n, obs_dim)).astype(np.float32), act=rng.integers(0, n_act, n),
             rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
             terminated=rng.random(n) < 0.3, truncated=rng.random(n) < 0.2)
    if masks:
        t["mask"] = random_masks(n, n_act, rng)
        t["next_mask"] = random_masks(n, n_act, rng)
    t.update(over)
    return Transitions(**t)


def random_masks(n, k, rng):
    m = rng.random((n, k)) < 0.5
    m[np.arange(n), rng.integers(0, k, n)] = True
    return m


def weights(model):
    return [w.copy() for w in model.get_weights()]


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_rejects_non_discrete_actions_and_bad_options():
    with pytest.raises(TypeError, match="Discrete"):
        DQN(OBS, gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="criterion"):
        DQN(OBS, ACT, criterion="l1")
    with pytest.raises(ValueError, match="tau"):
        DQN(OBS, ACT, tau=0.0)
    with pytest.raises(TypeError, match="select"):
        DQN(OBS, ACT, policy=object())
    with pytest.raises(ValueError, match="activation"):
        DQN(OBS, ACT, activation="swishy")


def test_obs_shape_errors_name_the_problem():
    agent = DQN(OBS, ACT, seed=0, **SMALL)
    with pytest.raises(ValueError, match=r"obs has shape \(2, 3\).*\(batch, \*\(4,\)\)"):
        agent.act(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="leading batch axis"):
        agent.act(np.zeros(4))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 4\)"):
        agent.act(np.zeros((2, 4)), mask=np.ones((2, 4), bool))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="transitions.next_obs"):
        agent.observe(batch(3, rng, next_obs=np.zeros((3, 5))))
    with pytest.raises(TypeError, match="Transitions"):
        agent.observe({"obs": np.zeros((1, 4))})
    assert agent.agent_steps == 0


def test_greedy_act_respects_masks_and_is_masked_argmax():
    agent = DQN(OBS, ACT, seed=1, **SMALL)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(512, 4)).astype(np.float32)
    q = agent.q_values(obs)
    mask = random_masks(512, 5, rng)
    mask[np.arange(512), q.argmax(1)] = False
    mask[np.arange(512), (q.argmax(1) + 1) % 5] = True
    a = agent.act(obs, mask)
    assert a.shape == (512,) and mask[np.arange(512), a].all()
    np.testing.assert_array_equal(a, np.where(mask, q, -np.inf).argmax(1))
    np.testing.assert_array_equal(agent.act(obs), q.argmax(1))


@pytest.mark.parametrize("policy", [None, BoltzmannQPolicy(tau=0.1)])
def test_exploring_act_respects_masks(policy):
    agent = DQN(OBS, ACT, seed=2, policy=policy, **SMALL)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(1000, 4)).astype(np.float32)
    mask = random_masks(1000, 5, rng)
    a = agent.act(obs, mask, explore=True)
    assert mask[np.arange(1000), a].all()
    assert len(np.unique(a)) == 5


def test_int8_board_observations_and_action_start():
    board = gym.spaces.Box(0, 1, (3, 3, 2), np.int8)
    agent = DQN(board, gym.spaces.Discrete(9, start=1), seed=0, learning_starts=4, **SMALL)
    obs = np.random.default_rng(0).integers(0, 2, (6, 3, 3, 2)).astype(np.int8)
    a = agent.act(obs)
    assert a.min() >= 1 and a.max() <= 9
    agent.observe(Transitions(obs=obs, act=a, rew=np.zeros(6, np.float32), next_obs=obs,
                              terminated=np.ones(6, bool), truncated=np.zeros(6, bool)))
    assert agent.update(4)["gradient_steps"] == 2
    one_hot = DQN(gym.spaces.Discrete(7), ACT, seed=0, **SMALL)
    assert one_hot.act(np.array([0, 3, 6])).shape == (3,)


@pytest.mark.parametrize("double", [True, False])
def test_td_target_matches_hand_computation(double):
    agent = DQN(OBS, ACT, seed=3, double=double, gamma=0.9, **SMALL)
    noise = np.random.default_rng(0)
    agent.target_net.set_weights([w + noise.normal(size=w.shape).astype(np.float32)
                                  for w in agent.target_net.get_weights()])
    rng = np.random.default_rng(3)
    t = batch(64, rng, masks=True)
    q_on = agent.q_net(t.next_obs).numpy().astype(np.float64)
    q_tg = agent.target_net(t.next_obs).numpy().astype(np.float64)
    chooser = q_on if double else q_tg
    mask = t.next_mask.copy()
    mask[np.arange(64), chooser.argmax(1)] = False
    mask[np.arange(64), (chooser.argmax(1) + 2) % 5] = True
    t.next_mask = mask
    expected = np.empty(64)
    for i in range(64):
        best = max((a for a in range(5) if mask[i, a]), key=lambda a: chooser[i, a])
        expected[i] = t.rew[i] + (0.0 if t.terminated[i] else 0.9 * q_tg[i, best])
    np.testing.assert_allclose(agent.td_target(t).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert t.truncated[~t.terminated].any() and t.terminated.any()  # truncated rows bootstrapped above
    t.discount = np.full(64, 0.5, np.float32)
    boot = expected - t.rew
    np.testing.assert_allclose(agent.td_target(t).numpy(), t.rew + boot * (0.5 / 0.9), rtol=1e-5, atol=1e-5)
    t.next_mask[0] = False  # no legal next action: no bootstrap
    assert np.isclose(agent.td_target(t).numpy()[0], t.rew[0])


def test_hard_and_soft_target_updates():
    agent = DQN(OBS, ACT, seed=4, learning_starts=1, target_update=3, update_steps=1, **SMALL)
    agent.observe(batch(32, np.random.default_rng(4)))
    initial = weights(agent.target_net)
    for _ in range(2):
        agent.update(8)
        assert same(weights(agent.target_net), initial)
        assert not same(weights(agent.q_net), initial)
    agent.update(8)
    assert agent.updates == 3 and same(weights(agent.target_net), weights(agent.q_net))

    soft = DQN(OBS, ACT, seed=5, learning_starts=1, tau=0.1, update_steps=1, **SMALL)
    soft.observe(batch(32, np.random.default_rng(5)))
    before = weights(soft.target_net)
    soft.update(8)
    for t, b, o in zip(weights(soft.target_net), before, weights(soft.q_net)):
        np.testing.assert_allclose(t, 0.9 * b + 0.1 * o, rtol=1e-6, atol=1e-7)


def test_update_schedule():
    agent = DQN(OBS, ACT, seed=6, learning_starts=50, **SMALL)
    rng = np.random.default_rng(6)
    agent.observe(batch(40, rng))
    assert agent.update(16) == {"gradient_steps": 0}
    agent.observe(batch(40, rng))
    m = agent.update(16)
    assert m["gradient_steps"] == 10 and agent.updates == 10
    assert all(isinstance(v, (int, float)) for v in m.values()) and np.isfinite(m["loss"])
    assert agent.update(16)["gradient_steps"] == 1
    fixed = DQN(OBS, ACT, seed=6, learning_starts=1, update_steps=3, **SMALL)
    fixed.observe(batch(10, rng))
    assert fixed.update(4)["gradient_steps"] == 3
    assert fixed.agent_steps == 10 and fixed.policy.steps == 10


class WeightedReplay(ReplayBuffer):
    def __init__(self, *args, weight=1.0, **kw):
        super().__init__(*args, **kw)
        self.weight, self.calls = weight, []

    def sample(self, batch_size):
        b = super().sample(batch_size)
        b.weights = np.full(batch_size, self.weight, np.float32)
        return b

    def update_priorities(self, indices, td_errors):
        self.calls.append((np.asarray(indices).copy(), np.asarray(td_errors).copy()))


def test_prioritized_replay_hooks():
    rng = np.random.default_rng(7)
    replay = WeightedReplay(100, OBS, ACT, seed=0, weight=0.0)
    agent = DQN(OBS, ACT, seed=7, learning_starts=1, update_steps=2, replay=replay, **SMALL)
    agent.observe(batch(20, rng))
    before = weights(agent.q_net)
    m = agent.update(8)
    assert m["loss"] == 0.0 and same(weights(agent.q_net), before)
    assert len(replay.calls) == 2
    idx, td = replay.calls[0]
    assert idx.shape == td.shape == (8,) and (td >= 0).all() and td.max() > 0
    replay.weight = 1.0
    agent.update(8)
    assert not same(weights(agent.q_net), before)


def _run(agent, seed):
    rng = np.random.default_rng(seed)
    for _ in range(3):
        agent.observe(batch(30, rng, masks=True))
        agent.update(16)
    return agent


def test_seeding_reproducible_and_state_dict_round_trip():
    a = _run(DQN(OBS, ACT, seed=8, learning_starts=10, policy=EpsGreedyQPolicy(0.5, 0.1, 100), **SMALL), 0)
    b = _run(DQN(OBS, ACT, seed=8, learning_starts=10, policy=EpsGreedyQPolicy(0.5, 0.1, 100), **SMALL), 0)
    c = DQN(OBS, ACT, seed=9, **SMALL)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(isinstance(v, np.ndarray) for v in sa.values())
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert not np.array_equal(DQN(OBS, ACT, seed=8, **SMALL).state_dict()["q_net.0.weight"],
                              c.state_dict()["q_net.0.weight"])
    assert {"agent_steps", "updates", "rng", "policy.steps", "target_net.0.weight", "optimizer.lr",
            "optimizer.0.exp_avg"} <= set(sa)
    clone = DQN(OBS, ACT, seed=99, learning_starts=10, policy=EpsGreedyQPolicy(0.5, 0.1, 100), **SMALL)
    clone.load_state_dict({k: v.copy() for k, v in sa.items()})
    assert (clone.agent_steps, clone.updates, clone.policy.eps) == (a.agent_steps, a.updates, a.policy.eps)
    assert all(np.array_equal(v, clone.state_dict()[k]) for k, v in sa.items())
    obs = np.random.default_rng(2).normal(size=(64, 4)).astype(np.float32)
    mask = random_masks(64, 5, np.random.default_rng(3))
    for _ in range(3):
        np.testing.assert_array_equal(a.act(obs, mask, explore=True), clone.act(obs, mask, explore=True))
    clone.replay.load_state_dict(a.replay.state_dict())
    a.update(16), clone.update(16)  # optimiser moments came along: identical next step
    np.testing.assert_array_equal(a.q_values(obs), clone.q_values(obs))
    with pytest.raises(ValueError, match="shape"):
        DQN(OBS, ACT, hidden_sizes=(8,)).load_state_dict(sa)
    with pytest.raises(KeyError, match="missing"):
        DQN(OBS, ACT, **SMALL).load_state_dict({k: v for k, v in sa.items() if k != "q_net.2.bias"})


def test_xla_compile_option_gives_the_same_step():
    plain = DQN(OBS, ACT, seed=10, learning_starts=1, update_steps=1, **SMALL)
    xla = DQN(OBS, ACT, seed=10, learning_starts=1, update_steps=1, compile=True, **SMALL)
    for agent in (plain, xla):
        agent.observe(batch(32, np.random.default_rng(10), masks=True))
        agent.update(8)
    for x, y in zip(weights(plain.q_net), weights(xla.q_net)):
        np.testing.assert_allclose(x, y, atol=1e-5)
