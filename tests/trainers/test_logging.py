"""TensorBoard and CSV logging callbacks: written by real training runs, read back with their own readers."""
import csv
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.logging import CSV_COLUMNS, CSVLogger, TensorBoard
from tests.trainers.test_trainer import CountingLearner

ROOT = Path(__file__).resolve().parents[2]


class LossLearner(CountingLearner):
    """Reports a loss that halves with each update, so the logged values can be checked."""

    def update(self, batch_size):
        super().update(batch_size)
        return {"gradient_steps": 1, "loss": 1.0 / 2 ** self.update_calls, "td_errors": np.zeros(3)}


def read_events(log_dir):
    """Every scalar in ``log_dir``, read with TensorBoard's own EventAccumulator: {tag: [(step, value)]}."""
    # TensorBoard's reader imports TensorFlow for file access unless told to use its own stub (seconds)
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class StepsAtTest:
    def __init__(self):
        self.steps = []

    def on_test_end(self, trainer, result, episodes):
        self.steps.append(trainer.run_state.env_steps)


def test_tensorboard_scalars_per_update_and_per_test_read_back_with_tensorboard(tmp_path):
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=40, test_freq=3,
                                   episodes_per_train=8, episodes_per_test=2, seed=0)
    learner = LossLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    steps = StepsAtTest()
    try:
        stats = trainer.train([learner], learning_mask=[1], plot=False, progress=False,
                              callbacks=[TensorBoard(tmp_path / "tb"), steps])
    finally:
        trainer.close()
    assert Path(stats["tensorboard_path"]).parent == tmp_path / "tb"
    scalars = read_events(tmp_path / "tb")
    assert {"update/loss", "update/gradient_steps", "train/reward", "train/episode_length", "test/reward",
            "test/reward_std", "test/mean_num_steps"} <= set(scalars)
    assert not any("td_errors" in tag or "num_collected" in tag for tag in scalars)  # only numbers, no test counters
    n = learner.update_calls
    assert [s for s, _ in scalars["update/loss"]] == [40 * (k + 1) for k in range(n)]  # step: env steps
    np.testing.assert_allclose([v for _, v in scalars["update/loss"]], [1.0 / 2 ** (k + 1) for k in range(n)])
    assert [s for s, _ in scalars["test/reward"]] == steps.steps
    np.testing.assert_allclose([v for _, v in scalars["test/reward"]], [m for _, m in stats["test_history"]],
                               rtol=1e-6)
    # CartPole pays 1 per step, so the mean training reward of a chunk is its mean episode length
    np.testing.assert_allclose([v for _, v in scalars["train/reward"]], [v for _, v in scalars["train/episode_length"]])


def test_tensorboard_writes_per_seat_test_results_of_a_self_play_run(tmp_path):
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, update_freq=20, test_freq=4,
                                   episodes_per_train=8, episodes_per_test=4, seed=0)
    learner = LossLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    try:
        stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                              callbacks=[TensorBoard(tmp_path)])
    finally:
        trainer.close()
    assert stats["tested_against_baseline"]
    scalars = read_events(tmp_path)
    for seat in ("player_1", "player_2"):
        for key in ("win", "draw", "loss", "mean_return"):
            assert len(scalars[f"test/{seat}/{key}"]) == len(stats["test_history"])
    last = stats["last_test_per_seat"]["player_1"]
    assert scalars["test/player_1/win"][-1][1] == pytest.approx(last["win"])


def test_tensorboard_writes_without_importing_tensorflow_or_torch(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from marl_note.trainers import DecentralizedTrainer, TensorBoard
        from tests.trainers.test_logging import LossLearner
        trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=40,
                                       test_freq=2, episodes_per_train=4, episodes_per_test=1, seed=0)
        learner = LossLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
        trainer.train([learner], learning_mask=[1], plot=False, progress=False,
                      callbacks=[TensorBoard({str(tmp_path)!r})])
        trainer.close()
        frameworks = sorted({{m.split(".")[0] for m in sys.modules}} & {{"tensorflow", "torch", "keras"}})
        print("frameworks:", frameworks)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "frameworks: []" in done.stdout
    assert list(tmp_path.glob("events.out.tfevents.*"))


def test_tensorboard_without_the_package_names_the_extra(monkeypatch, tmp_path):
    for name in ("tensorboard", "tensorboard.compat.proto", "tensorboard.summary.writer.record_writer"):
        monkeypatch.setitem(sys.modules, name, None)  # what an environment without it looks like to import
    with pytest.raises(ImportError, match=r"pip install 'marl_note\[tensorboard\]'"):
        TensorBoard(tmp_path)


def test_tensorboard_refuses_a_log_dir_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("mine")
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        TensorBoard(tmp_path / "file")
    with pytest.raises(TypeError, match="log_dir must be a path"):
        TensorBoard(3)


# ---------------------------------------------------------------------------- CSVLogger
def csv_run(logger, episodes=6, **kw):
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=40, test_freq=2,
                                   episodes_per_train=episodes, episodes_per_test=2, seed=0, **kw)
    learner = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    try:
        return trainer.train([learner], learning_mask=[1], plot=False, progress=False, callbacks=[logger])
    finally:
        trainer.close()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_logger_writes_one_row_per_test(tmp_path):
    path = tmp_path / "sub" / "tests.csv"
    logger = CSVLogger(path)
    stats = csv_run(logger)
    rows = read_csv(path)
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(int(r["episodes"]), float(r["metric"])) for r in rows] == stats["test_history"]
    assert int(rows[-1]["env_steps"]) == stats["num_collected_steps"]
    assert int(rows[-1]["gradient_steps"]) == stats["num_gradient_steps"]
    assert float(rows[-1]["best_metric"]) == stats["best_reward"]
    assert all(float(r["mean_num_steps"]) > 0 and float(r["reward_std"]) >= 0 for r in rows)
    # a second train() with the same logger goes on in the file it wrote
    more = csv_run(logger, episodes=4)
    assert len(read_csv(path)) == len(rows) + len(more["test_history"])


def test_csv_logger_never_overwrites_a_file_it_did_not_write(tmp_path):
    path = tmp_path / "tests.csv"
    path.write_text("my notes\n")
    with pytest.raises(FileExistsError, match="already exists; pass append=True .* or overwrite=True"):
        CSVLogger(path)
    with pytest.raises(ValueError, match=r"its columns are \['my notes'\]"):
        CSVLogger(path, append=True)
    assert path.read_text() == "my notes\n"
    with pytest.raises(ValueError, match="contradict"):
        CSVLogger(path, append=True, overwrite=True)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        CSVLogger(tmp_path)
    # a file that appears between making the logger and training is refused too, untouched
    late = tmp_path / "late.csv"
    logger = CSVLogger(late)
    late.write_text("written meanwhile\n")
    with pytest.raises(FileExistsError, match="already exists"):
        csv_run(logger)
    assert late.read_text() == "written meanwhile\n"
    # overwrite=True replaces; append=True adds rows after a file of the same columns
    stats = csv_run(CSVLogger(path, overwrite=True))
    assert len(read_csv(path)) == len(stats["test_history"])
    more = csv_run(CSVLogger(path, append=True), episodes=4)
    assert len(read_csv(path)) == len(stats["test_history"]) + len(more["test_history"])
