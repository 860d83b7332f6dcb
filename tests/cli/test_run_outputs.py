"""What ``train --out DIR`` leaves: the best test's weights and the last ones, a plot titled with env, algorithm
and seed, and nothing of an earlier run (each failed on 705780f: one set of weights, the last, beside the record;
plots titled "marl_note"; an earlier run's metric.png kept beside a new run's)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from marl_note.cli import main

pytest.importorskip("torch")

CARTPOLE = ["train", "--env", "CartPole-v1", "--algo", "dqn", "--episodes", "12", "--num-envs", "2",
            "--update-freq", "16", "--test-freq", "4", "--test-episodes", "2", "--eval-episodes", "0", "--quiet",
            "--agent-arg", "learning_starts=8", "--agent-arg", "hidden_sizes=[8]", "--seed", "3"]


def _png_title(path) -> str | None:
    from PIL import Image

    with Image.open(path) as image:
        return image.text.get("Title")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short CartPole run with --plot (its directory and what train printed), shared by the tests."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("runs") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([*CARTPOLE, "--out", str(out), "--plot"]) == 0
    return out, printed.getvalue()


@pytest.fixture
def cartpole_run(trained, tmp_path):
    """A copy of the shared run, for a test that changes it."""
    out = tmp_path / "run"
    shutil.copytree(trained[0], out)
    return out, trained[1]


def test_train_saves_the_best_and_the_last_weights_and_says_which_is_which(trained):
    out, text = trained
    assert sorted(os.listdir(out)) == ["best", "last", "marl_note_run.json", "metric.png"]
    record = json.loads((out / "marl_note_run.json").read_text())
    assert record["checkpoints"] == {"best": "best", "last": "last"}
    assert 4 <= record["best_episode"] <= record["episodes"]
    for which in ("best", "last"):
        assert json.loads((out / which / "agent_0" / "manifest.json").read_text())["algorithm"] == "DQN"
    assert f"the last weights in {out / 'last'}" in text
    assert (f"the best test's weights (test metric {record['best_test_metric']:.3f} after {record['best_episode']} "
            f"episodes) in {out / 'best'}") in text


def test_the_plot_is_titled_with_env_algorithm_and_seed(trained):
    out, text = trained
    assert f"plot: {out / 'metric.png'}" in text
    assert _png_title(out / "metric.png") == "CartPole-v1: dqn (torch), seed 3"


def test_evaluate_uses_the_best_weights_unless_asked_for_the_last(trained, capsys):
    out, _ = trained
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2", "--num-envs", "1"]) == 0
    assert f"{out}: the best weights ({out / 'best'})" in capsys.readouterr().out
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2", "--num-envs", "1", "--which", "last"]) == 0
    assert f"{out}: the last weights ({out / 'last'})" in capsys.readouterr().out
    assert main(["evaluate", "--checkpoint", str(out / "last" / "agent_0"), "--env", "CartPole-v1",
                 "--which", "best"]) == 2
    assert "is a single agent checkpoint (one set of weights)" in capsys.readouterr().err


def test_a_new_run_in_the_same_directory_leaves_nothing_of_the_earlier_one(cartpole_run, capsys):
    out, _ = cartpole_run
    (out / "notes.txt").write_text("mine")  # not the run's: kept
    assert main([*CARTPOLE, "--out", str(out)]) == 0  # no --plot this time
    assert sorted(os.listdir(out)) == ["best", "last", "marl_note_run.json", "notes.txt"]
    assert json.loads((out / "marl_note_run.json").read_text())["seed"] == 3


def test_a_run_directory_of_the_older_layout_still_loads_and_is_replaced_whole(cartpole_run, capsys):
    out, _ = cartpole_run
    shutil.move(out / "last" / "agent_0", out / "agent_0")  # as 705780f wrote it: the checkpoint beside the record
    shutil.rmtree(out / "last")
    shutil.rmtree(out / "best")
    record = json.loads((out / "marl_note_run.json").read_text())
    del record["checkpoints"]
    (out / "marl_note_run.json").write_text(json.dumps(record))
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2", "--num-envs", "1"]) == 0
    assert main(["evaluate", "--checkpoint", str(out), "--which", "last"]) == 2
    assert "kept one set of weights (the last); leave --which out" in capsys.readouterr().err
    assert main([*CARTPOLE, "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["best", "last", "marl_note_run.json"]  # agent_0 and metric.png are gone


def test_without_a_telling_test_metric_the_last_weights_play_and_best_is_refused(tmp_path, capsys):
    out = tmp_path / "ttt"
    assert main(["train", "--env", "tictactoe_v3", "--algo", "dqn", "--episodes", "4", "--num-envs", "2",
                 "--test-episodes", "2", "--eval-episodes", "0", "--quiet", "--agent-arg", "hidden_sizes=[8]",
                 "--out", str(out)]) == 0  # independent agents: their test is a game against each other
    assert "no best weights" in capsys.readouterr().out
    assert json.loads((out / "marl_note_run.json").read_text())["checkpoints"] == {"best": None, "last": "last"}
    assert sorted(os.listdir(out)) == ["last", "marl_note_run.json"]
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2", "--num-envs", "1"]) == 0
    text = capsys.readouterr().out
    assert f"{out}: the last weights" in text and "the run saved no best weights" in text
    assert main(["evaluate", "--checkpoint", str(out), "--which", "best"]) == 2
    assert "has no best weights" in capsys.readouterr().err
