"""Whole-agent checkpoints: save/restore per backend, across backends, replay, atomicity and errors."""
import dataclasses
import importlib
import inspect
import json
import os
import threading
import warnings

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import checkpoints
from marl_note.agents.checkpoints import CheckpointError, read_checkpoint, write_checkpoint
from marl_note.agents.exploration.policies import BoltzmannQPolicy, Policy
from marl_note.types import Transitions

torch_agents = pytest.importorskip("marl_note.agents.torch")

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def tf_agents():
    pytest.importorskip("tensorflow")
    return importlib.import_module("marl_note.agents.tf")


def backend(name):
    return torch_agents if name == "torch" else tf_agents()


def batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return Transitions(obs=rng.uniform(-1, 1, (n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                       rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool))


def trained_dqn(mod, **kw):
    agent = mod.DQN(OBS, ACT, hidden_sizes=(16,), learning_starts=16, update_steps=3, seed=1, **kw)
    agent.observe(batch(32))
    agent.update(8)
    agent.act(batch(4).obs, explore=True)
    return agent


def probe(n=64):
    return np.random.default_rng(7).uniform(-1, 1, (n, 4)).astype(np.float32)


def assert_same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        np.testing.assert_allclose(np.asarray(sa[k], np.float64), np.asarray(sb[k], np.float64), rtol=0, atol=0,
                                   err_msg=k)


@pytest.mark.parametrize("name", ["torch", "tf"])
@pytest.mark.parametrize("fmt", ["ckpt", "ckpt.zip"])
def test_round_trip(tmp_path, name, fmt):
    mod = backend(name)
    agent = trained_dqn(mod)
    path = agent.save(tmp_path / fmt)
    again = type(agent).restore(path)
    assert type(again) is type(agent) and again.config == agent.config
    assert_same_state(agent, again)
    assert (again.agent_steps, again.updates) == (agent.agent_steps, agent.updates) and again.updates == 3
    assert again.policy.eps == agent.policy.eps < 1.0
    obs = probe()
    assert (again.act(obs) == agent.act(obs)).all()
    assert (again.act(obs, explore=True) == agent.act(obs, explore=True)).all()  # same rng state
    manifest, _ = read_checkpoint(path)
    assert (manifest["backend"], manifest["algorithm"], manifest["kind"]) == (name, "DQN", "agent")
    assert manifest["config"]["hidden_sizes"] == {"$tuple": [16]}
    assert len(again.replay) == 0  # replay is only saved on request


@pytest.mark.parametrize("src,dst", [("torch", "tf"), ("tf", "torch")])
def test_cross_backend(tmp_path, src, dst):
    tf_agents()
    agent = trained_dqn(backend(src))
    path = agent.save(tmp_path / "ck")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = backend(dst).DQN.restore(path)
    # arguments that one backend's DQN has and the other's lacks are dropped, with a warning naming them
    params = set(inspect.signature(type(again).__init__).parameters)
    for w in caught:
        if "ignoring the recorded arguments" in str(w.message):
            names = str(w.message).split("[", 1)[1].split("]", 1)[0].replace("'", "").split(", ")
            assert names and not set(names) & params
    assert type(again).__module__.startswith(f"marl_note.agents.{dst}")
    obs = probe(256)
    np.testing.assert_allclose(again.q_values(obs), agent.q_values(obs), rtol=1e-5, atol=1e-5)
    assert (again.act(obs) == agent.act(obs)).all()
    assert (again.updates, again.agent_steps, again.policy.eps) == (agent.updates, agent.agent_steps, agent.policy.eps)
    generic = checkpoints.restore(path, backend=dst)
    assert type(generic) is type(again) and (generic.act(obs) == agent.act(obs)).all()
    assert type(checkpoints.restore(path)) is type(agent)


def test_include_replay(tmp_path):
    agent = trained_dqn(torch_agents)
    again = torch_agents.DQN.restore(agent.save(tmp_path / "ck.zip", include_replay=True))
    assert len(again.replay) == len(agent.replay) == 32
    ra, rb = agent.replay.state_dict(), again.replay.state_dict()
    assert sorted(ra) == sorted(rb) and all(np.array_equal(ra[k], rb[k]) for k in ra)
    assert again.replay.sample(5).obs.tolist() == agent.replay.sample(5).obs.tolist()  # same sampler rng
    ppo = torch_agents.PPO(OBS, ACT, n_steps=8, seed=0)
    with pytest.raises(ValueError, match="no replay buffer"):
        ppo.save(tmp_path / "ppo", include_replay=True)


@pytest.mark.parametrize("fmt,fail", [("ck.zip", "replace"), ("ck", "replace"), ("ck", "fsync")])
def test_interrupted_save_keeps_old_checkpoint(tmp_path, monkeypatch, fmt, fail):
    agent = trained_dqn(torch_agents)
    path = agent.save(tmp_path / fmt)
    before = {k: v.copy() for k, v in agent.state_dict().items()}
    agent.observe(batch(32, seed=1))
    agent.update(8)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(f"marl_note.agents.checkpoints.format.os.{fail}", broken)
        with pytest.raises(OSError, match="disk full"):
            agent.save(path)
    old = torch_agents.DQN.restore(path)
    assert int(old.updates) == int(before["updates"]) == 3
    restored = old.state_dict()
    assert all(np.array_equal(restored[k], before[k]) for k in before)
    assert sorted(os.listdir(tmp_path)) == [fmt]  # no temporary leftovers


def test_wrong_algorithm(tmp_path):
    path = torch_agents.PPO(OBS, ACT, n_steps=8, seed=0).save(tmp_path / "ppo")
    with pytest.raises(CheckpointError, match="holds a torch PPO agent; DQN.restore cannot build it"):
        torch_agents.DQN.restore(path)
    assert type(checkpoints.restore(path)).__name__ == "PPO"


def _tamper(path, edit_manifest=None, drop=None):
    manifest, arrays = read_checkpoint(path)
    if edit_manifest:
        edit_manifest(manifest)
    if drop:
        arrays.pop(drop)
    manifest.pop("format"), manifest.pop("arrays")
    write_checkpoint(path, manifest, arrays)


def test_errors_for_tampered_or_mismatched_checkpoints(tmp_path):
    agent = trained_dqn(torch_agents)
    cases = {
        "shape": (lambda m: m["config"].update(hidden_sizes={"$tuple": [8]}), None,
                  r"'q_net.0.weight' has shape \(16, 4\), expected \(8, 4\)"),
        "missing": (None, "target_net.0.bias", r"missing arrays \['target_net.0.bias'\]"),
        "algorithm": (lambda m: m.update(algorithm="Nope"), None, "holds a torch Nope agent"),
        "backend": (lambda m: m.update(backend="jax"), None, "backend is 'jax'"),
        "config key": (lambda m: m["config"].update(colour="red"), None, r"arguments \['colour'\]"),
        "config value": (lambda m: m["config"].update(gamma=7.0), None, "gamma must be in"),
        "tag": (lambda m: m["config"].update(policy={"$object": "os.system", "kwargs": {}}), None,
                "unknown object class"),
        "space": (lambda m: m.update(observation_space={"type": "Box"}), None, "observation_space"),
        "obs space": (lambda m: m.update(observation_space=checkpoints.space_to_json(gym.spaces.Box(-1, 1, (5,)))),
                      None, "has shape"),
    }
    for name, (edit, drop, message) in cases.items():
        path = agent.save(tmp_path / name.replace(" ", "_"))
        _tamper(path, edit, drop)
        with pytest.raises(CheckpointError, match=message):
            torch_agents.DQN.restore(path)
    manifest_path = os.path.join(agent.save(tmp_path / "json"), "manifest.json")
    with open(manifest_path, "w") as f:
        f.write("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        torch_agents.DQN.restore(tmp_path / "json")


def test_params_only(tmp_path):
    agent = trained_dqn(torch_agents)
    other = torch_agents.DQN(OBS, ACT, hidden_sizes=(16,), learning_starts=16, seed=5)
    obs = probe()
    assert not np.allclose(other.q_values(obs), agent.q_values(obs))
    path = agent.save_param(tmp_path / "w.zip")
    assert sorted(read_checkpoint(path)[1]) == sorted(agent.param_keys())
    other.restore_param(path)
    np.testing.assert_array_equal(other.q_values(obs), agent.q_values(obs))
    assert other.updates == 0 and other.agent_steps == 0  # only weights moved
    with pytest.raises(CheckpointError, match="restore_param"):
        torch_agents.DQN.restore(path)
    small = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=0)
    before = small.q_values(obs)
    with pytest.raises(CheckpointError, match="has shape"):
        small.restore_param(path)
    np.testing.assert_array_equal(small.q_values(obs), before)  # unchanged
    ppo = torch_agents.PPO(OBS, ACT, n_steps=8, seed=0)
    with pytest.raises(CheckpointError, match="missing arrays"):
        ppo.restore_param(path)


class CoinPolicy(Policy):
    def select(self, values, mask, rng):
        return np.zeros(len(values), np.int64)


def test_config_objects(tmp_path):
    agent = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), policy=BoltzmannQPolicy(tau=0.5, tau_min=0.1,
                                                                                  n_steps_annealing=50), seed=0)
    agent.observe(batch(20))
    again = torch_agents.DQN.restore(agent.save(tmp_path / "ok"))
    assert type(again.policy) is BoltzmannQPolicy and again.policy.tau == agent.policy.tau != 0.5
    custom = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), policy=CoinPolicy(), seed=0)
    with pytest.raises(TypeError, match=r"DQN\(policy=...\).*CoinPolicy cannot be recorded"):
        custom.save(tmp_path / "custom")
    assert not os.path.exists(tmp_path / "custom")
    # an object that cannot be recorded can be given again at restore time
    path = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=0).save(tmp_path / "plain")
    assert type(torch_agents.DQN.restore(path, policy=CoinPolicy()).policy) is CoinPolicy
    with pytest.raises(TypeError, match="no constructor arguments"):
        torch_agents.DQN.restore(path, colour="red")


