"""SAC in every backend: acting, one update, torch/TF parity, checkpoints, bad input, non-finite steps, learning.

TF cases trace one graph per agent that updates (seconds each), so each TF test builds at most two.
"""
import contextlib
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.networks import mlp_forward
from marl_note.replay import PrioritizedReplayBuffer
from marl_note.types import NonFiniteError, Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([2.0, 2.0], np.float32))
DISCRETE = gym.spaces.Discrete(4, start=1)


def backend(name):
    pytest.importorskip({"torch": "torch", "tf": "tensorflow", "numpy": "numpy"}[name])
    return importlib.import_module(f"marl_note.agents.{name}")


@pytest.fixture(params=["torch", "tf", "numpy"])
def mod(request):
    return backend(request.param)


def masks(n, rng, k=4):
    m = rng.random((n, k)) < 0.5
    m[np.arange(n), rng.integers(0, k, n)] = True
    return m


def batch(n, rng, space, masked=True):
    """``n`` random transitions for ``space`` (legal actions under random masks for Discrete)."""
    discrete = isinstance(space, gym.spaces.Discrete)
    mask = masks(n, rng) if discrete and masked else None
    act = (np.array([rng.choice(np.flatnonzero(row)) for row in mask]) + 1 if mask is not None
           else rng.integers(1, 5, n) if discrete else rng.uniform(BOX.low, BOX.high, (n, 2)).astype(np.float32))
    obs, next_obs = rng.uniform(-1, 1, (2, n, 3)).astype(np.float32)
    return Transitions(obs=obs, act=act, rew=rng.normal(size=n).astype(np.float32), next_obs=next_obs,
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool), mask=mask,
                       next_mask=masks(n, rng) if mask is not None else None)


def state(agent):
    return {k: np.array(v) for k, v in agent.state_dict().items()}


# --------------------------------------------------------------------------- acting

def test_acts_within_bounds_and_masks(mod):
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (256, 3)).astype(np.float32)
    box = mod.SAC(OBS, BOX, hidden_sizes=(16,), learning_starts=0, seed=0)
    for explore in (False, True):
        a = box.act(obs, explore=explore)
        assert a.shape == (256, 2) and a.dtype == np.float32
        assert np.all(a >= BOX.low) and np.all(a <= BOX.high)
    np.testing.assert_array_equal(box.act(obs), box.act(obs))  # greedy: tanh of the mean
    assert np.abs(box.act(obs, explore=True) - box.act(obs)).mean() > 1e-3  # exploring samples
    warm = mod.SAC(OBS, BOX, hidden_sizes=(16,), learning_starts=10, seed=0).act(obs, explore=True)
    assert warm[:, 0].std() > 0.4 and warm[:, 1].std() > 0.8  # uniform over the Box before learning starts

    mask = masks(256, rng)
    for learning_starts in (0, 10):  # policy samples, then uniform warm-up
        agent = mod.SAC(OBS, DISCRETE, hidden_sizes=(16,), learning_starts=learning_starts, seed=0)
        for explore in (False, True):
            a = agent.act(obs, mask=mask, explore=explore)
            assert a.shape == (256,) and a.dtype == np.int64
            assert mask[np.arange(256), a - 1].all()
        assert len(np.unique(agent.act(obs, explore=True))) == 4  # exploring reaches every action
    with pytest.raises(ValueError, match=r"mask has shape \(256, 3\), expected \(256, 4\)"):
        agent.act(obs, mask=mask[:, :3])
    with pytest.raises(ValueError, match="observations are batched"):
        agent.act(obs[0])


# --------------------------------------------------------------------------- learning step

