"""An algorithm from outside the library, registered and run everywhere (issue 29, item 3).

Expected SARSA is defined here, in this file only, the way a plugin package would define it: a numpy
core (:class:`ExpectedSarsaCore`: DQN's acting, replay and schedule, and the target's definition),
a torch class and a tf class (each a network subclass with its own TD target), and one
``registry.register(ENTRY)``. Nothing in ``marl_note/`` names it. It then runs through the trainer
on a real Gymnasium env, ``check_agent``, a checkpoint round trip torch -> tf -> torch with the
classes the registry finds, the actor pool (acting in numpy in the actor, as the registry's core
says) and the command line (``MARL_NOTE_PLUGINS`` names a module that registers it).

The backend classes are built when first asked for (this module's ``__getattr__``), as a plugin's
``mypkg/torch.py`` and ``mypkg/tf.py`` would be imported: importing this module, and reading the
entry, imports neither framework, so an actor process that unpickles the numpy core stays light.
"""
import json
import multiprocessing
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import registry
from marl_note.agents.dqn import DQNCore
from marl_note.types import Transitions

NAME = "expected-sarsa"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = dict(hidden_sizes=(8,), buffer_size=256, learning_starts=16, batch_size=16, update_steps=1)


class ExpectedSarsaCore(DQNCore):
    """Expected SARSA: acts, stores and schedules updates as DQN does; its TD target is
    ``r + discount * alive * sum_a pi(a|s') Q_target(s', a)`` with ``pi`` the softmax of
    ``Q_target(s', .) / temperature`` over the legal next actions (:meth:`expected_value`)."""

    temperature = 0.5

    @classmethod
    def expected_value(cls, q: np.ndarray, legal: np.ndarray) -> np.ndarray:
        """``sum_a pi(a) q[a]`` per row, ``pi`` the softmax of ``q / temperature`` over the legal actions."""
        logits = np.where(legal, q / cls.temperature, -np.inf)
        logits = logits - logits.max(axis=1, keepdims=True)
        pi = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return (pi * np.where(legal, q, 0.0)).sum(axis=1)


def _torch_class() -> type:
    import torch

    from marl_note.agents.torch.dqn import DQN, DQNNetworks

    class ExpectedSarsaNetworks(DQNNetworks):
        @torch.no_grad()
        def _target(self, b):
            q_next = self.target_net(b["next_obs"])
            logits = (q_next / ExpectedSarsaCore.temperature).masked_fill(~b["legal"], -1e9)
            value = (torch.softmax(logits, dim=1) * q_next.masked_fill(~b["legal"], 0.0)).sum(dim=1)
            return b["rew"] + b["discount"] * b["alive"] * value

    class ExpectedSarsa(ExpectedSarsaCore, DQN):
        Networks = ExpectedSarsaNetworks

    return ExpectedSarsa


def _tf_class() -> type:
    import tensorflow as tf

    from marl_note.agents.tf.dqn import DQN, DQNNetworks

    class ExpectedSarsaNetworks(DQNNetworks):
        def _target(self, next_obs, rew, discount, alive, legal):
            q_next = self.target_net(next_obs)
            logits = tf.where(legal, q_next / ExpectedSarsaCore.temperature, tf.constant(-1e9, q_next.dtype))
            value = tf.reduce_sum(tf.nn.softmax(logits, axis=1) * tf.where(legal, q_next, 0.0), axis=1)
            return tf.stop_gradient(rew + discount * alive * value)

    class ExpectedSarsa(ExpectedSarsaCore, DQN):
        Networks = ExpectedSarsaNetworks

    return ExpectedSarsa


def __getattr__(name):
    """``TorchExpectedSarsa`` / ``TFExpectedSarsa``, built (importing the framework) on first use."""
    build = {"TorchExpectedSarsa": _torch_class, "TFExpectedSarsa": _tf_class}.get(name)
    if build is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = build()
    cls.__qualname__ = name  # pickle finds it here; its __name__ stays ExpectedSarsa in both backends (checkpoints)
    globals()[name] = cls
    return cls


ENTRY = registry.Algorithm(NAME, core=ExpectedSarsaCore, torch=f"{__name__}.TorchExpectedSarsa",
                           tf=f"{__name__}.TFExpectedSarsa", actions=("Discrete",), on_policy=False,
                           tiny={"hidden_sizes": (8,), "buffer_size": 256, "learning_starts": 16, "update_steps": 1})