def test_config_codec_round_trip():
    from marl_note.agents.exploration.noise import OrnsteinUhlenbeckProcess
    from marl_note.replay import PrioritizedReplayBuffer
    config = {"a": (1, 2.5, None), "b": [1, {"x": np.float32(2)}], "c": np.arange(3), "d": OBS,
              "e": OrnsteinUhlenbeckProcess(0.15, sigma=0.3, size=(2,)),
              "f": PrioritizedReplayBuffer(10, OBS, ACT, alpha=0.7)}
    encoded = json.loads(json.dumps(checkpoints.encode_config(config)))
    decoded = checkpoints.decode_config(encoded)
    assert decoded["a"] == (1, 2.5, None) and decoded["b"] == [1, {"x": 2.0}] and decoded["d"] == OBS
    assert decoded["c"].tolist() == [0, 1, 2] and decoded["e"].theta == 0.15 and decoded["f"].alpha == 0.7
    assert checkpoints.encode_config({"fn": json.dumps})["fn"] == {"$callable": "json.dumps"}
    with pytest.raises(TypeError, match=r"obj=.*_thread.lock cannot be recorded"):
        checkpoints.encode_config({"obj": threading.Lock()})


def negate_obs(t):
    return dataclasses.replace(t, obs=-t.obs, next_obs=-t.next_obs)


