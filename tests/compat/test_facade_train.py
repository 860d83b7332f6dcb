"""agent.train(...): the original arguments mapped onto DecentralizedTrainer, or refused before any work."""
import importlib
import importlib.util
import multiprocessing
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from marl_note.envs.goal_envs import PointReachEnv

torch = pytest.importorskip("torch")
from marl_note.compat.torch import DQN  # noqa: E402
from tests.user_agents import loss_only_rl  # noqa: E402

CARTPOLE = gym.make("CartPole-v1")


def dqn(**kwargs):
    return DQN(CARTPOLE.observation_space, CARTPOLE.action_space, hidden_sizes=(16,), learning_starts=32, seed=0,
               **kwargs)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(window_size=5), ValueError, "give pool_network=True, processes=N"),
    (dict(clearing_freq=5), ValueError, "give pool_network=True, processes=N"),
    (dict(pool_network=True, processes=2, clearing_freq=5), ValueError, "clearing_freq needs window_size_"),
    (dict(pool_network=True), ValueError, "give processes=N"),
    (dict(processes=0), ValueError, "processes must be a positive integer"),
    (dict(p=-1), ValueError, "number of progress reports"),
    (dict(callbacks="print"), TypeError, "list of callback objects"),
    (dict(jit_compile="yes"), TypeError, "jit_compile must be True, False or None"),
    (dict(num_envs=4), TypeError, "unexpected arguments \\['num_envs'\\]"),
    (dict(update_freq=0), ValueError, "update_freq must be a positive integer"),
])
def test_refused_train_arguments(kwargs, error, match):
    agent = dqn()
    with pytest.raises(error, match=match):
        agent.train(5, env="CartPole-v1", **kwargs)
    assert agent.agent_steps == 0


def test_train_needs_an_env_and_positive_episodes():
    agent = dqn()
    with pytest.raises(ValueError, match="needs an env"):
        agent.train(5)
    with pytest.raises(ValueError, match="episodes must be a positive integer"):
        agent.train(0, env="CartPole-v1")
    with pytest.raises(ValueError, match="observation space"):
        DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)).train(2, env="CartPole-v1", p=0)


def test_early_stopping_and_saving_attributes_become_the_named_callbacks(tmp_path):
    from marl_note.compat.facade import run_callbacks
    from marl_note.trainers import CheckpointManager, EarlyStopping

    agent = dqn().set(trial_count=10, criterion=200)
    agent.patience = 3
    (cb,) = run_callbacks(agent)
    assert isinstance(cb, EarlyStopping) and (cb.trial_count, cb.criterion, cb.patience) == (10, 200, 3)
    assert run_callbacks(dqn().set(trial_count=10)) == []  # trial_count alone only shapes the progress lines
    plain = dqn()
    plain.path, plain.save_freq, plain.max_save_files = str(tmp_path / "model"), 10, 2
    (cb,) = run_callbacks(plain)
    assert isinstance(cb, CheckpointManager) and (cb.save_freq, cb.max_save_files) == (10, 2)
    stray = dqn()
    stray.save_best_only = True
    with pytest.raises(ValueError, match="agent.save_best_only is set but agent.path is not"):
        stray.train(2, env="CartPole-v1")


def test_trainer_is_reused_for_the_same_env_and_rebuilt_for_another(capsys):
    agent = dqn()
    stats = agent.train(4, env="CartPole-v1", p=0, seed=0)
    trainer = agent._facade[2]
    assert stats["num_collected_episodes"] >= 4 and agent.env == "CartPole-v1"
    agent.train(3, p=0)  # the env of the last call
    assert agent._facade[2] is trainer and trainer.episodes_per_train == 3
    assert capsys.readouterr().out == ""  # p=0: silent
    agent.train(2, env=gym.make("CartPole-v1"), p=0)  # an env instance works too (one copy per slot)
    assert agent._facade[2] is not trainer


def test_progress_reports_and_user_callbacks(capsys):
    class CountTests:
        tests = 0

        def on_test_end(self, trainer, result, episodes):
            self.tests += 1

    count = CountTests()
    agent = dqn().set(trial_count=3, batch=16)
    agent.train(8, env="CartPole-v1", p=2, callbacks=[count], test_freq=4, seed=0)
    lines = capsys.readouterr().out.splitlines()
    reports = [int(ln.split()[1]) for ln in lines if ln.startswith("episode:")]
    assert len(reports) == 2 and 4 <= reports[0] < 8 <= reports[1]  # p=2: two reports over the run
    assert all("average reward" in ln and "loss" in ln for ln in lines[:2])
    assert lines[-1].startswith("time:") and count.tests == 2
    assert agent._facade[2].batch_size == 16


def test_goal_env_instance_without_a_spec_and_her_bound_at_train():
    env = PointReachEnv()
    from marl_note.compat.torch import DDPG
    from marl_note.replay import HERReplayBuffer

    agent = DDPG(env.observation_space, env.action_space, hidden_sizes=(8,), learning_starts=16, seed=0)
    agent.set(HER=True, batch=16)
    agent.train(2, env=env, p=0, seed=0)
    assert isinstance(agent.replay, HERReplayBuffer) and len(agent.replay) == 100 and agent.updates > 0


def test_jit_compile_is_the_agents_compile_option():
    from marl_note.compat.train_bindings import set_compile

    tf_dqn = importlib.import_module("marl_note.compat.tf").DQN if importlib.util.find_spec("tensorflow") else None
    if tf_dqn is not None:
        agent = tf_dqn(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
        q = agent.q_values(np.ones((1, 3)))
        set_compile(agent, True)
        assert agent.compile and agent.config["compile"] and np.array_equal(agent.q_values(np.ones((1, 3))), q)

    mine = loss_only_rl(4)(CARTPOLE.observation_space, CARTPOLE.action_space)
    with pytest.raises(ValueError, match="compile them yourself"):
        mine.train(2, env="CartPole-v1", jit_compile=True)
    set_compile(mine, False)  # nothing to turn off


def test_self_play_in_every_seat_of_a_two_player_game():
    tictactoe_v3 = pytest.importorskip("pettingzoo.classic.tictactoe_v3")
    probe = tictactoe_v3.env()
    probe.reset()
    agent = DQN(probe.observation_space("player_1")["observation"], probe.action_space("player_1"),
                hidden_sizes=(16,), learning_starts=16, seed=0)
    stats = agent.train(6, env=tictactoe_v3, p=0, seed=0)
    assert stats["num_collected_episodes"] >= 6 and agent.agent_steps == stats["num_collected_agent_steps"]


def test_pool_network_runs_env_workers_and_cleans_up():
    agent = dqn()
    stats = agent.train(4, env="CartPole-v1", pool_network=True, processes=2, p=0, seed=0)
    trainer = agent._facade[2]
    assert trainer.processes == 2 and trainer.num_train_envs == 2 and stats["num_collected_episodes"] >= 4
    assert not multiprocessing.active_children()


def test_importing_an_agent_backend_does_not_import_the_trainers():
    code = ("import sys, marl_note.compat.torch; "
            "bad = sorted(m for m in sys.modules if m.startswith('marl_note.trainers')); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
