"""DQN in every backend: acting with masks, the TD target, the update schedule, target syncs, replay
hooks, seeding, state round trips and the dueling head. Weights are read and written through
``state_dict`` only, so every test runs unchanged on PyTorch, TensorFlow and numpy."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.dqn import DQNConfig
from marl_note.agents.exploration.policies import BoltzmannQPolicy, EpsGreedyQPolicy
from marl_note.replay import ReplayBuffer
from marl_note.types import NonFiniteError, Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(5)
SMALL = dict(hidden_sizes=(16,))


@pytest.fixture(params=["torch", "tf", "numpy"])
def DQN(request):
    pytest.importorskip({"torch": "torch", "tf": "tensorflow", "numpy": "numpy"}[request.param])
    return importlib.import_module(f"marl_note.agents.{request.param}").DQN


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


def net(agent, name):
    """The arrays of network ``name`` ("q_net" / "target_net") under keys without the name."""
    return {k[len(name) + 1:]: v for k, v in agent.state_dict().items() if k.startswith(name + ".")}


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def net_q(agent, name, obs, **kw):
    """Q-values of ``agent``'s network ``name``, through a twin whose online network holds its arrays."""
    twin = type(agent)(agent.observation_space, agent.action_space, **kw)
    twin.load_state_dict({**twin.state_dict(), **{f"q_net.{k}": v for k, v in net(agent, name).items()}})
    return twin.q_values(obs).astype(np.float64)


def perturb_target(agent, seed=0, scale=1.0):
    noise = np.random.default_rng(seed)
    state = agent.state_dict()
    agent.load_state_dict({k: v + scale * noise.normal(size=v.shape).astype(np.float32) if k.startswith("target_net.")
                           else v for k, v in state.items()})


def test_rejects_non_discrete_actions_and_bad_options(DQN):
    with pytest.raises(TypeError, match="Discrete"):
        DQN(OBS, gym.spaces.Box(-1, 1, (2,)))
    for bad, match in [(dict(criterion="l1"), "criterion"), (dict(tau=0.0), "tau"), (dict(activation="swishy"),
                       "activation"), (dict(gamma=1.5), "gamma"), (dict(target_update=0), "target_update"),
                       (dict(dueling=True, hidden_sizes=()), "dueling=True needs at least one hidden layer")]:
        with pytest.raises(ValueError, match=match):
            DQN(OBS, ACT, **bad)
    with pytest.raises(TypeError, match="select"):
        DQN(OBS, ACT, policy=object())
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        DQN(OBS, ACT, **SMALL).update(0)


def test_obs_shape_errors_name_the_problem(DQN):
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


def test_greedy_act_respects_masks_and_is_masked_argmax(DQN):
    agent = DQN(OBS, ACT, seed=1, **SMALL)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(512, 4)).astype(np.float32)
    q = agent.q_values(obs)
    mask = random_masks(512, 5, rng)
    mask[np.arange(512), q.argmax(1)] = False  # forbid every row's unmasked best action
    mask[np.arange(512), (q.argmax(1) + 1) % 5] = True
    a = agent.act(obs, mask)
    assert a.shape == (512,) and mask[np.arange(512), a].all()
    np.testing.assert_array_equal(a, np.where(mask, q, -np.inf).argmax(1))
    np.testing.assert_array_equal(agent.act(obs), q.argmax(1))


@pytest.mark.parametrize("policy", [None, BoltzmannQPolicy(tau=0.1)])
def test_exploring_act_respects_masks(DQN, policy):
    agent = DQN(OBS, ACT, seed=2, policy=policy, **SMALL)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(1000, 4)).astype(np.float32)
    mask = random_masks(1000, 5, rng)
    a = agent.act(obs, mask, explore=True)
    assert mask[np.arange(1000), a].all()
    assert len(np.unique(a)) == 5  # eps starts at 1: really exploring


def test_int8_board_observations_and_action_start(DQN):
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