def test_one_update_changes_every_weight_and_moves_targets_by_tau(mod):
    rng = np.random.default_rng(1)
    agent = mod.SAC(OBS, DISCRETE, hidden_sizes=(16,), tau=0.1, learning_starts=32, update_steps=1, seed=1)
    agent.observe(batch(32, rng, DISCRETE))
    before = state(agent)
    metrics = agent.update(16)
    after = state(agent)
    assert metrics["gradient_steps"] == 1 and agent.updates == 1
    assert {"critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean", "td_abs"} <= set(metrics)
    weights = [k for k in before if k.split(".")[0] in ("actor", "qf1", "qf2", "qf1_target", "qf2_target", "log_alpha")]
    assert len(weights) == 4 * 5 + 1
    assert [k for k in weights if np.array_equal(before[k], after[k])] == []
    for q in ("qf1", "qf2"):
        for k in (k for k in before if k.startswith(q + ".")):
            target = k.replace(q, q + "_target", 1)
            np.testing.assert_allclose(after[target], 0.9 * before[target] + 0.1 * after[k], rtol=1e-5, atol=1e-6)
    assert {"actor_optimizer.0.exp_avg", "critic_optimizer.7.exp_avg_sq", "alpha_optimizer.0.step"} <= set(after)


def test_fixed_temperature_and_update_schedule():
    mod = backend("torch")
    rng = np.random.default_rng(2)
    agent = mod.SAC(OBS, BOX, hidden_sizes=(8,), autotune=False, init_temperature=0.2, learning_starts=10,
                    replay_ratio=0.5, seed=2)
    assert agent.temperature == pytest.approx(0.2)
    agent.observe(batch(8, rng, BOX))
    assert agent.update(4) == {"gradient_steps": 0}
    agent.observe(batch(8, rng, BOX))
    metrics = agent.update(4)
    assert metrics["gradient_steps"] == 4 and "alpha_loss" not in metrics  # round(0.5 * 8 new) steps
    assert agent.temperature == pytest.approx(0.2)
    assert not any(k.startswith("alpha_optimizer") for k in agent.state_dict())
    assert agent.update(4)["gradient_steps"] == 1  # no new transitions: still one step
    assert "agent_steps=16, updates=5" in repr(agent)


