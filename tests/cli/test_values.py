"""``KEY=VALUE`` options mean what the user typed: Python literals (``False``, ``None``, numbers, lists), bare
words as text, and a value that is neither refused in one line naming the option and the argument."""
import json

import gymnasium as gym
import pytest

from marl_note.cli import main
from marl_note.cli.common import parse_assignments
from marl_note.cli.envs import resolve_env


def test_env_arg_false_reaches_car_racing_as_a_bool():
    pytest.importorskip("Box2D")
    kwargs = parse_assignments(["continuous=False"], "--env-arg")
    assert kwargs == {"continuous": False}
    env = resolve_env("CarRacing-v3", kwargs).make()
    try:
        assert isinstance(env.action_space, gym.spaces.Discrete)  # the string 'False' is true: Box actions
    finally:
        env.close()


def test_train_passes_is_slippery_false_to_frozen_lake(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "FrozenLake-v1", "--algo", "dqn", "--env-arg", "is_slippery=False",
                 "--env-arg", "map_name=4x4", "--episodes", "2", "--num-envs", "2", "--update-freq", "8",
                 "--test-episodes", "1", "--eval-episodes", "0", "--quiet", "--out", str(out)]) == 0
    record = json.loads((out / "marl_note_run.json").read_text())
    assert record["env_kwargs"] == {"is_slippery": False, "map_name": "4x4"}


@pytest.mark.parametrize("text, value", [("true", True), ("FALSE", False), ("None", None), ("null", None),
                                         ("3", 3), ("-2.5e-3", -2.5e-3), ("'a b'", "a b"), ("[64, 64]", [64, 64]),
                                         ("[true, null]", [True, None]), ("{'a': (1, 2)}", {"a": (1, 2)}),
                                         ("rgb_array", "rgb_array"), ("CartPole-v1", "CartPole-v1")])
def test_values_are_literals_or_bare_words(text, value):
    assert parse_assignments([f"key={text}"], "--agent-arg") == {"key": value}


@pytest.mark.parametrize("text", ["[64, 64", "a b", "{'a': }", "", "f(1)"])
def test_a_value_that_does_not_parse_is_refused_naming_the_argument(capsys, tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--env", "tictactoe_v3", "--algo", "dqn", "--agent-arg", f"hidden_sizes={text}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"marl_note train: error: --agent-arg hidden_sizes={text}: the value is no Python literal")
    assert "\n" not in err and list(tmp_path.iterdir()) == []
