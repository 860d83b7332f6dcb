"""Progress output when stderr is piped, and the warning for an update_freq that swallows the budget."""
import io
import warnings

import pytest

from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.progress import Progress
from tests.trainers.test_trainer import CountingLearner


def test_piped_progress_prints_few_plain_lines():
    out = io.StringIO()
    bar = Progress(1000, stream=out)
    for ep in range(1, 1001):
        bar.update(ep, loss=0.25, test_metric=None)
    bar.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert 20 <= len(lines) <= 21  # every 5% of the budget
    assert lines[-1].startswith("marl_note: 1000/1000 episodes (100%), loss=0.25")


def test_piped_progress_prints_by_time_too(monkeypatch):
    out = io.StringIO()
    bar = Progress(10**6, stream=out, every_seconds=0.0)
    bar.update(1)
    bar.update(2)
    assert len(out.getvalue().splitlines()) == 3  # the line at the start, then one per update
    bar.close()  # nothing new since the last line
    assert len(out.getvalue().splitlines()) == 3


def test_trainer_progress_with_stderr_piped(capfd):
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=20, test_freq=10,
                                   episodes_per_train=40, episodes_per_test=1, seed=0)
    agent = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    trainer.train([agent], learning_mask=[1], plot=False, progress=True)
    err = capfd.readouterr().err
    assert "\r" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("marl_note: ")]
    assert 2 <= len(lines) <= 22 and "/40 episodes" in lines[-1]


def test_update_freq_larger_than_the_budget_warns():
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=2000, test_freq=5,
                                   episodes_per_train=5, episodes_per_test=1, seed=0)
    agent = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    with pytest.warns(UserWarning, match="update_freq=2000.*only once"):
        trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert agent.update_calls == 1
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=20, test_freq=5,
                                   episodes_per_train=5, episodes_per_test=1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.train([agent], learning_mask=[1], plot=False, progress=False)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_progress_is_one_refreshed_line_against_the_env_step_budget():
    out = Terminal()
    bar = Progress(10**7, stream=out, env_steps=1000)
    bar.update(3, env_steps=500, loss=0.1)
    bar.close()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # redrawn with carriage returns, ended once
    assert "500/1000 env steps" in text.split("\r")[-1] and "env steps/s" in text.split("\r")[-1]
