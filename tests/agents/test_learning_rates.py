"""Learning rates at run time, in both backends, for every built-in algorithm and the RL base class:
``learning_rates()`` / ``set_learning_rate()``, the state's ``<optimizer>.lr``, save/restore, and that
the next gradient step really uses the new rate (the same weights as an agent built with it)."""
import importlib
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.checkpoints import restore
from marl_note.types import Transitions
from tests.compat.rl_helpers import user_rl

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX_ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
SMALL = dict(hidden_sizes=(8,), seed=0)


@pytest.fixture(params=["torch", "tf"])
def backend(request):
    pytest.importorskip("torch" if request.param == "torch" else "tensorflow")
    return importlib.import_module(f"marl_note.agents.{request.param}")


def build(module, algo, **over):
    """``(agent, {optimizer: constructor lr})`` of a small ``algo`` agent."""
    kw = {**SMALL, **over}
    if algo == "DQN":
        return module.DQN(BOX_OBS, DISCRETE, lr=kw.pop("lr", 2e-3), **kw), None
    if algo == "PPO":
        return module.PPO(BOX_OBS, DISCRETE, lr=kw.pop("lr", 3e-4), **kw), None
    if algo == "DDPG":
        return module.DDPG(BOX_OBS, BOX_ACT, actor_lr=1e-4, critic_lr=1e-3, **kw), None
    if algo == "SAC":
        return module.SAC(BOX_OBS, BOX_ACT, actor_lr=1e-4, critic_lr=2e-4, temperature_lr=3e-4, **kw), None
    if algo == "MADDPG":
        return module.MADDPG({"a": BOX_OBS, "b": BOX_OBS}, {"a": DISCRETE, "b": BOX_ACT}, actor_lr=1e-3,
                             critic_lr=2e-3, **kw), None
    raise AssertionError(algo)


EXPECTED = {
    "DQN": {"optimizer": 2e-3},
    "PPO": {"optimizer": 3e-4},
    "DDPG": {"actor_optimizer": 1e-4, "critic_optimizer": 1e-3},
    "SAC": {"actor_optimizer": 1e-4, "critic_optimizer": 2e-4, "alpha_optimizer": 3e-4},
    "MADDPG": {"a.actor_optimizer": 1e-3, "a.critic_optimizer": 2e-3, "b.actor_optimizer": 1e-3,
               "b.critic_optimizer": 2e-3},
}


def batch(n=16, seed=0, act_space=DISCRETE):
    rng = np.random.default_rng(seed)
    act = rng.integers(0, act_space.n, n) if isinstance(act_space, gym.spaces.Discrete) \
        else rng.uniform(-1, 1, (n, *act_space.shape)).astype(np.float32)
    return Transitions(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), act=act,
                       rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       terminated=rng.random(n) < 0.3, truncated=np.zeros(n, bool))


def weights(agent):
    return {k: agent.state_dict()[k] for k in agent.param_keys()}


@pytest.mark.parametrize("algo", list(EXPECTED))
def test_read_set_and_state_round_trip(backend, algo):
    agent, _ = build(backend, algo)
    assert agent.learning_rates() == pytest.approx(EXPECTED[algo], rel=1e-6)
    assert list(agent.learning_rates()) == list(EXPECTED[algo])
    # one optimiser
    name = list(EXPECTED[algo])[-1]
    after = agent.set_learning_rate(0.0123, name)
    assert after[name] == pytest.approx(0.0123) and after == agent.learning_rates()
    assert {k: v for k, v in after.items() if k != name} == pytest.approx(
        {k: v for k, v in EXPECTED[algo].items() if k != name}, rel=1e-6)
    # every optimiser
    assert agent.set_learning_rate(0.5) == pytest.approx({k: 0.5 for k in EXPECTED[algo]})
    state = agent.state_dict()
    assert {k: float(state[f"{k}.lr"]) for k in EXPECTED[algo]} == pytest.approx({k: 0.5 for k in EXPECTED[algo]})
    twin, _ = build(backend, algo)
    twin.load_state_dict(state)
    assert twin.learning_rates() == pytest.approx({k: 0.5 for k in EXPECTED[algo]})
    assert agent.config.get("lr", agent.config.get("actor_lr")) != 0.5  # the constructor arguments stay


@pytest.mark.parametrize("algo", ["DQN", "MADDPG"])
def test_save_and_restore_keep_the_learning_rates(backend, algo, tmp_path):
    agent, _ = build(backend, algo)
    agent.set_learning_rate(0.042, list(EXPECTED[algo])[:1])
    again = restore(agent.save(tmp_path / "ck"))
    assert again.learning_rates() == pytest.approx(agent.learning_rates())
    assert again.learning_rates()[list(EXPECTED[algo])[0]] == pytest.approx(0.042)


def test_a_set_rate_drives_the_next_step_like_a_constructed_one(backend):
    """DQN set to lr=0.02 takes exactly the step of a DQN built with lr=0.02 (not its old 1e-3)."""
    data = batch(32)
    changed, _ = build(backend, "DQN", lr=1e-3, learning_starts=8, update_steps=2)
    built, _ = build(backend, "DQN", lr=2e-2, learning_starts=8, update_steps=2)
    old, _ = build(backend, "DQN", lr=1e-3, learning_starts=8, update_steps=2)
    changed.set_learning_rate(2e-2)
    for agent in (changed, built, old):
        agent.observe(data)
        agent.update(batch_size=16)
    w_changed, w_built, w_old = weights(changed), weights(built), weights(old)
    assert all(np.allclose(w_changed[k], w_built[k], atol=1e-6) for k in w_built)
    assert not all(np.allclose(w_changed[k], w_old[k], atol=1e-4) for k in w_old)