@pytest.fixture
def registered():
    registry.register(ENTRY)
    try:
        yield ENTRY
    finally:
        registry.unregister(NAME)
    assert NAME not in registry.names()


def cartpole_spaces():
    env = gym.make("CartPole-v1")
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def test_the_plugin_is_found_by_name_and_by_class_and_its_checkpoint_restores_in_a_fresh_process(registered,
                                                                                               tmp_path):
    """Registering and reading the entry imports no framework; restore() of its checkpoint in a fresh
    interpreter finds the class through the registry (the file names no code that is imported)."""
    torch_cls = registered.cls("torch")
    assert torch_cls.__name__ == "ExpectedSarsa" and issubclass(torch_cls, ExpectedSarsaCore)
    agent = torch_cls(*cartpole_spaces(), hidden_sizes=(8,), seed=0)
    assert registry.entry_of(agent) is registered and registry.core_of(agent) is ExpectedSarsaCore
    assert registry.is_on_policy(agent) is False
    path = agent.save(str(tmp_path / "agent"))
    expected = agent.q_values(np.ones((1, 4), np.float32))
    code = f"""
import sys
import gymnasium as gym
import numpy as np
from marl_note.agents import registry
from marl_note.envs.adapters import adapt, make_spec
from {__name__} import ENTRY, ExpectedSarsaCore
registry.register(ENTRY)
assert registry.names()[-1] == "{NAME}" and registry.get("{NAME}").backends == ("torch", "tf")
assert registry.entry_of(ExpectedSarsaCore).name == "{NAME}" and not registry.is_on_policy(ExpectedSarsaCore)
assert registry.fitting(make_spec(adapt(gym.make("CartPole-v1")))) == ["dqn", "ppo", "sac", "maddpg", "mappo", "ippo",
                                                                   "vdn", "qmix", "nfsp", "{NAME}"]
bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow")]
assert not bad, bad
from marl_note.agents.checkpoints import restore
agent = restore({path!r})
assert type(agent).__name__ == "ExpectedSarsa" and type(agent).__module__ == "{__name__}"
np.testing.assert_allclose(agent.q_values(np.ones((1, 4), np.float32)), {expected.tolist()!r}, rtol=1e-6)
assert "tensorflow" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_both_backends_compute_the_expected_sarsa_target(registered):
    pytest.importorskip("tensorflow")
    obs_space, act_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)
    agents = [registered.cls(b)(obs_space, act_space, hidden_sizes=(8,), seed=3) for b in ("torch", "tf")]
    rng = np.random.default_rng(0)
    legal = np.array([[1, 1, 1], [1, 0, 1], [0, 1, 0], [0, 0, 0]], bool)
    arrays = {"next_obs": rng.uniform(-1, 1, (4, 4)).astype(np.float32), "rew": np.array([1, 0, -1, 2], np.float32),
              "discount": np.full(4, 0.9, np.float32), "alive": np.array([1, 1, 1, 0], np.float32), "legal": legal}
    q = agents[0].q_values(arrays["next_obs"])  # the target network equals the online one before any update
    value = ExpectedSarsaCore.expected_value(q[:3], legal[:3])
    expected = arrays["rew"] + 0.9 * np.append(value, 0.0)
    for agent in agents:
        np.testing.assert_allclose(agent.nets.td_target(arrays), expected, rtol=1e-5, atol=1e-5)
    dqn_target = arrays["rew"][:3] + 0.9 * np.where(legal[:3], q[:3], -np.inf).max(axis=1)
    assert not np.allclose(expected[:3], dqn_target)  # a new algorithm, not DQN under another name


def test_the_trainer_trains_it_on_a_gymnasium_env(registered):
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=50,
                                   episodes_per_train=15, test_freq=15, episodes_per_test=1, batch_size=16, seed=0)
    agent = registered.cls("torch")(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                                    seed=0, **{k: v for k, v in SMALL.items() if k != "batch_size"})
    before = {k: v.copy() for k, v in agent.state_dict().items() if k.startswith("q_net.")}
    try:
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    finally:
        trainer.close()
    assert stats["num_collected_steps"] >= 200 and agent.updates > 0
    after = agent.state_dict()
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_check_agent_passes_it_in_both_backends(registered):
    pytest.importorskip("tensorflow")
    from marl_note.agents.checks import check_agent

    report = check_agent(NAME)
    assert report.backends == ("torch", "tf") and report.cases == ("Discrete",)
    assert "restore torch->tf" in report.checks and "restore tf->torch" in report.checks


def test_a_checkpoint_round_trips_torch_tf_torch_with_the_registry_classes(registered, tmp_path):
    pytest.importorskip("tensorflow")
    from marl_note.agents.checkpoints import restore

    torch_cls, tf_cls = registered.cls("torch"), registered.cls("tf")
    agent = torch_cls(*cartpole_spaces(), seed=0, **{k: v for k, v in SMALL.items() if k != "batch_size"})
    rng = np.random.default_rng(0)
    obs = rng.uniform(-0.05, 0.05, (64, 4)).astype(np.float32)
    agent.observe(Transitions(obs=obs, act=rng.integers(0, 2, 64), rew=np.ones(64, np.float32), next_obs=obs,
                              terminated=np.zeros(64, bool), truncated=np.zeros(64, bool),
                              stream=np.zeros(64, np.int64)))
    agent.update(16)
    assert agent.updates > 0
    state = agent.state_dict()
    in_tf = tf_cls.restore(agent.save(str(tmp_path / "torch")))
    assert type(in_tf) is tf_cls
    back = restore(in_tf.save(str(tmp_path / "tf")), backend="torch")
    assert type(back) is torch_cls
    for got in (in_tf.state_dict(), back.state_dict()):
        assert sorted(got) == sorted(state)
        for k in state:
            np.testing.assert_allclose(got[k], state[k], rtol=1e-6, err_msg=k)
    probe = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
    np.testing.assert_allclose(back.q_values(probe), agent.q_values(probe), rtol=1e-5, atol=1e-6)


@pytest.fixture
def no_leftovers():
    before = set(os.listdir("/dev/shm"))
    yield
    assert not multiprocessing.active_children()
    assert set(os.listdir("/dev/shm")) - before == set()


@pytest.mark.timeout(240)
def test_the_actor_pool_hosts_it_acting_in_numpy(registered, no_leftovers):
    from marl_note.contrib.pool import ActorPool
    from marl_note.trainers import DecentralizedTrainer

    source = ActorPool(actors=1, sync_every=1)
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=50,
                                   episodes_per_train=10, test_freq=10, episodes_per_test=1, batch_size=16, seed=0,
                                   source=source)
    agent = registered.cls("torch")(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                                    seed=0, **{k: v for k, v in SMALL.items() if k != "batch_size"})
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    pool = stats["pool"]
    assert pool["actors"] == 1 and agent.agent_steps == sum(pool["transitions_per_actor"]) > 0
    assert pool["actor_frameworks"] == []  # the actor acted with the registry's numpy core: no torch there
    assert agent.updates > 0 and source.pool is None


def run_cli(args, plugin_dir, plugins=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), ROOT]), "OMP_NUM_THREADS": "1"}
    env.pop("MARL_NOTE_PLUGINS", None)
    if plugins is not None:
        env["MARL_NOTE_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "marl_note", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_the_command_line_trains_it_when_a_plugin_module_registers_it(tmp_path):
    """A user's module named in MARL_NOTE_PLUGINS registers the algorithm; only that module is imported."""
    (tmp_path / "expected_sarsa_plugin.py").write_text(
        f"from marl_note.agents import registry\nfrom {__name__} import ENTRY\nregistry.register(ENTRY)\n")
    out = tmp_path / "run"
    args = ["train", "--env", "CartPole-v1", "--algo", NAME, "--episodes", "6", "--num-envs", "2",
            "--update-freq", "40", "--batch-size", "16", "--test-episodes", "1", "--eval-episodes", "0",
            "--agent-arg", "hidden_sizes=[8]", "--agent-arg", "learning_starts=16", "--out", str(out), "--quiet"]
    done = run_cli(args, tmp_path, plugins="expected_sarsa_plugin")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "last" / "agent_0" / "manifest.json").read_text())
    assert (manifest["algorithm"], manifest["backend"]) == ("ExpectedSarsa", "torch")
    assert json.loads((out / "marl_note_run.json").read_text())["algo"] == NAME

    refused = run_cli(args, tmp_path)  # without the plugin nothing registers it
    assert refused.returncode == 2 and f"invalid choice: '{NAME}'" in refused.stderr
    missing = run_cli(["train", "--help"], tmp_path, plugins="no_such_plugin_module, expected_sarsa_plugin")
    assert missing.returncode == 2
    assert "MARL_NOTE_PLUGINS names the module 'no_such_plugin_module', which cannot be imported" in missing.stderr