def test_soft_targets_and_log_probs_match_a_numpy_reference():
    """The critic target recomputed from the weights in numpy: masked expectation (Discrete) and the
    tanh-Gaussian with its log-prob correction (Box, checked against torch.distributions too)."""
    mod = backend("torch")
    import torch
    rng = np.random.default_rng(3)
    for space in (DISCRETE, BOX):
        agent = mod.SAC(OBS, space, hidden_sizes=(8,), gamma=0.9, init_temperature=0.5, seed=3)
        b = batch(16, rng, space)
        if space is DISCRETE:
            b.next_mask[0] = False  # no legal action at s': no bootstrap
        x = agent.train_inputs(b)
        w = agent.state_dict()
        t = {k: torch.as_tensor(v) for k, v in x.items()}
        _, _, _, target = agent.nets.critic_loss(t["obs"], t["act"], t["next_obs"], t["rew"], t["alive"],
                                                 t["discount"], t["weights"], t["next_aux"], torch.tensor(0.5))
        out = mlp_forward(w, "actor", x["next_obs"], "relu").astype(np.float64)
        if space is DISCRETE:
            assert x["alive"][0] == 0 and x["aux"].all(1).sum() < 16
            legal = x["next_aux"] | ~x["next_aux"].any(1, keepdims=True)  # row 0: any values, alive is 0
            z = np.where(legal, out - out.max(1, keepdims=True), 0.0)
            logp = np.where(legal, z - np.log(np.where(legal, np.exp(z), 0.0).sum(1, keepdims=True)), 0.0)
            p = np.where(legal, np.exp(logp), 0.0)
            q = np.minimum(mlp_forward(w, "qf1_target", x["next_obs"], "relu"),
                           mlp_forward(w, "qf2_target", x["next_obs"], "relu"))
            v = (p * (q - 0.5 * logp)).sum(1)
            np.testing.assert_allclose(x["target_entropy"], 0.98 * np.log(x["aux"].sum(1)), rtol=1e-6)
        else:
            mean, log_std = out[:, :2], -5.0 + 3.5 * (np.tanh(out[:, 2:]) + 1.0)
            u = mean + np.exp(log_std) * x["next_aux"]
            dist = torch.distributions.TransformedDistribution(
                torch.distributions.Normal(torch.as_tensor(mean), torch.as_tensor(np.exp(log_std))),
                [torch.distributions.TanhTransform()])
            logp = dist.log_prob(torch.tanh(torch.as_tensor(u))).sum(1).numpy()
            xa = np.concatenate([x["next_obs"], np.tanh(u)], 1)
            q = np.minimum(mlp_forward(w, "qf1_target", xa, "relu"), mlp_forward(w, "qf2_target", xa, "relu"))[:, 0]
            v = q - 0.5 * logp
            assert np.all(x["target_entropy"] == -2.0)
        expected = x["rew"] + 0.9 * x["alive"] * v
        np.testing.assert_allclose(target.numpy(), expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- parity

@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
def test_torch_and_tf_start_equal_and_take_the_same_steps(space):
    """Same seed: the same numpy-drawn weights; two gradient steps (PR-weighted for Box, masked for
    Discrete) from the same replay give the same weights, optimiser slots and actions."""
    mods = backend("torch"), backend("tf")
    kw = dict(hidden_sizes=(16, 16), learning_starts=32, update_steps=2, PR=space is BOX, seed=4)
    agents = [m.SAC(OBS, space, **kw) for m in mods]
    start = [state(a) for a in agents]
    assert sorted(start[0]) == sorted(start[1])
    assert all(np.array_equal(start[0][k], start[1][k]) for k in start[0])
    t = batch(32, np.random.default_rng(4), space)
    metrics = []
    for agent in agents:
        agent.observe(t)
        metrics.append(agent.update(16))
    assert metrics[0].keys() == metrics[1].keys()
    for k in metrics[0]:
        assert metrics[0][k] == pytest.approx(metrics[1][k], rel=1e-4, abs=1e-5), k
    s = [state(a) for a in agents]
    assert sorted(s[0]) == sorted(s[1])
    for k in s[0]:
        np.testing.assert_allclose(s[0][k], s[1][k], rtol=1e-5, atol=1e-5, err_msg=k)
    assert not np.array_equal(s[0]["actor.0.weight"], start[0]["actor.0.weight"])
    obs = np.random.default_rng(5).uniform(-1, 1, (64, 3)).astype(np.float32)
    for explore in (False, True):
        np.testing.assert_allclose(agents[0].act(obs, explore=explore), agents[1].act(obs, explore=explore),
                                   atol=1e-5)


def test_torch_compile_option_falls_back_to_the_eager_losses(monkeypatch):
    """``compile=True`` wraps both losses in torch.compile; where that fails, a warning and the eager step."""
    mod = backend("torch")
    import torch
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (_ for _ in ()).throw(RuntimeError("nope")))
    t = batch(16, np.random.default_rng(11), BOX)
    states = []
    for compile in (False, True):
        with pytest.warns(RuntimeWarning) if compile else contextlib.nullcontext() as caught:
            agent = mod.SAC(OBS, BOX, hidden_sizes=(8,), learning_starts=16, update_steps=1, seed=11, compile=compile)
            agent.observe(t)
            agent.update(8)
        states.append(state(agent))
    assert sorted(str(w.message).split(" is ")[0] for w in caught) == [
        "torch.compile of the SAC actor loss", "torch.compile of the SAC critic loss"]
    assert all(np.array_equal(states[0][k], states[1][k]) for k in states[0])


# --------------------------------------------------------------------------- checkpoints

