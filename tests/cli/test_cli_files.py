"""Files the command line reads are data: a run record or a recipe never leads to code or to a path outside it.

Each test failed on a6e0003: a run record naming ``../other/agent`` was evaluated, a recipe's
``torso = "builtins:print"`` was imported and called, and a FIFO recipe or run record hung.
"""
import json
import os

import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.cli import main
from marl_note.cli.zoo import RecipeError, load_recipe
from tests.cli.test_zoo import GOOD


def _error(capsys, *args):
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def _run_naming(tmp_path, name):
    """A run directory whose record names ``name`` as the checkpoint of both seats, and a real agent at ../other."""
    from marl_note.agents.torch import DQN
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=1, num_test_envs=1)
    DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), hidden_sizes=(8,)).save(
        tmp_path / "other" / "agent")
    run = tmp_path / "run"
    run.mkdir()
    (run / "marl_note_run.json").write_text(json.dumps({
        "format": "marl_note.cli-run/1", "env": "tictactoe_v3", "env_kwargs": {}, "algo": "dqn",
        "backend": "torch", "seats": {"player_1": name, "player_2": name}}))
    return run


@pytest.mark.parametrize("name", ["../other/agent", os.path.abspath("/tmp"), "..", "a/../../other/agent"])
def test_a_run_record_naming_a_path_outside_its_directory_is_refused(tmp_path, capsys, name):
    pytest.importorskip("torch")
    run = _run_naming(tmp_path, name)
    err = _error(capsys, "evaluate", "--checkpoint", str(run), "--episodes", "2")
    assert "not a plain entry of the run directory" in err, err


def test_a_run_record_naming_a_link_out_of_its_directory_is_refused(tmp_path, capsys):
    pytest.importorskip("torch")
    run = _run_naming(tmp_path, "agent")
    os.symlink(tmp_path / "other" / "agent", run / "agent")
    err = _error(capsys, "evaluate", "--checkpoint", str(run), "--episodes", "2")
    assert "resolves outside the run directory" in err, err


def test_a_run_record_that_is_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "marl_note_run.json")
    err = _error(capsys, "evaluate", "--checkpoint", str(run), "--episodes", "2")
    assert "FIFO" in err, err


@pytest.mark.parametrize("torso", ["builtins:print", "os:system"])
def test_a_recipe_never_names_code(tmp_path, torso):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace("lr = 0.001", f'lr = 0.001\ntorso = "{torso}"'))
    with pytest.raises(RecipeError, match=r"\[agent\] torso must be one of auto, mlp, conv, got .*names no code"):
        load_recipe(path)
    path.write_text(GOOD.replace("lr = 0.001", 'lr = 0.001\ntorso = "mlp"'))
    assert load_recipe(path).agent["torso"] == "mlp"


def test_a_recipe_that_is_a_fifo_or_a_device_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")
    with pytest.raises(RecipeError, match="is a FIFO, not a regular file"):
        load_recipe(tmp_path / "fifo.toml")
    with pytest.raises(RecipeError, match="is a character device, not a regular file"):
        load_recipe("/dev/zero")