def test_a_set_rate_drives_one_optimizer_of_several(backend):
    """DDPG with only the critic's rate changed steps like a DDPG built with that critic_lr."""
    data = batch(32, act_space=BOX_ACT)
    kw = dict(learning_starts=8, update_steps=1)
    changed, _ = build(backend, "DDPG", **kw)
    built = backend.DDPG(BOX_OBS, BOX_ACT, actor_lr=1e-4, critic_lr=5e-2, **SMALL, **kw)
    changed.set_learning_rate(5e-2, "critic_optimizer")
    for agent in (changed, built):
        agent.observe(data)
        agent.update(batch_size=16)
    a, b = weights(changed), weights(built)
    assert all(np.allclose(a[k], b[k], atol=1e-5) for k in b)


def test_rl_subclass_learning_rates(backend, tmp_path):
    agent = user_rl(backend, BOX_OBS, DISCRETE, lr=1e-3)
    assert agent.learning_rates() == pytest.approx({"optimizer": 1e-3})
    agent.set_learning_rate(0.25)
    assert float(agent.state_dict()["optimizer.lr"]) == pytest.approx(0.25)
    data = batch(16)
    built = user_rl(backend, BOX_OBS, DISCRETE, lr=0.25)
    for a in (agent, built):
        a.observe(data)
        a.update(batch_size=8)
    assert all(np.allclose(weights(agent)[k], weights(built)[k], atol=1e-6) for k in weights(built))
    twin = user_rl(backend, BOX_OBS, DISCRETE)
    twin.load_state_dict(agent.state_dict())
    assert twin.learning_rates() == pytest.approx({"optimizer": 0.25})


def test_tf_rl_state_saved_before_a_step_resets_a_stepped_optimizer():
    """Loading a state saved before the first step gives back a fresh optimiser (no moments of later
    steps), so the state reads as it did: the TF RL optimiser used to keep its moments and step count."""
    module = pytest.importorskip("marl_note.agents.tf")
    agent = user_rl(module, BOX_OBS, DISCRETE)
    before, replay = agent.state_dict(), {k: v.copy() for k, v in agent.replay.state_dict().items()}
    agent.observe(batch(16))
    agent.update(batch_size=8)
    assert "optimizer.var_index" in agent.state_dict()
    agent.load_state_dict(before)
    agent.replay.load_state_dict(replay)
    after = agent.state_dict()
    assert sorted(after) == sorted(before)
    assert all(np.array_equal(after[k], before[k]) for k in before)
    # and it trains again like a fresh agent
    fresh = user_rl(module, BOX_OBS, DISCRETE)
    for a in (agent, fresh):
        a.observe(batch(16, seed=1))
        a.update(batch_size=8)
    assert all(np.allclose(weights(agent)[k], weights(fresh)[k], atol=1e-6) for k in weights(fresh))


def test_tf_rl_checkpoint_without_lr_still_loads():
    """A TF RL state from before ``<optimizer>.lr`` existed is accepted; the agent keeps its rate."""
    module = pytest.importorskip("marl_note.agents.tf")
    from marl_note.agents.checkpoints.state_check import check_agent_state

    agent = user_rl(module, BOX_OBS, DISCRETE, lr=0.003)
    old = {k: v for k, v in user_rl(module, BOX_OBS, DISCRETE, lr=0.5).state_dict().items() if not k.endswith(".lr")}
    state, _ = check_agent_state(agent, old, "old checkpoint")
    agent.load_state_dict(state)
    assert agent.learning_rates() == pytest.approx({"optimizer": 0.003})


def test_tf_rl_schedule_cannot_be_set():
    module = pytest.importorskip("marl_note.agents.tf")
    keras = pytest.importorskip("keras")
    agent = user_rl(module, BOX_OBS, DISCRETE)
    agent.optimizer = keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5))
    agent.nets.discover(agent)
    assert agent.learning_rates() == pytest.approx({"optimizer": 0.1})
    with pytest.raises(TypeError, match="LearningRateSchedule"):
        agent.set_learning_rate(0.01)
    assert "optimizer.lr" not in agent.state_dict()


@pytest.mark.parametrize("bad, error, message", [
    (0.0, ValueError, "positive finite"), (-1e-3, ValueError, "positive finite"),
    (math.inf, ValueError, "positive finite"), (math.nan, ValueError, "nan"),
    (True, TypeError, "must be a number"), ("1e-3", TypeError, "must be a number"),
])
def test_bad_rates_are_refused_and_change_nothing(backend, bad, error, message):
    agent, _ = build(backend, "DDPG")
    with pytest.raises(error, match=message):
        agent.set_learning_rate(bad)
    assert agent.learning_rates() == pytest.approx(EXPECTED["DDPG"])


def test_unknown_optimizer_names_are_refused_before_any_change(backend):
    agent, _ = build(backend, "DDPG")
    with pytest.raises(KeyError, match=r"no optimizer 'critic'; its optimizers are \['actor_optimizer', "):
        agent.set_learning_rate(0.1, ["actor_optimizer", "critic"])
    with pytest.raises(ValueError, match="names no optimiser"):
        agent.set_learning_rate(0.1, [])
    assert agent.learning_rates() == pytest.approx(EXPECTED["DDPG"])