def test_function_arguments_are_recorded_by_name_and_must_be_given_again(tmp_path):
    agent = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=0, augment=negate_obs)
    agent.observe(batch(20))
    path = agent.save(tmp_path / "aug")  # saving works; the function itself is not stored
    agent.save_param(tmp_path / "weights")
    message = r"saved with augment=.*negate_obs, a function.*restore\(path, augment=\.\.\.\)"
    with pytest.raises(CheckpointError, match=message):
        torch_agents.DQN.restore(path)
    again = torch_agents.DQN.restore(path, augment=negate_obs)
    assert again.config["augment"] is negate_obs and again.agent_steps == 20
    fresh = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=1)
    fresh.restore_param(tmp_path / "weights")  # weights alone never need the function
    assert np.array_equal(fresh.q_values(np.ones((2, 4), np.float32)), agent.q_values(np.ones((2, 4), np.float32)))


def test_save_never_deletes_the_users_files(tmp_path, monkeypatch):
    agent = trained_dqn(torch_agents)
    results = tmp_path / "results"
    results.mkdir()
    (results / "notes.txt").write_text("mine")
    for target in (results, "."):
        monkeypatch.chdir(results)
        with pytest.raises(CheckpointError, match=r"holds no marl_note checkpoint \(it holds notes.txt\)"):
            agent.save(target)
        with pytest.raises(CheckpointError, match="holds no marl_note checkpoint"):
            agent.save_param(target)
    assert os.listdir(results) == ["notes.txt"] and (results / "notes.txt").read_text() == "mine"
    path = agent.save(results / "ckpt")  # a checkpoint directory may gain other files beside it ...
    (results / "ckpt" / "README").write_text("what this run was")
    agent.update(8)
    agent.save(path)  # ... which later saves keep
    assert (results / "ckpt" / "README").read_text() == "what this run was"
    assert torch_agents.DQN.restore(path).updates == agent.updates
