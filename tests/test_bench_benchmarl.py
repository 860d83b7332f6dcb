"""bench/bench_benchmarl.py's own logic: options, the run plan, the team return, the evaluation loop, the CSV and
table writers and the venv commands, without installing or training anything."""
import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_benchmarl", ROOT / "bench" / "bench_benchmarl.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_benchmarl"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["bench_benchmarl"]


def test_options_and_their_defaults(bench):
    args = bench.parse_args(["--budget", "1000000", "--seeds", "0,1,2", "--algos", "mappo,qmix,ppo",
                             "--libs", "benchmarl", "--eval-episodes", "50", "--out", "somewhere"])
    assert (args.budget, args.seeds, args.algos, args.libs, args.eval_episodes, args.out) == (
        1_000_000, [0, 1, 2], ["mappo", "qmix", "ppo"], ["benchmarl"], 50, "somewhere")
    defaults = bench.parse_args([])
    assert (defaults.budget, defaults.seeds, defaults.libs, defaults.eval_episodes) == (
        20_000, [0], ["marl_note", "benchmarl"], 100)


@pytest.mark.parametrize("argv, message", [
    (["--algos", "mappo,dqn"], "unknown algorithm 'dqn'"),
    (["--libs", "marl_note,epymarl"], "unknown library 'epymarl'"),
    (["--budget", "0"], "--budget must be a positive multiple of 10"),
    (["--budget", "20005"], "--budget must be a positive multiple of 10"),
    (["--eval-episodes", "0"], "--eval-episodes must be positive"),
    (["--seeds", "0,x"], "expected integers separated by commas"),
    (["--agent-arg", "gamma"], "--agent-arg: expected KEY=VALUE, got 'gamma'"),
    (["--agent-arg", "gamma="], "--agent-arg: expected KEY=VALUE, got 'gamma='"),
])
def test_bad_options_are_named(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_each_algorithm_runs_on_the_libraries_that_have_it(bench):
    args = bench.parse_args(["--algos", "mappo,ppo,qmix", "--seeds", "0,1"])
    assert bench.runs_planned(args) == [
        ("marl_note", "mappo", 0), ("benchmarl", "mappo", 0), ("marl_note", "ppo", 0),
        ("marl_note", "qmix", 0), ("benchmarl", "qmix", 0),
        ("marl_note", "mappo", 1), ("benchmarl", "mappo", 1), ("marl_note", "ppo", 1),
        ("marl_note", "qmix", 1), ("benchmarl", "qmix", 1)]
    # a marl_note CLI without mappo/qmix (main before those branches): BenchMARL's rows only for them
    older = {"marl_note": ["ppo", "maddpg"], "benchmarl": bench.ALGOS["benchmarl"]}
    assert bench.runs_planned(bench.parse_args(["--algos", "mappo,ppo"]), older) == [
        ("benchmarl", "mappo", 0), ("marl_note", "ppo", 0)]


def test_cli_algo_choices_are_read_from_the_help(bench):
    assert bench.cli_algos("usage: x [--algo {dqn,ppo,maddpg}] [--seed S]") == ["dqn", "ppo", "maddpg"]
    with pytest.raises(ValueError, match="no --algo choices"):
        bench.cli_algos("usage: x [--seed S]")
    assert {"ppo", "maddpg"} <= set(bench.marl_note_algos(sys.executable))  # this checkout's real CLI


def test_benchmarl_batches_divide_the_budget(bench):
    assert bench.benchmarl_batch(1_000_000) == 5000
    assert bench.benchmarl_batch(20_000) == 5000
    assert bench.benchmarl_batch(6000) == 6000
    assert bench.benchmarl_batch(2000) == 2000
    assert bench.benchmarl_batch(12_010) == 10  # 1201 is prime: small batches, but the budget exactly
    for budget in (30, 20_000, 120_000, 1_000_000, 12_010):
        batch = bench.benchmarl_batch(budget)
        assert budget % batch == 0 and batch % 10 == 0 and batch <= 6000
    with pytest.raises(ValueError, match="budget 15"):
        bench.benchmarl_batch(15)


def test_team_return_is_the_mean_over_agents_then_episodes(bench):
    returns = np.array([[-1.0, -2.0, -3.0],    # episode 0: -2 per agent
                        [-4.0, -5.0, -12.0]])  # episode 1: -7 per agent
    assert bench.team_return(returns) == pytest.approx(-4.5)
    assert bench.team_return([[3.0, 3.0, 3.0]]) == 3.0
    with pytest.raises(ValueError, match=r"\(episodes, agents\)"):
        bench.team_return([1.0, 2.0])


def test_evaluation_loop_sums_each_agents_rewards_on_the_real_env(bench):
    from mpe2 import simple_spread_v3

    def make_env():
        return simple_spread_v3.parallel_env(N=3, max_cycles=bench.MAX_CYCLES, continuous_actions=False)

    calls = []

    def still(obs, explore):  # action 0: no move
        calls.append(explore)
        return {a: 0 for a in obs}

    returns = bench.evaluate_policy(make_env, still, episodes=2, seed=3, explore=True)
    assert returns.shape == (2, 3) and calls == [True] * 2 * bench.MAX_CYCLES
    env = make_env()  # the same episodes played by hand
    for k in range(2):
        env.reset(seed=bench.episode_seed(3, k))
        total = np.zeros(3)
        while env.agents:
            _, rewards, _, _, _ = env.step({a: 0 for a in env.agents})
            total += [rewards[a] for a in env.possible_agents]
        np.testing.assert_allclose(returns[k], total)
    env.close()
    assert not np.allclose(returns[0], returns[1])  # two episodes, two different starts


def test_csv_appends_rows_under_one_header_and_table_shows_them(bench, tmp_path):
    result = {"env_steps": 20_000, "greedy": -20.12345, "sampled": -21.5, "wall_s": 61.26, "cpu_s": 40.0,
              "command": "python -m marl_note train ..."}
    first = bench.row("ppo", "marl_note", 20_000, 0, 100, result)
    second = bench.row("mappo", "benchmarl", 20_000, 1, 100, {**result, "own_eval": -19.0, "command": "x"})
    path = tmp_path / "results.csv"
    bench.append_csv(str(path), [first])
    bench.append_csv(str(path), [second])
    with open(path, newline="") as f:
        read = list(csv.DictReader(f))
    assert [r["algo"] for r in read] == ["ppo", "mappo"]
    assert read[0]["greedy"] == "-20.123" and read[0]["own_eval"] == "" and read[1]["own_eval"] == "-19.0"
    assert read[0]["steps_per_cpu_s"] == "500.0" and read[1]["command"] == "x"
    table = bench.format_table([first, second]).splitlines()
    assert table[0].split() == [c for c in bench.COLUMNS if c != "command"]
    assert table[1].split()[:8] == ["simple_spread_v3", "ppo", "marl_note", "20000", "0", "20000", "-20.123", "-21.5"]
    assert len({len(line) for line in table}) == 1  # aligned columns


def test_venv_is_built_torch_first_then_pinned(bench):
    commands = bench.venv_commands("/v/benchmarl", python="python3")
    assert commands[0] == ["python3", "-m", "venv", "/v/benchmarl"]
    assert commands[1] == ["/v/benchmarl/bin/pip", "install", "torch==2.13.0"]  # the CPU wheel, before anything
    assert "/v/benchmarl-constraints.txt" in commands[2][-1] and "freeze" in commands[2][-1]
    assert commands[3] == ["/v/benchmarl/bin/pip", "install", "-c", "/v/benchmarl-constraints.txt", "benchmarl",
                           "pettingzoo[mpe]==1.24.3"]


def test_marl_note_side_runs_through_the_cli(bench):
    recipes = bench.zoo_recipes()
    assert recipes["ppo"] == "simple_spread_v3"  # the env's default recipe: shared PPO, agent id appended
    ppo = bench.marl_note_train_command("py", "ppo", 20_000, 2, "out/dir", recipes["ppo"])
    assert ppo[:4] == ["py", "-m", "marl_note", "train"]
    assert ppo[ppo.index("--recipe") + 1] == "simple_spread_v3"
    for flag, value in (("--env", "simple_spread_v3"), ("--env-steps", "20000"), ("--seed", "2"),
                        ("--threads", "1"), ("--out", "out/dir"), ("--env-arg", "max_cycles=25")):
        assert ppo[ppo.index(flag) + 1] == value
    maddpg = bench.marl_note_train_command("py", "maddpg", 1000, 0, "o")
    assert maddpg[maddpg.index("--algo") + 1] == "maddpg" and "--recipe" not in maddpg
    assert "--agent-arg" not in ppo + maddpg


def test_agent_args_reach_the_cli_and_name_the_rows(bench, tmp_path, monkeypatch):
    args = bench.parse_args(["--agent-arg", "gamma=0.9", "--agent-arg", "n_epochs=5"])
    assert args.agent_arg == ["gamma=0.9", "n_epochs=5"] and bench.parse_args([]).agent_arg == []
    command = bench.marl_note_train_command("py", "mappo", 1000, 0, "o", "simple_spread_v3-mappo", args.agent_arg)
    assert command[command.index("--recipe") + 1] == "simple_spread_v3-mappo"
    assert [command[i + 1] for i, w in enumerate(command) if w == "--agent-arg"] == ["gamma=0.9", "n_epochs=5"]
    assert bench.variant("mappo", args.agent_arg) == "mappo gamma=0.9 n_epochs=5" and bench.variant("qmix") == "qmix"
    assert bench.marl_note_run_dir("o", "ippo", 400, 1, ["gamma=0.5"]) == "o/marl_note-ippo-gamma=0.5-400-s1"
    assert bench.marl_note_run_dir("o", "ippo", 400, 1) == "o/marl_note-ippo-400-s1"
    # main hands the settings to each marl_note run and names them in its row (the CLI's own tests check that
    # --agent-arg overrides a recipe's setting; the runs here are stand-ins that only record their arguments)
    seen = []

    def run(algo, budget, seed, episodes, out, timeout, agent_args=()):
        seen.append((algo, seed, list(agent_args)))
        return {"env_steps": budget, "greedy": -1.0, "sampled": -2.0, "wall_s": 1.0, "cpu_s": 1.0, "command": "c"}

    monkeypatch.setattr(bench, "run_marl_note", run)
    monkeypatch.setattr(bench, "marl_note_algos", lambda: list(bench.ALGOS["marl_note"]))
    assert bench.main(["--libs", "marl_note", "--algos", "ippo", "--budget", "400", "--seeds", "0,1",
                       "--agent-arg", "gamma=0.5", "--out", str(tmp_path)]) == 0
    assert seen == [("ippo", 0, ["gamma=0.5"]), ("ippo", 1, ["gamma=0.5"])]
    with open(tmp_path / "results.csv", newline="") as f:
        assert [r["algo"] for r in csv.DictReader(f)] == ["ippo gamma=0.5"] * 2


def test_zoo_recipes_of_the_env_by_algorithm(bench, tmp_path):
    for name, algo in (("simple_spread_v3", "ppo"), ("simple_spread_v3-qmix", "qmix"), ("simple_spread_v3-x", "ppo"),
                       ("simple_tag_v3", "ppo")):
        (tmp_path / f"{name}.toml").write_text(f'version = 1\nenv = "simple_spread_v3"\nalgo = "{algo}"\n')
    # the env's default recipe wins for its algorithm; other envs' recipes are not taken
    assert bench.zoo_recipes(str(tmp_path)) == {"ppo": "simple_spread_v3", "qmix": "simple_spread_v3-qmix"}


def test_random_row_uses_the_same_evaluation(bench):
    first, again, other = bench.run_random(0, 2), bench.run_random(0, 2), bench.run_random(1, 2)
    assert first == again  # seeded: the same row twice
    assert first["greedy"] != first["sampled"] and first["greedy"] != other["greedy"]
    assert -100 < first["greedy"] < 0 and first["env_steps"] == 0  # simple_spread's rewards are negative


def test_a_run_past_its_timeout_is_left_out_and_the_others_still_run(bench, tmp_path, capsys):
    code = bench.main(["--libs", "marl_note", "--algos", "ppo", "--budget", "1000", "--timeout", "0.01",
                       "--random", "--eval-episodes", "2", "--out", str(tmp_path)])
    shown = capsys.readouterr().out
    assert code == 1 and "marl_note ppo seed 0 left out" in shown and "failed or timed out (no row)" in shown
    with open(tmp_path / "results.csv", newline="") as f:
        assert [(r["lib"], r["algo"]) for r in csv.DictReader(f)] == [("random", "random")]
