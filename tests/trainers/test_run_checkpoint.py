import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from marl_note.agents.checkpoints import CheckpointError, read_checkpoint  # noqa: E402
from marl_note.agents.torch import DQN, PPO  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402
from marl_note.trainers.run_state import load_run  # noqa: E402
from tests.checkpoint_helpers import rewrite_checkpoint  # noqa: E402


def make(episodes):
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=50, test_freq=10,
                                   episodes_per_train=episodes, episodes_per_test=2, seed=0)
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0, learning_starts=64)
    return trainer, agent


def test_save_and_resume_a_whole_run(tmp_path):
    path = str(tmp_path / "run")
    trainer, agent = make(20)
    first = trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    assert {"loss", "eps", "q_mean", "batch_size", "train_reward"} <= set(trainer.run_state.series)  # plot series
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


def test_checkpoints_keep_the_files_beside_them(tmp_path):
    runs = tmp_path / "runs"
    trainer, agent = make(10)
    trainer.plot_path = str(runs / "reward.png")
    pytest.importorskip("matplotlib")
    trainer.train([agent], learning_mask=[1], progress=False, checkpoint_path=str(runs))
    (runs / "notes.txt").write_text("mine")
    plot = (runs / "reward.png").read_bytes()
    trainer2, again = make(20)
    trainer2.train([again], learning_mask=[1], plot=False, progress=False, checkpoint_path=str(runs),
                   resume_from=str(runs))
    assert (runs / "notes.txt").read_text() == "mine" and (runs / "reward.png").read_bytes() == plot
    from marl_note.agents.checkpoints import read_checkpoint
    assert read_checkpoint(runs)[0]["counters"]["episodes"] >= 20


def test_a_foreign_checkpoint_directory_is_refused_before_training(tmp_path):
    (tmp_path / "mine.txt").write_text("mine")
    trainer, agent = make(10)
    before = agent.state_dict()
    with pytest.raises(CheckpointError, match="holds no marl_note checkpoint"):
        trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=str(tmp_path))
    assert agent.agent_steps == 0 and all(np.array_equal(before[k], v) for k, v in agent.state_dict().items())
    assert os.listdir(tmp_path) == ["mine.txt"]


def test_a_failed_resume_changes_nothing(tmp_path):
    path = str(tmp_path / "run")
    trainer, agent = make(10)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    last = sorted(k for k in agent.state_dict())[-1]
    cases = {
        "text weights": (lambda a: a.update({f"agent0.{last}": np.full(np.shape(a[f"agent0.{last}"]), "x")}),
                         None, f"'{last}' has dtype"),
        "replay dtype": (lambda a: a.update({"replay0.rew": a["replay0.rew"].astype(np.float64)}), None,
                         r"replay contents do not fit .*'rew'.* dtype float64"),
        "replay size": (lambda a: a.update({"replay0.size": np.asarray(float(a["replay0.size"]))}), None,
                        r"replay contents do not fit .*'size'.* must be one integer"),
        "counter": (None, lambda m: m["counters"].update(episodes="ten"), "'episodes' must be an integer"),
        "history": (None, lambda m: m["counters"].update(history=[[1]]), "'history' is not a list"),
        "stray": (lambda a: a.update({"agent7.w": np.zeros(1)}), None, r"arrays of no agent of this run"),
    }
    fresh_trainer, fresh = make(20)
    fresh.observe(agent.replay.sample(8))  # a live agent with some state of its own
    before, replay_before = fresh.state_dict(), fresh.replay.state_dict()
    for case, (arrays_edit, manifest_edit, message) in cases.items():
        broken = str(tmp_path / case.replace(" ", "_"))
        import shutil
        shutil.copytree(path, broken)
        rewrite_checkpoint(broken, arrays_edit, manifest_edit)
        with pytest.raises(CheckpointError, match=message):
            fresh_trainer.train([fresh], learning_mask=[1], plot=False, progress=False, resume_from=broken)
        after, replay_after = fresh.state_dict(), fresh.replay.state_dict()
        assert sorted(after) == sorted(before) and all(after[k].tobytes() == before[k].tobytes() for k in before), case
        assert all(replay_after[k].tobytes() == replay_before[k].tobytes() for k in replay_before), case


