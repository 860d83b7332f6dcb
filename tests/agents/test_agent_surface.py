"""An agent's public surface stays small: the noise-scale measurement sits behind ``agent.noise_scale``,
the checkpoint size bound is a private hook, and the original names live in ``marl_note.compat``."""
import ast
import importlib
import pathlib

import gymnasium as gym
import numpy as np
import pytest

import marl_note
from marl_note.agents.base import NoiseScaled, NoiseScaleMeter, Tunable
from marl_note.agents.noise_scale import NoiseScaleProbe, ReplaySignal

OLD_NOISE_NAMES = ("fold_replica_noise", "grad_sq_norm", "gradient_noise_scale", "measure_noise_scale",
                   "noise_batch", "noise_seconds")


def public_methods(cls):
    return sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n)))


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_dqn_has_at_most_22_public_methods(backend):
    """21 after issue 29; policy_probs (the ActionProbabilities contract of issue 32) is the 22nd."""
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    DQN = importlib.import_module(f"marl_note.agents.{backend}").DQN
    names = public_methods(DQN)
    assert len(names) <= 22, names
    assert not set(names) & {*OLD_NOISE_NAMES, "min_state_size", "load", "arrays"}


@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize("algo", ["DQN", "PPO", "DDPG", "SAC", "MADDPG"])
def test_every_algorithm_measures_its_noise_scale_through_one_object(backend, algo):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    cls = getattr(importlib.import_module(f"marl_note.agents.{backend}"), algo)
    assert not set(public_methods(cls)) & set(OLD_NOISE_NAMES)
    box, disc = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
    if algo == "MADDPG":
        act = gym.spaces.Box(-1, 1, (1,), np.float32)
        agent = cls({"a": box, "b": box}, {"a": act, "b": act}, hidden_sizes=(4,), seed=0)
    else:
        agent = cls(box, disc if algo in ("DQN", "PPO") else gym.spaces.Box(-1, 1, (1,), np.float32),
                    hidden_sizes=(4,), seed=0)
    probe = agent.noise_scale
    assert isinstance(agent, NoiseScaled) and isinstance(agent, Tunable)
    assert isinstance(probe, NoiseScaleProbe) and isinstance(probe, NoiseScaleMeter)
    assert agent.noise_scale is probe  # made once, kept
    assert not probe.ready() and probe.rows() == 0 and probe.measure(2, 4, np.random.default_rng(0)) is None
    assert isinstance(probe.replay_signal(), ReplaySignal)
    assert "noise_scale" not in agent.state_dict() and probe.count == 0


def test_the_original_load_alias_is_in_compat_only():
    pytest.importorskip("torch")
    from marl_note.agents.torch import DQN
    from marl_note.compat.torch import DQN as CompatDQN

    assert not hasattr(DQN, "load") and callable(CompatDQN.load)


def test_a_compat_agent_loads_by_the_original_name(tmp_path):
    pytest.importorskip("torch")
    from marl_note.compat.torch import DQN

    agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
    again = DQN.load(agent.save(str(tmp_path / "dqn.zip")))
    obs = np.ones((2, 3), np.float32)
    assert type(again) is DQN and (again.act(obs) == agent.act(obs)).all()


def test_the_adaptive_callback_probes_no_attribute():
    """contrib/adaptive reads agents through the declared Protocols: no getattr/hasattr at all."""
    root = pathlib.Path(marl_note.__file__).parent / "contrib" / "adaptive"
    probes = [f"{path.name}:{node.lineno}" for path in sorted(root.glob("*.py"))
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr",
                                                                                                       "hasattr")]
    assert probes == []