@pytest.mark.parametrize("double,dueling", [(True, False), (False, False), (True, True)])
def test_td_target_matches_hand_computation(DQN, double, dueling):
    kw = dict(hidden_sizes=(16,), dueling=dueling)
    agent = DQN(OBS, ACT, seed=3, double=double, gamma=0.9, **kw)
    perturb_target(agent)  # a target net that differs from the online net
    rng = np.random.default_rng(3)
    t = batch(64, rng, masks=True)
    q_on, q_tg = net_q(agent, "q_net", t.next_obs, **kw), net_q(agent, "target_net", t.next_obs, **kw)
    assert not np.allclose(q_on, q_tg)
    chooser = q_on if double else q_tg
    mask = t.next_mask.copy()
    mask[np.arange(64), chooser.argmax(1)] = False  # the unmasked argmax is illegal in every row ...
    mask[np.arange(64), (chooser.argmax(1) + 2) % 5] = True  # ... and some other action is legal
    t.next_mask = mask
    expected = np.empty(64)
    for i in range(64):
        best = max((a for a in range(5) if mask[i, a]), key=lambda a: chooser[i, a])
        expected[i] = t.rew[i] + (0.0 if t.terminated[i] else 0.9 * q_tg[i, best])
    got = agent.td_target(t)
    assert isinstance(got, np.ndarray) and got.shape == (64,)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert t.truncated[~t.terminated].any() and t.terminated.any()  # truncated rows bootstrapped above
    t.discount = np.full(64, 0.5, np.float32)  # per-item discount (n-step) replaces gamma
    np.testing.assert_allclose(agent.td_target(t), t.rew + (expected - t.rew) * (0.5 / 0.9), rtol=1e-5, atol=1e-5)
    t.next_mask[0] = False  # no legal next action: no bootstrap
    assert np.isclose(agent.td_target(t)[0], t.rew[0])


def test_hard_and_soft_target_updates(DQN):
    agent = DQN(OBS, ACT, seed=4, learning_starts=1, target_update=3, update_steps=1, **SMALL)
    agent.observe(batch(32, np.random.default_rng(4)))
    initial = net(agent, "target_net")
    for _ in range(2):
        agent.update(8)
        assert same(net(agent, "target_net"), initial)
        assert not same(net(agent, "q_net"), initial)
    agent.update(8)
    assert agent.updates == 3 and same(net(agent, "target_net"), net(agent, "q_net"))

    soft = DQN(OBS, ACT, seed=5, learning_starts=1, tau=0.1, update_steps=1, **SMALL)
    soft.observe(batch(32, np.random.default_rng(5)))
    before = net(soft, "target_net")
    soft.update(8)
    online = net(soft, "q_net")
    for k, t in net(soft, "target_net").items():
        np.testing.assert_allclose(t, 0.9 * before[k] + 0.1 * online[k], rtol=1e-6, atol=1e-7)
        assert not np.array_equal(before[k], online[k])


def test_update_schedule(DQN):
    agent = DQN(OBS, ACT, seed=6, learning_starts=50, **SMALL)
    rng = np.random.default_rng(6)
    agent.observe(batch(40, rng))
    assert agent.update(16) == {"gradient_steps": 0}
    agent.observe(batch(40, rng))  # 80 stored, 40 new since the last call
    m = agent.update(16)
    assert m["gradient_steps"] == 10 and agent.updates == 10
    assert all(isinstance(v, (int, float)) for v in m.values()) and np.isfinite(m["loss"])
    assert {"loss", "q_mean", "td_abs", "eps"} <= set(m)
    assert agent.update(16)["gradient_steps"] == 1  # nothing new: at least one step
    fixed = DQN(OBS, ACT, seed=6, learning_starts=1, update_steps=3, **SMALL)
    fixed.observe(batch(10, rng))
    assert fixed.update(4)["gradient_steps"] == 3
    assert fixed.agent_steps == 10 and fixed.policy.steps == 10


class WeightedReplay(ReplayBuffer):
    """A stand-in for prioritized replay: constant importance weights, records priority updates."""

    def __init__(self, *args, weight=1.0, **kw):
        super().__init__(*args, **kw)
        self.weight, self.calls = weight, []

    def sample(self, batch_size):
        b = super().sample(batch_size)
        b.weights = np.full(batch_size, self.weight, np.float32)
        return b

    def update_priorities(self, indices, td_errors):
        self.calls.append((np.asarray(indices).copy(), np.asarray(td_errors).copy()))


def test_prioritized_replay_hooks(DQN):
    rng = np.random.default_rng(7)
    replay = WeightedReplay(100, OBS, ACT, seed=0, weight=0.0)
    agent = DQN(OBS, ACT, seed=7, learning_starts=1, update_steps=2, replay=replay, **SMALL)
    agent.observe(batch(20, rng))
    before = net(agent, "q_net")
    m = agent.update(8)
    assert m["loss"] == 0.0  # zero weights: zero loss and Adam leaves the weights alone
    assert same(net(agent, "q_net"), before)
    assert len(replay.calls) == 2
    idx, td = replay.calls[0]
    assert idx.shape == td.shape == (8,) and (td >= 0).all() and td.max() > 0
    replay.weight = 1.0
    agent.update(8)
    assert not same(net(agent, "q_net"), before)


def _run(agent, seed):
    rng = np.random.default_rng(seed)
    for _ in range(3):
        agent.observe(batch(30, rng, masks=True))
        agent.update(16)
    return agent


