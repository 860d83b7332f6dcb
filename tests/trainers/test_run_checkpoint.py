import numpy as np
import pytest

torch = pytest.importorskip("torch")
from marl_note.agents.checkpoint import CheckpointError  # noqa: E402
from marl_note.agents.torch import DQN, PPO  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402


def make(episodes):
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=50, test_freq=10,
                                   episodes_per_train=episodes, episodes_per_test=2, seed=0)
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0, learning_starts=64)
    return trainer, agent


def test_save_and_resume_a_whole_run(tmp_path):
    path = str(tmp_path / "run")
    trainer, agent = make(20)
    first = trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    q_saved = agent.q_values(obs)

    trainer2, fresh = make(40)
    assert not np.allclose(fresh.q_values(obs), q_saved)
    stats = trainer2.train([fresh], learning_mask=[1], plot=False, progress=False, resume_from=path)
    # counters and history continue from the checkpoint
    assert stats["num_collected_episodes"] >= 40
    assert stats["test_history"][: len(first["test_history"])] == first["test_history"]
    assert stats["num_collected_steps"] > first["num_collected_steps"]
    assert stats["num_gradient_steps"] > first["num_gradient_steps"]
    assert fresh.agent_steps > agent.agent_steps and len(fresh.replay) > len(agent.replay)

    # loading alone restores the weights, replay and counters exactly
    trainer3, other = make(20)
    from marl_note.trainers.run_state import load_run

    state = load_run(path, [other])
    assert np.allclose(other.q_values(obs), q_saved) and len(other.replay) == len(agent.replay)
    assert state.episodes == first["num_collected_episodes"] and other.updates == agent.updates


def test_resume_with_other_agents_fails_before_touching_them(tmp_path):
    path = str(tmp_path / "run.zip")
    trainer, agent = make(10)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    wrong = PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
    trainer2, _ = make(20)
    with pytest.raises(CheckpointError, match="holds agents \\['DQN'\\], but this run has \\['PPO'\\]"):
        trainer2.train([wrong], learning_mask=[1], plot=False, progress=False, resume_from=path)
    small = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(8,), seed=0)
    before = small.state_dict()
    with pytest.raises(CheckpointError, match="has shape"):
        trainer2.train([small], learning_mask=[1], plot=False, progress=False, resume_from=path)
    assert all(np.array_equal(before[k], v) for k, v in small.state_dict().items())
    with pytest.raises(RuntimeError, match="no run to checkpoint"):
        make(5)[0].save_checkpoint(str(tmp_path / "x"))