def test_save_restore_within_and_across_backends(mod, tmp_path):
    """A trained torch agent restores into ``mod`` (weights, optimiser, counters, replay) and acts the
    same; a fresh ``mod`` agent restores into torch."""
    torch_mod = backend("torch")
    rng = np.random.default_rng(6)
    trained = torch_mod.SAC(OBS, DISCRETE, hidden_sizes=(16,), learning_starts=16, update_steps=2, seed=6)
    trained.observe(batch(24, rng, DISCRETE))
    trained.update(8)
    path = trained.save(tmp_path / "sac.zip", include_replay=True)
    again = mod.SAC.restore(path)
    assert type(again) is mod.SAC and again.config["hidden_sizes"] == (16,)
    saved, restored = state(trained), state(again)
    assert sorted(saved) == sorted(restored) and all(np.array_equal(saved[k], restored[k]) for k in saved)
    assert len(again.replay) == 24 and again.updates == 2
    obs = rng.uniform(-1, 1, (32, 3)).astype(np.float32)
    mask = masks(32, rng)
    np.testing.assert_array_equal(again.act(obs, mask=mask, explore=True), trained.act(obs, mask=mask, explore=True))

    fresh = mod.SAC(OBS, BOX, hidden_sizes=(8,), init_temperature=0.3, seed=7)
    back = torch_mod.SAC.restore(fresh.save(tmp_path / "fresh"))
    assert back.temperature == pytest.approx(0.3)
    np.testing.assert_allclose(back.act(obs), fresh.act(obs), atol=1e-6)
    weights_only = mod.SAC(OBS, DISCRETE, hidden_sizes=(16,), seed=99)
    weights_only.restore_param(trained.save_param(tmp_path / "params.zip"))
    assert "log_alpha" in trained.param_keys() and "alpha_optimizer.lr" not in trained.param_keys()
    loaded = state(weights_only)
    assert all(np.array_equal(loaded[k], saved[k]) for k in trained.param_keys()) and weights_only.updates == 0


# --------------------------------------------------------------------------- bad input

def test_bad_arguments_raise_clear_errors(mod):
    cases = [
        (dict(action_space=gym.spaces.MultiDiscrete([2, 2])), TypeError, "SAC needs a Discrete or Box action space"),
        (dict(action_space=gym.spaces.Box(-np.inf, np.inf, (2,))), ValueError, "bounds, which must be finite"),
        (dict(tau=0.0), ValueError, r"tau must be in \(0, 1\]"),
        (dict(gamma=1.5), ValueError, r"gamma must be in \[0, 1\]"),
        (dict(actor_lr=-1.0), ValueError, "actor_lr must be a positive finite number"),
        (dict(init_temperature=0.0), ValueError, "init_temperature must be a positive finite number"),
        (dict(target_entropy_scale=1.5), ValueError, "target_entropy_scale must be in"),
        (dict(target_entropy=float("nan")), ValueError, "target_entropy must be a finite number"),
        (dict(autotune="yes"), TypeError, "autotune must be True or False"),
        (dict(hidden_sizes=(0,)), ValueError, "hidden_sizes must be positive"),
        (dict(activation="sigmoid"), ValueError, "activation must be one of"),
        (dict(buffer_size=0), ValueError, "buffer_size must be a positive integer"),
        (dict(update_steps=-1), ValueError, "update_steps must be a non-negative integer"),
        (dict(num_steps=0), ValueError, "num_steps must be a positive integer"),
        (dict(PR=True, alpha=-1.0), ValueError, "alpha must be a finite number >= 0"),
        (dict(her=dict(k=4)), ValueError, "HER needs a goal env"),
    ]
    for kwargs, exc, message in cases:
        kwargs = {"action_space": BOX, "hidden_sizes": (8,), **kwargs}
        with pytest.raises(exc, match=message):
            mod.SAC(OBS, **kwargs)
    agent = mod.SAC(OBS, BOX, hidden_sizes=(8,), seed=0)
    t = batch(4, np.random.default_rng(0), BOX)
    with pytest.raises(ValueError, match=r"transitions.act has shape \(4,\), expected \(batch, \*\(2,\)\)"):
        agent.observe(Transitions(obs=t.obs, act=t.act[:, 0], rew=t.rew, next_obs=t.next_obs,
                                  terminated=t.terminated, truncated=t.truncated))
    with pytest.raises(TypeError, match="expects a marl_note.types.Transitions"):
        agent.observe({"obs": t.obs})


# --------------------------------------------------------------------------- non-finite steps

CASES = [("torch", BOX, "reward"), ("torch", DISCRETE, "obs"), ("tf", BOX, "reward")]


