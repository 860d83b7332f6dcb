"""The progress display counts against the budget that ends the run (issue #33 item 5): a CLI run with
``--env-steps`` shows "of N env steps" rather than the episode cap, a ``--minutes`` budget shows the time
left, and progress appears before the first chunk ends (refreshed during collection, not only at chunk ends).
"""
import re
import sys

import pytest

from marl_note.cli import main
from marl_note.trainers import Budget, DecentralizedTrainer, progress

pytest.importorskip("torch")


def progress_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("marl_note: ")]


def test_an_env_step_budget_is_what_progress_counts(tmp_path, capsys):
    assert main(["train", "--env", "CartPole-v1", "--algo", "dqn", "--env-steps", "400", "--num-envs", "2",
                 "--eval-episodes", "0", "--out", str(tmp_path / "run")]) == 0
    lines = progress_lines(capsys.readouterr().err)
    assert lines and all("/400 env steps (" in line for line in lines), lines
    assert not any("episodes (" in line for line in lines)  # not the episode cap
    assert re.search(r"400/400 env steps \(100%\), \d+ env steps/s", lines[-1]), lines[-1]


def test_a_wall_time_budget_shows_the_time_left(tmp_path, capsys):
    assert main(["train", "--env", "CartPole-v1", "--algo", "dqn", "--minutes", "0.03", "--num-envs", "2",
                 "--eval-episodes", "0", "--out", str(tmp_path / "run")]) == 0
    lines = progress_lines(capsys.readouterr().err)
    assert re.search(r"^marl_note: 0\.0/0\.03 min \(0%\), \d+ env steps/s, \d+ s left", lines[0]), lines[0]


class Marker:
    def on_collect_end(self, trainer, stats, episodes):
        sys.stderr.write("CHUNK END\n")


def test_progress_shows_before_the_first_chunk_ends(monkeypatch, capsys):
    from marl_note.agents.torch import DQN

    monkeypatch.setattr(progress, "TICK_SECONDS", 0.0, raising=False)  # refresh at every step: no dependence on timing
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=10**6,
                                   test_freq=10**6, episodes_per_test=1, seed=0)
    try:
        dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=[8],
                  learning_starts=10**8, seed=0)
        trainer.train([dqn], learning_mask=[1], plot=False, progress=True,
                      callbacks=[Budget(env_steps=1000), Marker()])
    finally:
        trainer.close()
    text = capsys.readouterr().err
    before = progress_lines(text.split("CHUNK END")[0])
    # the start line, then lines counted inside the (single, budget-cut) chunk of a million env steps
    assert before[0].startswith("marl_note: 0/1000 env steps (0%)"), before
    assert any(re.match(r"marl_note: [1-9]\d*/1000 env steps", line) for line in before[1:]), before


def test_a_library_run_without_a_budget_counts_episodes(capsys):
    from marl_note.agents.torch import DQN

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=1, num_test_envs=1, update_freq=50,
                                   test_freq=10**6, episodes_per_train=3, episodes_per_test=1, seed=0)
    try:
        dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=[8],
                  learning_starts=10**8, seed=0)
        trainer.train([dqn], learning_mask=[1], plot=False, progress=True)
    finally:
        trainer.close()
    lines = progress_lines(capsys.readouterr().err)
    assert lines and all("/3 episodes (" in line for line in lines), lines
    assert "env steps/s" not in lines[-1]
