"""Absurd budgets, counts and seeds are refused by the command line in one line (exit status 2) before training.

Every refusal here is checked in this process through ``main``: one line on stderr naming the
flag or the recipe key, nothing written to the working directory. The memory checks (how many
envs, how large a network or buffer fits) compare with a fixed available memory, so that they
refuse the same on any machine.
"""
import io
import os

import pytest

from marl_note.cli import main
from marl_note.cli.play import ConnectFour, TicTacToe, play_game
from marl_note.replay import memory

TTT = ["train", "--env", "tictactoe_v3", "--algo", "dqn"]
CARTPOLE_RECIPE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                               "marl_note", "cli", "recipes", "CartPole-v1.toml")


@pytest.fixture
def eight_gb(monkeypatch, tmp_path):
    """8 GB of available memory, whatever the machine has; the working directory an empty temporary one."""
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 10**9)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert os.listdir(tmp_path) == [] or all(name.endswith(".toml") for name in os.listdir(tmp_path))


def refused(capsys, *args: str) -> str:
    """The one-line error of a refused command (exit status 2)."""
    assert main(list(args)) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and err.startswith("marl_note "), err
    assert "training" not in captured.out, captured.out  # refused before training started
    return err


@pytest.mark.parametrize("args, message", [
    ([*TTT, "--minutes", "-1"], "--minutes must be a positive finite number (minutes of training"),
    ([*TTT, "--minutes", "nan"], "--minutes must be a number (minutes of training, at most a year), got nan"),
    ([*TTT, "--minutes", "inf"], "--minutes must be a positive finite number (minutes of training"),
    ([*TTT, "--minutes", "1e9"], "--minutes must be at most 525,600"),
    ([*TTT, "--seed", str(2**70)], f"--seed must be at most 4,294,967,295, got {2**70}"),
    ([*TTT, "--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    ([*TTT, "--episodes", str(2**80)], f"--episodes must be at most 1,000,000,000,000, got {2**80}"),
    ([*TTT, "--env-steps", "1" + "0" * 13], "--env-steps must be at most 1,000,000,000,000"),
    ([*TTT, "--eval-episodes", "1" + "0" * 13], "--eval-episodes must be at most 1,000,000,000,000"),
    ([*TTT, "--stop-reward", "nan"], "--stop-reward must be a finite number"),
    (["evaluate", "--checkpoint", "no/such/dir", "--seed", str(2**70)], "--seed must be at most 4,294,967,295"),
    (["evaluate", "--checkpoint", "no/such/dir", "--episodes", str(2**80)], "--episodes must be at most"),
    (["play", "--checkpoint", "no/such/dir", "--seed", str(2**70)], "--seed must be at most 4,294,967,295"),
    (["play", "--checkpoint", "no/such/dir", "--games", str(2**80)], "--games must be at most"),
], ids=lambda v: " ".join(v[-2:]) if isinstance(v, list) else None)
def test_out_of_bounds_flags_are_refused_in_one_line(args, message, capsys, eight_gb):
    assert message in refused(capsys, *args)


@pytest.mark.parametrize("key, line, message", [
    ("minutes", "minutes = inf", "[budget] minutes must be a finite positive number, got inf"),
    ("minutes", "minutes = 1e9", "[budget] minutes must be at most 525,600 (a year), got 1000000000.0"),
    ("minutes", "minutes = -1.0", "[budget] minutes must be a positive number, got -1.0"),
    ("episodes", f"episodes = {2**80}", f"[budget] episodes must be at most 1,000,000,000,000, got {2**80}"),
    ("num_envs", "num_envs = 100000000000000", "[trainer] num_envs must be at most 1,000,000,000,000"),
    ("stop_reward", "stop_reward = nan", "[trainer] stop_reward must be a finite number, got nan"),
    ("seeds", f"seeds = [0, {2**70}]", "seeds must be a non-empty list of integers from 0 to 4,294,967,295"),
])
def test_out_of_bounds_recipe_values_are_refused_naming_the_file_and_key(key, line, message, capsys, eight_gb):
    text = open(CARTPOLE_RECIPE, encoding="utf-8").read()
    lines = [line if row.split("=")[0].strip() == key else row for row in text.splitlines()]
    if not any(row == line for row in lines):  # a key the recipe does not set: add it to its table
        table = "[budget]" if key in ("episodes", "minutes", "env_steps") else "[trainer]"
        lines.insert(lines.index(table) + 1, line)
    path = eight_gb / "absurd.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    err = refused(capsys, "train", "--recipe", str(path))
    assert f"{path}: {message}" in err, err


def test_a_recipe_number_of_thousands_of_digits_is_refused_naming_the_file(capsys, eight_gb):
    path = eight_gb / "digits.toml"
    path.write_text(open(CARTPOLE_RECIPE, encoding="utf-8").read().replace("env_steps = 100000",
                                                                           "env_steps = " + "9" * 5000))
    assert f"{path} is not valid TOML: Exceeds the limit (4300 digits)" in refused(capsys, "train", "--recipe",
                                                                                     str(path))


def test_a_recipe_seed_given_to_prepare_is_checked(eight_gb):
    from marl_note.cli.zoo import RecipeError, recipe
    from marl_note.cli.zoo_run import prepare

    with pytest.raises(RecipeError, match="seed must be an integer from 0 to 4,294,967,295, got an integer of about"):
        prepare(recipe("CartPole-v1"), seed=10**5000)


def test_too_many_envs_are_refused_before_any_env_is_built(capsys, eight_gb):
    err = refused(capsys, *TTT, "--num-envs", "100000000")
    assert "--num-envs 100000000 is too many: num_train_envs=100000000 and num_test_envs=100000000: holding " \
           "200,000,000 envs (at least" in err
    assert "but only 8 GB of memory is available on this machine; use fewer envs (at most about" in err


def test_a_network_too_large_to_train_is_refused_before_it_is_drawn(capsys, eight_gb):
    err = refused(capsys, *TTT, "--agent-arg", "hidden_sizes=[100000, 100000]")
    assert "cannot build the dqn agents: network q_net (hidden_sizes=(100000, 100000) on 18 inputs) has " \
           "10,002,900,009 weights: training them needs 200 GB, but only 8 GB of memory is available" in err
    assert "lower hidden_sizes" in err


def test_an_alphazero_buffer_too_large_is_refused_before_it_is_allocated(capsys, eight_gb):
    err = refused(capsys, "train", "--env", "connect_four_v3", "--algo", "alphazero", "--agent-arg",
                  "buffer_size=1000000000")
    assert "AlphaZero buffer_size=1000000000 (positions kept for training) needs" in err
    assert "lower buffer_size (at most about" in err


@pytest.mark.parametrize("board, env", [(TicTacToe(), "tictactoe_v3"), (ConnectFour(), "connect_four_v3")])
def test_play_asks_again_after_a_move_of_thousands_of_digits(board, env):
    import importlib

    from marl_note.agents import RandomAgent
    from marl_note.envs import adapt, make_spec

    factory = importlib.import_module(f"pettingzoo.classic.{env}").env
    spec = make_spec(adapt(factory()))
    human, other = spec.possible_agents
    bot = RandomAgent(spec.action_space(other), seed=0)
    out = io.StringIO()
    moves = io.StringIO("9" * 5000 + "\n" + "0" * 5000 + "1\n")  # absurd, then the first cell or column
    result = play_game(factory, board, human, {other: bot}, read=moves.readline, out=out, echo=True)
    text = out.getvalue()
    assert result is None and text.rstrip().endswith("no more moves: game abandoned")  # input ended, no crash
    assert "'99999999999999999999'... (5000 characters) is not a move; legal moves: 1, 2, 3" in text
    assert f"{other} (O, the agent) plays" in text  # the zero-padded 1 was played: the agent replied
    assert board.parse("0" * 5000 + "1") == 0
