"""The zoo: every shipped recipe loads and trains a tiny budget; bad recipes are refused by name; the CLI uses them."""
import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from marl_note.cli import main
from marl_note.cli.zoo import RecipeError, load_recipe, recipe, recipe_names, recipes
from marl_note.cli.zoo_run import prepare, train_recipe
from marl_note.cli.zoo_write import write_result

ROOT = Path(__file__).resolve().parents[2]
SUITE = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3", "Pendulum-v1", "tictactoe_v3",
         "connect_four_v3", "texas_holdem_v4", "pistonball_v6", "knights_archers_zombies_v11", "pursuit_v5",
         "simple_spread_v3", "simple_tag_v3", "simple_spread_v3-vdn", "simple_spread_v3-qmix",
         "openspiel_kuhn_poker", "simple_reference_v3-mappo", "simple_speaker_listener_v4-mappo", "openspiel_hanabi",
         "pursuit_v5-mappo", "simple_spread_v3-mappo", "simple_spread_v3-ippo", "openspiel_leduc_poker"]
# optional packages an env needs: (module, what installs it)
NEEDS = {"LunarLander-v3": ("Box2D", "marl_note[zoo]"), "texas_holdem_v4": ("rlcard", "marl_note[zoo]"),
         "pistonball_v6": ("pymunk", "pettingzoo[butterfly]"),
         "knights_archers_zombies_v11": ("pymunk", "pettingzoo[butterfly]"),
         "simple_spread_v3": ("mpe2", "mpe2"), "simple_tag_v3": ("mpe2", "mpe2"),
         "simple_spread_v3-vdn": ("mpe2", "mpe2"), "simple_spread_v3-qmix": ("mpe2", "mpe2"),
         "simple_reference_v3-mappo": ("mpe2", "mpe2"), "simple_spread_v3-mappo": ("mpe2", "mpe2"),
         "simple_spread_v3-ippo": ("mpe2", "mpe2"),
         "simple_speaker_listener_v4-mappo": ("mpe2", "mpe2"),
         "openspiel_kuhn_poker": ("pyspiel", "marl_note[openspiel]"),
         "openspiel_hanabi": ("pyspiel", "marl_note[openspiel]"),
         "openspiel_leduc_poker": ("pyspiel", "marl_note[openspiel]")}


def test_every_env_of_the_public_suite_has_a_recipe_that_loads_and_states_its_result():
    assert sorted(recipe_names()) == sorted(SUITE)
    for r in recipes():
        assert r.version >= 1 and r.seeds and r.budget and r.trainer["test_freq"] >= 1
        assert r.result["status"] in ("measured", "not measured"), r.path
        if r.result["status"] == "measured":
            assert {"date", "machine", "seeds", "metric"} <= set(r.result), r.path
        r.agent_kwargs()  # an exploration policy table builds


@pytest.mark.parametrize("name", SUITE)
def test_each_recipe_builds_its_env_and_agents_and_trains_a_tiny_budget(name):
    module, install = NEEDS.get(name, (None, None))
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} needs {module}: pip install '{install}'")
    r = recipe(name)
    trainer = {**r.trainer, "num_envs": 2, "test_episodes": 1, "update_freq": min(r.trainer["update_freq"], 100)}
    short = {"max_cycles": 20, "n_pistons": 3}  # short episodes, few pistons: seconds, not minutes
    env_kwargs = {**r.env_kwargs, **{k: v for k, v in short.items() if k in r.env_kwargs}}
    r = dataclasses.replace(r, trainer=trainer, env_kwargs=env_kwargs).with_budget(env_steps=150, minutes=None,
                                                                                    episodes=None)
    run = prepare(r, seed=0)
    try:
        stats = run.train()
        assert stats["recipe"] == f"{name} v{r.version}" and stats["stopped_by_budget"] == "env_steps"
        assert 150 <= stats["num_collected_steps"] < 150 + 2 * 500  # one more chunk at most
        score = run.score(episodes=1)
        assert ("per_seat" in score) == run.board_game and score["score"] == score["score"]
    finally:
        run.close()


