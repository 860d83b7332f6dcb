"""A user-supplied torso (a torch.nn.Module / Keras layer factory) trains, saves and restores
without pickle: its weights go through the numpy state; the checkpoint records the factory's name,
and restore takes the factory from the caller (never importing what the file names)."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import tf as tf_agents
from marl_note.agents import torch as torch_agents
from marl_note.agents.checkpoints import CheckpointError, restore
from marl_note.types import Transitions
from tests.agents.user_torsos import keras_torso, torch_torso

BOARD = gym.spaces.Box(0, 1, (6, 7, 2), np.int8)
CASES = {"torch": (torch_agents, torch_torso), "tf": (tf_agents, keras_torso)}


@pytest.mark.parametrize("backend", CASES)
def test_user_torso_trains_and_restores_from_its_import_path(backend, tmp_path):
    mod, factory = CASES[backend]
    agent = mod.DQN(BOARD, gym.spaces.Discrete(7), torso=factory, hidden_sizes=(8,), learning_starts=8,
                    update_steps=2, seed=0)
    assert agent.numpy_policy() is None  # a user torso acts in the framework
    assert any(".user." in k for k in agent.state_dict())
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 2, (16, 6, 7, 2)).astype(np.int8)
    before = agent.q_values(obs)
    agent.observe(Transitions(obs=obs, act=rng.integers(0, 7, 16), rew=rng.normal(size=16), next_obs=obs[::-1],
                              terminated=np.zeros(16, bool), truncated=np.zeros(16, bool)))
    assert agent.update(batch_size=8)["gradient_steps"] == 2
    assert not np.allclose(agent.q_values(obs), before)
    path = agent.save(str(tmp_path / "agent"))
    with pytest.raises(CheckpointError, match=r"pass it to restore: restore\(path, torso="):
        restore(path)  # a checkpoint names its torso but never imports it: the caller passes the code
    again = restore(path, torso=factory)
    assert again.cfg.torso == f"tests.agents.user_torsos:{factory.__name__}"
    np.testing.assert_allclose(again.q_values(obs), agent.q_values(obs), rtol=1e-6, atol=1e-6)
    again.update(batch_size=8)  # optimiser slots of the torso came back too


def test_a_lambda_or_local_torso_is_refused_at_construction():
    with pytest.raises(ValueError, match="cannot be imported again when a checkpoint is restored"):
        torch_agents.DQN(BOARD, gym.spaces.Discrete(7), torso=lambda shape: None)

    def local(shape):
        return torch_torso(shape)

    with pytest.raises(ValueError, match="pass a function defined at the top level"):
        torch_agents.DQN(BOARD, gym.spaces.Discrete(7), torso=local)
    with pytest.raises(ValueError, match="cannot be imported"):
        torch_agents.DQN(BOARD, gym.spaces.Discrete(7), torso="tests.agents.user_torsos:missing")
    with pytest.raises(ValueError, match="torso must be one of"):
        torch_agents.PPO(BOARD, gym.spaces.Discrete(7), torso=torch_torso)