def test_edited_counters_are_refused_before_anything_loads(tmp_path):
    path = str(tmp_path / "run")
    trainer, agent = make(20)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    counters = read_checkpoint(path)[0]["counters"]
    assert counters["history"] and counters["episodes"] < 100  # what the cases below edit
    cases = {
        "best NaN": (dict(best=float("nan")), r"counter 'best' must be a finite number, got nan"),
        "test metric inf": (dict(history=[[e, float("inf")] for e, _ in counters["history"]]),
                            r"'history metric' must be a finite number, got inf"),
        "unknown counter": (dict(bonus_episodes=5), r"unknown counters \['bonus_episodes'\]"),
        "episodes beyond": (dict(episodes=10**6), r"episodes=1000000 exceeds env_steps="),
        "episodes edited": (dict(episodes=counters["episodes"] + 30),
                            r"recent_returns holds \d+ episodes, but the last min\(episodes, 100\)"),
        "best not tested": (dict(best=counters["best"] + 1), r"but history's best test scored"),
        "untested best": (dict(history=[]), r"but there is no test in history"),
        "history order": (dict(history=counters["history"][::-1] + [[counters["episodes"] + 1, 0.0]]),
                          r"history's episode counts .* are not in order"),
        "next test": (dict(next_test=0), r"next_test=0 is not after the last test"),
        "returns width": (dict(recent_returns=[r + [0.0] for r in counters["recent_returns"]]),
                          r"recent_returns rows have \[2\] returns each, expected 1"),
    }
    fresh_trainer, fresh = make(40)
    before = fresh.state_dict()
    for case, (edit, message) in cases.items():
        broken = str(tmp_path / case.replace(" ", "_"))
        shutil.copytree(path, broken)
        rewrite_checkpoint(broken, edit_manifest=lambda m, edit=edit: m["counters"].update(edit))
        with pytest.raises(CheckpointError, match=message):
            fresh_trainer.train([fresh], learning_mask=[1], plot=False, progress=False, resume_from=broken)
        after = fresh.state_dict()
        assert all(after[k].tobytes() == before[k].tobytes() for k in before), case
    assert fresh.agent_steps == 0


def test_resuming_a_finished_run_says_that_nothing_is_left_to_train(tmp_path):
    path = str(tmp_path / "run")
    trainer, agent = make(10)
    first = trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    again, fresh = make(10)
    with pytest.warns(UserWarning, match=r"has already collected \d+ training episodes, the whole budget of "
                                         r"episodes_per_train=10: this train\(\) collects nothing more"):
        stats = again.train([fresh], learning_mask=[1], plot=False, progress=False, resume_from=path)
    assert stats["num_collected_episodes"] == first["num_collected_episodes"] and fresh.agent_steps == agent.agent_steps


def test_resume_refuses_agents_built_for_other_spaces(tmp_path):
    import gymnasium as gym

    path = str(tmp_path / "run")
    trainer, agent = make(10)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    spaces = read_checkpoint(path)[0]["agent_spaces"]
    assert [sorted(s) for s in spaces] == [["action_space", "observation_space"]]

    def scaled():  # CartPole with observations in [-1, 1]: the same shapes, other bounds
        env = gym.make("CartPole-v1")
        space = gym.spaces.Box(-1, 1, (4,), np.float32)
        return gym.wrappers.TransformObservation(env, lambda o: np.tanh(o).astype(np.float32), space)

    other = DecentralizedTrainer(scaled, num_train_envs=2, num_test_envs=2, update_freq=50, test_freq=10,
                                 episodes_per_train=20, episodes_per_test=2, seed=0)
    fresh = DQN(other.observation_space("agent_0"), other.action_space("agent_0"), seed=0, learning_starts=64)
    before = fresh.state_dict()
    with pytest.raises(CheckpointError, match=r"agent 0 \(DQN\): the checkpoint was saved for other spaces than "
                                              r"this agent's: observation_space: bounds \[-1.0, 1.0\], the "
                                              r"checkpoint has \[\[-4.8"):
        other.train([fresh], learning_mask=[1], plot=False, progress=False, resume_from=path)
    assert all(fresh.state_dict()[k].tobytes() == v.tobytes() for k, v in before.items())
    assert fresh.agent_steps == 0

    old = str(tmp_path / "old")  # a run checkpoint from before they recorded spaces: nothing to compare
    shutil.copytree(path, old)
    rewrite_checkpoint(old, edit_manifest=lambda m: m.pop("agent_spaces"))
    load_run(old, [fresh])
    assert fresh.agent_steps == agent.agent_steps