GOOD = """version = 1
env = "CartPole-v1"
algo = "dqn"
seeds = [0]
[agent]
lr = 0.001
[trainer]
test_freq = 10
[budget]
env_steps = 1000
[result]
status = "not measured"
"""


@pytest.mark.parametrize("change, message", [
    (("version = 1", "version = 1\nbudgets = 3"), "unknown key 'budgets'"),
    (("lr = 0.001", "lrr = 0.001"), "[agent] 'lrr' is no option of dqn (did you mean 'lr'?)"),
    (("test_freq = 10", "test_freq = 10\nlr = 1"), "[trainer] has no key 'lr'"),
    (("test_freq = 10", "test_freq = 0"), "[trainer] test_freq must be a positive integer, got 0"),
    (("env_steps = 1000", "env_steps = \"many\""), "[budget] env_steps must be a positive integer, got 'many'"),
    (('env = "CartPole-v1"', 'env = "CartPol-v1"'), "env 'CartPol-v1' is no env known here; did you mean CartPole-v1"),
    (('algo = "dqn"', 'algo = "a2c"'), "algo 'a2c' is not one of dqn, ppo, ddpg, sac, maddpg"),
    (('algo = "dqn"', 'algo = "dqn"\nseats = "joint"'), "seats 'joint' does not fit algo 'dqn'"),
    (("seeds = [0]", "seeds = 0"), "seeds must be a non-empty list of integers, got 0"),
    (('status = "not measured"', 'status = "measured"\nmean = 500.0'), "a measured score states its date"),
    (('status = "not measured"', 'status = "great"'), "[result] needs status"),
    (("seeds = [0]", "seeds = [0]\nwrappers = [{ name = \"frame_stack\" }]"), "wrappers[0] needs name"),
    (("lr = 0.001", "policy = { type = \"Greedy\" }"), "[agent.policy] needs type = one of"),
    (("[budget]\nenv_steps = 1000", "[budget]"), "[budget] needs env_steps, episodes or minutes"),
    (("version = 1\n", ""), "the key 'version' is missing"),
    (("seeds = [0]", "seeds = [0"), "is not valid TOML"),
])
def test_a_bad_recipe_is_refused_naming_the_file_and_the_key(tmp_path, change, message):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace(*change))
    with pytest.raises(RecipeError) as exc:
        load_recipe(path)
    assert str(exc.value).startswith(str(path)) and message in str(exc.value), str(exc.value)


