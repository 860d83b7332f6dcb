"""``train --wrapper``: SuperSuit wrappers by name from a fixed list, literal values, clear refusals
(each failed on 705780f, which had no --wrapper option)."""
from __future__ import annotations

import json

import pytest

from marl_note.cli import main
from marl_note.cli.common import CLIError

supersuit = pytest.importorskip("supersuit")


def test_values_are_literals_or_bare_words():
    from marl_note.cli.wrappers import parse_wrapper

    assert parse_wrapper("color_reduction_v0:mode=B") == {"name": "supersuit.color_reduction_v0", "mode": "B"}
    assert parse_wrapper("supersuit.resize_v1:x_size=84, y_size=84,linear_interp=false") == {
        "name": "supersuit.resize_v1", "x_size": 84, "y_size": 84, "linear_interp": False}
    assert parse_wrapper("reshape_v0:shape=[84, 84, 1]") == {"name": "supersuit.reshape_v0", "shape": [84, 84, 1]}
    assert parse_wrapper("clip_reward_v0:lower_bound=-0.5,upper_bound=None")["lower_bound"] == -0.5
    assert parse_wrapper("flatten_v0") == {"name": "supersuit.flatten_v0"}


@pytest.mark.parametrize("item, message", [
    ("os.system:command=ls", "unknown wrapper 'os.system'"),
    ("observation_lambda_v0:change_observation_fn=print", "unknown wrapper 'observation_lambda_v0'"),
    ("resize_v2:x_size=8", "did you mean resize_v1"),
    ("resize_v1:x_size=84", "resize_v1 needs y_size=..."),
    ("resize_v1:x_size=84,y_size=84,size=3", "resize_v1 has no option 'size'; it takes x_size, y_size, linear_interp"),
    ("resize_v1:x_size=[84,y_size=84", "the value of x_size ('[84') is not a literal"),
    ("frame_stack_v1:stack_size=4,stack_size=2", "stack_size is given twice"),
    ("frame_stack_v1:4", "expected NAME:KEY=VALUE"),
])
def test_anything_else_is_refused_with_the_reason(item, message):
    from marl_note.cli.wrappers import parse_wrapper

    with pytest.raises(CLIError) as err:
        parse_wrapper(item)
    assert message in str(err.value) and f"--wrapper {item!r}" in str(err.value)


def test_every_allowed_name_is_a_supersuit_wrapper():
    from marl_note.cli.wrappers import SUPERSUIT_WRAPPERS

    for name in SUPERSUIT_WRAPPERS:
        assert callable(getattr(supersuit, name)), name


def test_a_refused_wrapper_stops_train_before_any_env_is_built(capsys, tmp_path):
    assert main(["train", "--env", "cooperative_pong_v6", "--algo", "ppo", "--wrapper", "resize_v1:x_size=8",
                 "--out", str(tmp_path / "run")]) == 2
    assert "resize_v1 needs y_size=..." in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_pixel_wrappers_reach_the_agent_and_evaluate_wraps_the_env_alike(capsys, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("pymunk")
    out = tmp_path / "pong"
    assert main(["train", "--env", "cooperative_pong_v6", "--algo", "ppo", "--self-play", "--env-steps", "16",
                 "--update-freq", "16", "--num-envs", "1", "--test-episodes", "1", "--eval-episodes", "0", "--quiet",
                 "--env-arg", "max_cycles=8", "--agent-arg", "n_steps=8", "--agent-arg", "n_epochs=1",
                 "--agent-arg", "hidden_sizes=[8]", "--out", str(out),
                 "--wrapper", "color_reduction_v0:mode=B", "--wrapper", "resize_v1:x_size=42,y_size=42",
                 "--wrapper", "frame_stack_v1:stack_size=4"]) == 0
    manifest = json.loads((out / "last" / "agent" / "manifest.json").read_text())
    assert manifest["observation_space"]["shape"] == [42, 42, 4]  # grey, resized, four frames: what the agent saw
    record = json.loads((out / "marl_note_run.json").read_text())
    assert [w["name"] for w in record["wrappers"]] == ["supersuit.color_reduction_v0", "supersuit.resize_v1",
                                                       "supersuit.frame_stack_v1"]
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "1", "--num-envs", "1",
                 "--env-arg", "max_cycles=8"]) == 0  # the recorded wrappers again: the saved agent fits the env
    assert "greedy episodes: 1" in capsys.readouterr().out
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "1", "--num-envs", "1",
                 "--env", "butterfly/cooperative_pong-v6", "--env-arg", "max_cycles=8"]) == 0  # typed as a registry id
    assert "greedy episodes: 1" in capsys.readouterr().out


def test_a_recipe_takes_the_same_fixed_list_of_wrappers(tmp_path):
    from importlib import resources

    from marl_note.cli.zoo import RecipeError, load_recipe

    shipped = resources.files("marl_note.cli") / "recipes" / "pistonball_v6.toml"
    path = tmp_path / "mine.toml"
    path.write_text(shipped.read_text())
    assert [w["name"] for w in load_recipe(path).wrappers][1] == "supersuit.resize_v1"
    path.write_text(shipped.read_text().replace('name = "supersuit.resize_v1"', 'name = "supersuit.reward_lambda_v0"'))
    with pytest.raises(RecipeError, match=r"wrappers\[1\]: unknown wrapper 'reward_lambda_v0'"):
        load_recipe(path)
    path.write_text(shipped.read_text().replace("x_size = 64", "x = 64"))
    with pytest.raises(RecipeError, match=r"wrappers\[1\]: resize_v1 has no option 'x'"):
        load_recipe(path)