@pytest.mark.parametrize("name,space,poison", CASES, ids=["torch-box-reward", "torch-discrete-obs", "tf-box-reward"])
def test_nonfinite_update_raises_before_writing_weights(name, space, poison):
    agent = backend(name).SAC(OBS, space, hidden_sizes=(8,), learning_starts=8, buffer_size=8, update_steps=1, seed=0)
    rng = np.random.default_rng(8)
    agent.observe(batch(8, rng, space))
    assert agent.update(8)["gradient_steps"] == 1
    bad = batch(8, rng, space)
    (bad.rew if poison == "reward" else bad.obs)[:] = np.nan  # the batch replaces the clean one
    agent.observe(bad)
    before = {k: v for k, v in state(agent).items() if "rng" not in k and not k.startswith("new_")}
    with pytest.raises(NonFiniteError, match=r"^SAC update 2: critic loss is nan") as err:
        agent.update(8)
    assert "no weight holds a non-finite value" in str(err.value)
    after = {k: v for k, v in state(agent).items() if "rng" not in k and not k.startswith("new_")}
    assert sorted(after) == sorted(before)
    assert [k for k in before if before[k].tobytes() != after[k].tobytes()] == []


# --------------------------------------------------------------------------- learning

@pytest.mark.parametrize("name,kind", [("torch", "discrete"), ("torch", "box"), ("tf", "box")])
def test_learns_a_contextual_bandit(name, kind):
    """One-step episodes: pick the action named by the sign of obs[0] (Discrete), or output obs[0] (Box).
    (TF runs one kind: the parity test shows its steps are torch's.)"""
    mod = backend(name)
    rng = np.random.default_rng(9)
    space = gym.spaces.Discrete(2) if kind == "discrete" else gym.spaces.Box(-1, 1, (1,), np.float32)
    agent = mod.SAC(gym.spaces.Box(-1, 1, (2,), np.float32), space, hidden_sizes=(32, 32), actor_lr=3e-3,
                    critic_lr=3e-3, temperature_lr=3e-3, learning_starts=64, update_steps=1, seed=0)

    def reward(o, a):
        return (a == (o[:, 0] > 0)).astype(np.float32) if kind == "discrete" else -np.square(a[:, 0] - o[:, 0])

    for _ in range(100):
        o = rng.uniform(-1, 1, (8, 2)).astype(np.float32)
        a = agent.act(o, explore=True)
        agent.observe(Transitions(obs=o, act=a, rew=reward(o, a), next_obs=o, terminated=np.ones(8, bool),
                                  truncated=np.zeros(8, bool)))
        agent.update(64)
    o = rng.uniform(-1, 1, (500, 2)).astype(np.float32)
    score = reward(o, agent.act(o)).mean()
    assert score > (0.9 if kind == "discrete" else -0.1), score  # random: 0.5 and -2/3


def test_prioritized_replay_n_step_and_goal_envs():
    mod = backend("torch")
    from marl_note.envs.goal_envs import BitFlippingEnv
    rng = np.random.default_rng(10)
    agent = mod.SAC(OBS, BOX, hidden_sizes=(8,), PR=True, num_steps=3, learning_starts=1, update_steps=2, seed=10)
    assert isinstance(agent.replay, PrioritizedReplayBuffer) and agent.prioritized
    t = batch(40, rng, BOX)
    agent.observe(Transitions(obs=t.obs, act=t.act, rew=t.rew, next_obs=t.next_obs, terminated=t.terminated,
                              truncated=t.truncated, stream=np.zeros(40, np.int64)))
    assert agent.update(16)["gradient_steps"] == 2
    assert agent.replay.effective_sample_size() < len(agent.replay)  # |TD| fed back

    env = BitFlippingEnv(n_bits=3)
    her = mod.SAC(env.observation_space, env.action_space, hidden_sizes=(8,), her=dict(k=2),
                  compute_reward=env.compute_reward, learning_starts=1, update_steps=1, seed=10)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        a = her.act({k: v[None] for k, v in obs.items()}, explore=True)
        next_obs, r, term, trunc, _ = env.step(int(a[0]))
        her.observe(Transitions(obs={k: v[None] for k, v in obs.items()}, act=a, rew=np.array([r], np.float32),
                                next_obs={k: v[None] for k, v in next_obs.items()}, terminated=np.array([term]),
                                truncated=np.array([True]), stream=np.zeros(1, np.int64)))
        obs, _ = env.reset()
    assert her.update(4)["gradient_steps"] == 1