def test_a_good_user_recipe_loads_and_a_measured_result_is_written_back(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("# my recipe\n" + GOOD)
    r = load_recipe(path)
    assert (r.name, r.algo, r.agent, r.budget) == ("mine", "dqn", {"lr": 0.001}, {"env_steps": 1000})
    result = {"status": "measured", "date": "2026-11-23", "machine": "test", "seeds": [0], "metric": "return",
              "mean": 500.0, "per_seat": {"player_1": {"win": 0.9}}}
    assert write_result(path, result).result == result
    assert path.read_text().startswith("# my recipe\nversion = 1")
    with pytest.raises(RecipeError, match="a measured score states its date"):
        write_result(path, {"status": "measured"})
    assert load_recipe(path).result == result  # a refused result leaves the file as it was


def test_train_recipe_from_python_takes_budget_and_agent_overrides():
    stats = train_recipe("CartPole-v1", seed=1, env_steps=100, minutes=None, agent_kwargs={"learning_starts": 64})
    assert stats["recipe"] == recipe("CartPole-v1").label and stats["num_gradient_steps"] > 0  # past learning_starts 64
    with pytest.raises(RecipeError, match="no zoo recipe for 'CartPole-v2'; did you mean CartPole-v1"):
        train_recipe("CartPole-v2")


def test_cli_train_without_algo_uses_the_recipe_and_explicit_flags_override_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "CartPole-v1", "--env-steps", "100", "--num-envs", "2", "--agent-arg", "lr=0.01",
                 "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    label = recipe("CartPole-v1").label
    assert f"training dqn (torch) on CartPole-v1 (zoo recipe {label})" in text and "on 2 envs" in text
    record = json.loads((out / "marl_note_run.json").read_text())
    assert record["recipe"] == label and record["algo"] == "dqn"
    config = json.loads((out / "last" / "agent_0" / "manifest.json").read_text())["config"]
    assert config["hidden_sizes"] == {"$tuple": [256, 256]} and config["lr"] == 0.01  # the recipe's net, the flag's lr
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2"]) == 0


def test_cli_with_algo_uses_no_recipe_and_unknown_recipes_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "CartPole-v1", "--algo", "dqn", "--episodes", "2", "--num-envs", "2",
                 "--out", str(out), "--quiet", "--eval-episodes", "0"]) == 0
    assert "zoo recipe" not in capsys.readouterr().out
    record = json.loads((out / "marl_note_run.json").read_text())
    config = json.loads((out / "last" / "agent_0" / "manifest.json").read_text())["config"]
    assert record["recipe"] is None and config["hidden_sizes"] == {"$tuple": [128, 128]}
    assert main(["train", "--env", "FrozenLake-v1", "--out", str(tmp_path / "x")]) == 2
    assert "no zoo recipe for 'FrozenLake-v1'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("lr = ", "lrr = "))
    assert main(["train", "--recipe", str(bad)]) == 2
    assert f"{bad}: [agent] 'lrr' is no option of dqn" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_recipe_on_another_env_keeps_its_settings_and_leaves_its_env_specifics_behind():
    tag = recipe("simple_tag_v3")
    moved = tag.on_env("simple_speaker_listener_v4", {"max_cycles": 10})
    assert (moved.algo, moved.seats, moved.wrappers, moved.agent, moved.budget) == (
        tag.algo, tag.seats, tag.wrappers, tag.agent, tag.budget)
    assert moved.score_seats is None and tag.score_seats  # adversary seats are no seats of the new env
    assert moved.env_kwargs == {"max_cycles": 10} and moved.result == {"status": "not measured"}
    assert moved.label == f"{tag.label} on simple_speaker_listener_v4"
    cart = recipe("CartPole-v1")
    assert cart.trainer["stop_reward"] == 500.0 and "stop_reward" not in cart.on_env("Acrobot-v1").trainer
    with pytest.raises(RecipeError, match="on_env needs an env name"):
        cart.on_env("")
    # a Tuple-observation env the recipe never saw trains with the recipe's DQN (real Gymnasium env)
    stats = train_recipe(cart.on_env("Blackjack-v1"), seed=0, env_steps=300, minutes=None,
                         agent_kwargs={"learning_starts": 64})
    assert stats["recipe"] == "CartPole-v1 v2 on Blackjack-v1" and stats["num_gradient_steps"] > 0


def test_cli_trains_a_recipe_by_name_on_another_env(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--recipe", "CartPole-v1", "--env", "FrozenLake-v1", "--env-steps", "200",
                 "--num-envs", "2", "--out", str(out), "--quiet"]) == 0
    label = recipe("CartPole-v1").label
    assert f"on FrozenLake-v1 (zoo recipe {label} on FrozenLake-v1)" in capsys.readouterr().out
    record = json.loads((out / "marl_note_run.json").read_text())
    assert record["env"] == "FrozenLake-v1" and record["recipe"] == f"{label} on FrozenLake-v1"
    assert main(["train", "--recipe", "FrozenLake-v9", "--out", str(tmp_path / "x")]) == 2
    assert "no zoo recipe for 'FrozenLake-v9'" in capsys.readouterr().err


