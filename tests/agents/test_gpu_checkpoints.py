"""Checkpoints written on a GPU (tests/fixtures/gpu) restore on a machine without one.

The fixtures are CartPole DQN and PPO agents trained a few updates through the trainer with
``device="cuda"`` on an NVIDIA H100 (torch 2.11.0+cu130); ``expected_cuda.npz`` holds what they
computed there on a fixed batch of observations (greedy actions; DQN's Q-values through torch on
the GPU). Where this machine has no CUDA, ``restore`` without a device warns and builds the agent on
the CPU; with ``device="cpu"`` it does so silently; either way it acts as it did on the GPU.
"""
import warnings
from pathlib import Path

import numpy as np
import pytest

from marl_note.agents.checkpoints import restore

torch = pytest.importorskip("torch")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


@pytest.fixture(scope="module")
def expected():
    with np.load(FIXTURES / "expected_cuda.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without CUDA")
@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_gpu_checkpoint_restores_on_the_cpu_with_a_warning(name, expected):
    with pytest.warns(RuntimeWarning, match="saved on device 'cuda'.*no CUDA device: restoring on the CPU"):
        agent = restore(FIXTURES / f"{name}_torch_cuda.zip")
    assert agent.nets.device.type == "cpu"
    assert agent.updates == expected["updates"][["dqn", "ppo"].index(name)] > 0
    np.testing.assert_array_equal(agent.act(expected["obs"]), expected[name])
    if name == "dqn":  # numpy on the CPU against torch on the GPU
        np.testing.assert_allclose(agent.q_values(expected["obs"]), expected["dqn.q"], rtol=1e-5, atol=1e-5)


def test_a_device_given_to_restore_is_used_without_a_warning(expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent = restore(FIXTURES / "dqn_torch_cuda.zip", device="cpu", numpy_acting=False)
    assert agent.nets.device.type == "cpu" and agent.numpy_policy() is None
    np.testing.assert_allclose(agent.q_values(expected["obs"]), expected["dqn.q"], rtol=1e-5, atol=1e-5)


def test_a_cpu_checkpoint_keeps_its_device_silently(tmp_path):
    import gymnasium as gym

    from marl_note.agents.torch import DQN

    DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0).save(tmp_path / "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DQN.restore(tmp_path / "a").nets.device.type == "cpu"


def test_device_auto_takes_the_gpu_where_there_is_one(tmp_path):
    """``device="auto"`` (Stable-Baselines3's name) picks CUDA where torch sees it, the CPU otherwise,
    and a checkpoint of it restores the same way on either machine."""
    import gymnasium as gym

    from marl_note.agents.torch import DQN

    agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0, device="auto")
    assert agent.nets.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    agent.save(tmp_path / "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DQN.restore(tmp_path / "a").nets.device == agent.nets.device


def test_tf_device_auto():
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    from marl_note.agents.tf.common import tf_device

    assert tf_device("auto") == ("/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0")
    assert (tf_device("cpu"), tf_device("cuda:1")) == ("/CPU:0", "/GPU:1")