def test_seeding_reproducible(DQN):
    a = _run(DQN(OBS, ACT, seed=8, learning_starts=10, **SMALL), 0)
    b = _run(DQN(OBS, ACT, seed=8, learning_starts=10, **SMALL), 0)
    c = DQN(OBS, ACT, seed=9, **SMALL)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert not np.array_equal(DQN(OBS, ACT, seed=8, **SMALL).state_dict()["q_net.0.weight"],
                              c.state_dict()["q_net.0.weight"])
    obs = np.random.default_rng(1).normal(size=(50, 4)).astype(np.float32)
    np.testing.assert_array_equal(a.act(obs, explore=True), b.act(obs, explore=True))


def test_state_dict_round_trip_reproduces_actions(DQN):
    policy = lambda: EpsGreedyQPolicy(0.5, 0.1, 100)  # noqa: E731
    a = _run(DQN(OBS, ACT, seed=10, learning_starts=10, policy=policy(), **SMALL), 1)
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    assert {"agent_steps", "updates", "rng", "policy.steps", "target_net.0.weight", "optimizer.lr",
            "optimizer.0.exp_avg", "new_transitions"} <= set(state)
    assert "torch_rng" not in state
    b = DQN(OBS, ACT, seed=99, learning_starts=10, policy=policy(), **SMALL)
    b.load_state_dict({**{k: v.copy() for k, v in state.items()}, "torch_rng": np.zeros(5, np.uint8)})
    assert (b.agent_steps, b.updates, b.policy.eps) == (a.agent_steps, a.updates, a.policy.eps)
    loaded = b.state_dict()
    assert all(np.array_equal(v, loaded[k]) for k, v in state.items())
    obs = np.random.default_rng(2).normal(size=(64, 4)).astype(np.float32)
    mask = random_masks(64, 5, np.random.default_rng(3))
    for _ in range(3):
        np.testing.assert_array_equal(a.act(obs, mask, explore=True), b.act(obs, mask, explore=True))
    np.testing.assert_array_equal(a.act(obs, mask), b.act(obs, mask))
    np.testing.assert_array_equal(a.q_values(obs), b.q_values(obs))
    b.replay.load_state_dict(a.replay.state_dict())
    a.update(16), b.update(16)  # optimiser moments came along: identical next step
    np.testing.assert_array_equal(a.q_values(obs), b.q_values(obs))
    with pytest.raises(ValueError, match="shape"):
        DQN(OBS, ACT, hidden_sizes=(8,)).load_state_dict(state)
    with pytest.raises(KeyError, match="missing"):
        DQN(OBS, ACT, **SMALL).load_state_dict({k: v for k, v in state.items() if k != "q_net.2.bias"})