def bench_main(name, args, capsys):
    """``bench/NAME.py ARGS`` through its ``main`` in this process (a subprocess only added a torch start-up):
    the exit code and what it printed."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    code = module.main(args)
    printed = capsys.readouterr()
    return subprocess.CompletedProcess([name, *args], code, printed.out, printed.err)


def test_bench_transfer_smoke_runs(tmp_path, capsys):
    proc = bench_main("bench_transfer", ["--smoke", "--pairs", "Blackjack-v1,FrozenLake-v1",
                                         "--json", str(tmp_path / "t.json")], capsys)
    assert proc.returncode == 0, proc.stderr
    assert f"| {recipe('CartPole-v1').label} | Blackjack-v1 | DQN on a Tuple observation" in proc.stdout
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert [r["env"] for r in rows] == ["Blackjack-v1", "FrozenLake-v1"]
    assert all(r["env_steps"] >= 200 and isinstance(r["generalises"], bool) for r in rows)
    assert rows[0]["threshold"] is None and rows[1]["threshold"] == 0.7  # Gymnasium's registered "solved" score
    assert "(0.7) |" in proc.stdout


def test_zoo_command_lists_every_recipe(capsys):
    assert main(["zoo"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in SUITE)
    assert main(["zoo", "Pendulum-v1"]) == 0 and 'algo = "sac"' in capsys.readouterr().out


def test_recipes_are_package_data():
    # what a wheel or sdist ships: pyproject's package-data must name the recipe files
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["marl_note"]
    assert "cli/recipes/*.toml" in data
    assert all((ROOT / "marl_note" / "cli" / "recipes" / f"{n}.toml").is_file() for n in SUITE)


def test_bench_suite_smoke_runs(tmp_path, capsys):
    proc = bench_main("bench_suite", ["--smoke", "--env", "CartPole-v1", "--json", str(tmp_path / "suite.json")],
                      capsys)
    assert proc.returncode == 0, proc.stderr
    assert "| CartPole-v1 | dqn (torch) | 0 |" in proc.stdout and "500.0 +- 0.0 (dqn, 50k steps)" in proc.stdout
    rows = json.loads((tmp_path / "suite.json").read_text())["rows"]
    assert rows[0]["env"] == "CartPole-v1" and rows[0]["env_steps"] >= 200 and "random" in rows[0]
    assert rows[0]["backend"] == rows[0]["runs"][0]["backend"] == "torch"  # which backend the result used


def test_bench_suite_shows_the_arg_max_score_beside_a_sampled_policy_score():
    """pursuit's recipe tests the sampled PPO policy; the bench scores it both ways and leaves the agent as it was."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_suite
    finally:
        sys.path.remove(str(ROOT / "bench"))
    r = recipe("pursuit_v5")
    assert r.agent["deterministic_eval"] is False
    r = dataclasses.replace(r, env_kwargs={**r.env_kwargs, "max_cycles": 10},
                            trainer={**r.trainer, "num_envs": 2, "test_episodes": 1, "update_freq": 50,
                                     "processes": None}).with_budget(env_steps=50, minutes=None)
    out = bench_suite.run_seed(r, 0, "torch", episodes=2)
    assert isinstance(out["deterministic_score"], float) and out["score"] == out["score"]
    row = bench_suite.summarize("pursuit_v5", r, [out])
    assert "arg-max/mean action" in bench_suite.markdown([row])
    assert bench_suite.result_table(row, "torch", "cmd")["deterministic_mean"] == round(out["deterministic_score"], 4)
    run = prepare(r, seed=0)  # and the recipe builds learners that sample when not exploring
    try:
        learner = next(iter(run.learners.values()))
        assert learner.cfg.deterministic_eval is False
    finally:
        run.close()


@pytest.mark.skipif(importlib.util.find_spec("mpe2") is None, reason="simple_spread_v3 needs mpe2: pip install mpe2")
def test_evaluate_re_applies_the_wrappers_a_recipe_trained_with(tmp_path, capsys):
    # simple_spread's recipe appends the agent id (18 -> 21 features): the saved agent only fits the wrapped env
    out = tmp_path / "run"
    assert main(["train", "--env", "simple_spread_v3", "--episodes", "2", "--num-envs", "2", "--update-freq", "50",
                 "--env-arg", "max_cycles=5", "--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "marl_note_run.json").read_text())
    assert record["wrappers"] == [{"name": "with_agent_id"}] and record["env_kwargs"] == {"max_cycles": 5}
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2"]) == 0, capsys.readouterr().err
    assert "agent_2:" in capsys.readouterr().out