def test_same_seed_same_initial_weights_in_both_backends():
    pytest.importorskip("torch"), pytest.importorskip("tensorflow")
    from marl_note.agents import tf, torch
    for dueling in (False, True):
        a = torch.DQN(OBS, ACT, seed=11, hidden_sizes=(8, 8), dueling=dueling)
        b = tf.DQN(OBS, ACT, seed=11, hidden_sizes=(8, 8), dueling=dueling)
        sa, sb = a.state_dict(), b.state_dict()
        assert list(sa) == list(sb) and all(np.array_equal(sa[k], sb[k]) for k in sa)
        assert same(net(a, "q_net"), net(a, "target_net"))
        obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
        np.testing.assert_allclose(a.q_values(obs), b.q_values(obs), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- dueling head

def test_dueling_q_is_value_plus_centred_advantage(DQN):
    agent = DQN(OBS, ACT, seed=12, hidden_sizes=(16, 8), activation="tanh", dueling=True)
    w = net(agent, "q_net")
    assert sorted(w) == ["advantage.bias", "advantage.weight", "torso.0.bias", "torso.0.weight", "torso.2.bias",
                         "torso.2.weight", "value.bias", "value.weight"]
    assert w["value.weight"].shape == (1, 8) and w["advantage.weight"].shape == (5, 8)
    obs = np.random.default_rng(12).normal(size=(32, 4)).astype(np.float32)
    h = np.tanh(np.tanh(obs @ w["torso.0.weight"].T + w["torso.0.bias"]) @ w["torso.2.weight"].T + w["torso.2.bias"])
    adv = h @ w["advantage.weight"].T + w["advantage.bias"]
    expected = h @ w["value.weight"].T + w["value.bias"] + adv - adv.mean(1, keepdims=True)
    np.testing.assert_allclose(agent.q_values(obs), expected, rtol=1e-5, atol=1e-5)


def test_dueling_gradient_reaches_torso_and_both_heads(DQN):
    agent = DQN(OBS, ACT, seed=13, hidden_sizes=(8,), dueling=True, learning_starts=1, update_steps=1)
    agent.observe(batch(16, np.random.default_rng(13)))
    before = agent.state_dict()
    m = agent.update(8)
    assert np.isfinite(m["loss"]) and m["loss"] > 0
    after = agent.state_dict()
    for key in ("torso.0.weight", "torso.0.bias", "value.weight", "value.bias", "advantage.weight", "advantage.bias"):
        assert not np.array_equal(before[f"q_net.{key}"], after[f"q_net.{key}"]), key
        assert after[f"optimizer.{list(net(agent, 'q_net')).index(key)}.exp_avg"].any(), key
    assert after["optimizer.0.exp_avg"].shape == after["q_net.torso.0.weight"].shape  # torch's parameter order


def test_dueling_learns_a_contextual_bandit(DQN):
    """Four states (one-hot), the right action is the state's index: greedy play gets it right."""
    space = gym.spaces.Box(0, 1, (4,), np.float32)
    agent = DQN(space, gym.spaces.Discrete(4), seed=14, hidden_sizes=(16,), dueling=True, lr=1e-2, learning_starts=1,
                update_steps=150)
    rng = np.random.default_rng(14)
    s, a = rng.integers(0, 4, 256), rng.integers(0, 4, 256)
    obs = np.eye(4, dtype=np.float32)[s]
    agent.observe(Transitions(obs=obs, act=a, rew=(a == s).astype(np.float32), next_obs=obs,
                              terminated=np.ones(256, bool), truncated=np.zeros(256, bool)))
    assert agent.act(np.eye(4, dtype=np.float32)).tolist() != [0, 1, 2, 3]  # not right by chance at the start
    agent.update(32)
    assert agent.act(np.eye(4, dtype=np.float32)).tolist() == [0, 1, 2, 3]


def test_dueling_refuses_a_non_finite_update(DQN):
    agent = DQN(OBS, ACT, seed=15, hidden_sizes=(8,), dueling=True, learning_starts=1, update_steps=1)
    agent.observe(batch(8, np.random.default_rng(15), rew=np.full(8, np.nan, np.float32)))
    before = net(agent, "q_net")
    with pytest.raises(NonFiniteError, match="DQN update 1"):
        agent.update(4)
    assert same(net(agent, "q_net"), before) and agent.updates == 0


def test_dueling_save_restore_and_cross_backend(tmp_path):
    pytest.importorskip("torch"), pytest.importorskip("tensorflow")
    from marl_note.agents import tf, torch
    obs = np.random.default_rng(16).normal(size=(32, 4)).astype(np.float32)
    for src, dst in ((torch, tf), (tf, torch)):
        agent = _run(src.DQN(OBS, ACT, seed=16, learning_starts=10, dueling=True, **SMALL), 16)
        path = agent.save(tmp_path / f"{src.__name__}.zip")
        for cls in (src.DQN, dst.DQN):
            again = cls.restore(path)
            assert again.config["dueling"] is True and again.updates == agent.updates > 0
            assert sorted(again.state_dict()) == sorted(agent.state_dict())
            np.testing.assert_allclose(again.q_values(obs), agent.q_values(obs), rtol=1e-5, atol=1e-5)
        plain = src.DQN(OBS, ACT, **SMALL)  # a plain head cannot take dueling weights
        with pytest.raises(KeyError, match="missing"):
            plain.load_state_dict(agent.state_dict())


def test_config_holds_the_checked_hyperparameters():
    cfg = DQNConfig(hidden_sizes=[8, 4], tau=1, update_steps=np.int64(2))
    assert (cfg.hidden_sizes, cfg.tau, cfg.update_steps) == ((8, 4), 1.0, 2)
    with pytest.raises(ValueError, match="learning_starts must be a non-negative integer"):
        DQNConfig(learning_starts=-1)
    with pytest.raises(TypeError, match="augment must be a function"):
        DQNConfig(augment="mirror")


def test_default_buffer_on_image_frames_refused_before_allocating(monkeypatch):
    """The default 100,000-slot replay on pistonball-size frames needs 16.5 GB (each frame stored once; 32.9 GB
    with obs and next_obs per row): refused, naming buffer_size."""
    pytest.importorskip("torch")
    torch_dqn = importlib.import_module("marl_note.agents.torch").DQN
    from marl_note.replay import ReplayMemoryError, memory
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 10**9)
    frames = gym.spaces.Box(0, 255, (120, 457, 3), np.uint8)
    with pytest.raises(ReplayMemoryError, match=r"buffer_size=100000 .*needs 16.5 GB.*lower buffer_size"):
        torch_dqn(frames, gym.spaces.Discrete(3), seed=0)
    small = torch_dqn(frames, gym.spaces.Discrete(3), buffer_size=100, hidden_sizes=(4,), seed=0)
    assert small.replay.nbytes_estimate < 100 * 170_000
