"""The public suite with the zoo's recipes: final greedy score per env, mean and spread over seeds, vs random.

For every env (``--env NAME[,NAME...]``, default: every shipped recipe) and seed (``--seeds``,
default 0,1,2) the recipe trains within its budget, capped at ``--minutes`` per run (default 15),
then its greedy agents play ``--episodes`` test episodes; random players in every seat play the
same number in the same trainer (the baseline, measured in the same run). Board games (turn-based,
several seats) are scored per seat against a random player (win/draw/loss), the random baseline
being a random player in that seat. Gymnasium envs are shown next to RL Baselines3 Zoo's published
score for the same env (one trained agent each, see ``RL_ZOO``). An env whose optional package is
missing (Box2D, pymunk, rlcard, mpe2) is reported as skipped, with the reason.

Writes ``--json`` (default bench_suite.json) and prints a markdown table; ``--write-results``
writes each measured env's figures into its recipe's ``[result]`` table (date, machine, seeds).
``--smoke`` only checks that the script runs (tiny budgets, one seed, nothing written back).

Run:  python bench/bench_suite.py                                  # the whole suite, 3 seeds, <= 15 min a run
      python bench/bench_suite.py --env CartPole-v1 --seeds 0 --minutes 5
      python bench/bench_suite.py --write-results                 # and record the scores in the recipes
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marl_note.cli.common import CLIError  # noqa: E402
from marl_note.cli.zoo import Recipe, recipe, recipe_names  # noqa: E402
from marl_note.cli.zoo_run import prepare  # noqa: E402
from marl_note.cli.zoo_write import write_result  # noqa: E402

# RL Baselines3 Zoo's published scores: algo, mean_reward, std_reward, n_timesteps of training, from
# https://github.com/DLR-RM/rl-baselines3-zoo/blob/master/benchmark.md ("Performance of trained agents":
# one trained agent per row, evaluated deterministically over ~150k steps). LunarLander's row is for
# LunarLander-v2 (the same task before gymnasium's v3); there the PPO row matches this recipe's algorithm.
RL_ZOO_URL = "https://github.com/DLR-RM/rl-baselines3-zoo/blob/master/benchmark.md"
RL_ZOO = {
    "CartPole-v1": ("dqn", 500.0, 0.0, "50k"),
    "Acrobot-v1": ("dqn", -76.639, 11.752, "100k"),
    "MountainCar-v0": ("dqn", -100.849, 9.925, "120k"),
    "LunarLander-v3": ("ppo", 242.119, 31.823, "1M"),
    "Pendulum-v1": ("sac", -156.995, 88.714, "20k"),
}


def smoke_recipe(r: Recipe) -> Recipe:
    """The recipe cut to a few hundred env steps and tiny tests (the script's --smoke)."""
    trainer = {**r.trainer, "num_envs": 2, "test_episodes": 1, "update_freq": min(r.trainer.get("update_freq", 100),
                                                                                     100)}
    return dataclasses.replace(r, trainer=trainer).with_budget(env_steps=200, minutes=None, episodes=None)


def run_seed(r: Recipe, seed: int, backend: str, episodes: int) -> dict:
    run = prepare(r, seed=seed, backend=backend)
    try:
        started, cpu = time.perf_counter(), time.process_time()
        stats = run.train()
        minutes, cpu_minutes = (time.perf_counter() - started) / 60, (time.process_time() - cpu) / 60
        final, rnd = run.score(episodes), run.random_score(episodes)
        arg_max = _deterministic_score(run, episodes)
    finally:
        run.close()
    return {"seed": seed, "backend": run.backend, "cpu_minutes": round(cpu_minutes, 2),
            "score": final["score"], "random": rnd["score"], "final": final, "random_detail": rnd,
            "deterministic_score": arg_max,
            "env_steps": stats["num_collected_steps"], "gradient_steps": stats["num_gradient_steps"],
            "minutes": round(minutes, 2), "stopped_by": stats.get("stopped_by_budget")
            or ("stop_reward" if stats.get("stopped_by_stop_fn") else "episodes"),
            "board_game": "per_seat" in final}


def _deterministic_score(run, episodes: int) -> float | None:
    """For a recipe whose PPO learners test the sampled policy (``deterministic_eval = false``): the same
    measurement with their arg-max / mean action, shown beside it (None for every other recipe)."""
    sampled = [a for a in run.learners.values()
               if getattr(getattr(a, "cfg", None), "deterministic_eval", True) is False]
    if not sampled:
        return None
    for agent in sampled:
        agent.cfg = dataclasses.replace(agent.cfg, deterministic_eval=True)
    try:
        return float(run.score(episodes)["score"])
    finally:
        for agent in sampled:
            agent.cfg = dataclasses.replace(agent.cfg, deterministic_eval=False)


def _spread(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def summarize(name: str, r: Recipe, runs: list[dict]) -> dict:
    mean, std = _spread([x["score"] for x in runs])
    backends = "/".join(sorted({x["backend"] for x in runs}))
    out = {"env": name, "recipe": r.label, "algo": r.algo, "backend": backends,
           "seeds": [x["seed"] for x in runs], "mean": mean,
           "std": std, "random": statistics.fmean([x["random"] for x in runs]), "target": r.target,
           "env_steps": round(statistics.fmean([x["env_steps"] for x in runs])),
           "minutes": round(statistics.fmean([x["minutes"] for x in runs]), 2),
           "cpu_minutes": round(statistics.fmean([x["cpu_minutes"] for x in runs]), 2), "runs": runs}
    if runs[0]["deterministic_score"] is not None:
        out["deterministic_mean"] = statistics.fmean([x["deterministic_score"] for x in runs])
    if runs[0]["board_game"]:
        seats = list(runs[0]["final"]["per_seat"])
        out["per_seat"] = {s: {k: round(statistics.fmean([x["final"]["per_seat"][s][k] for x in runs]), 4)
                               for k in ("win", "draw", "loss")} for s in seats}
        out["random_per_seat"] = {s: {k: round(statistics.fmean([x["random_detail"]["per_seat"][s][k] for x in runs]),
                                               4) for k in ("win", "draw", "loss")} for s in seats}
        out["beats_random"] = all(out["per_seat"][s]["win"] > out["random_per_seat"][s]["win"] for s in seats)
    else:
        out["beats_random"] = mean > out["random"]
    out["meets_target"] = None if r.target is None else mean >= r.target
    return out


def score_cells(row: dict, digits: int, arg_max: str) -> tuple[str, str]:
    """A row's score and random-baseline cells: per-seat win rates for board games, else mean +- std; the
    arg-max score of a sampled-policy recipe follows ``arg_max``."""
    if "per_seat" in row:
        score = ", ".join(f"{s} win {v['win']:.0%}" for s, v in row["per_seat"].items())
        rnd = ", ".join(f"{s} win {v['win']:.0%}" for s, v in row["random_per_seat"].items())
    else:
        score, rnd = f"{row['mean']:.{digits}f} +- {row['std']:.{digits}f}", f"{row['random']:.{digits}f}"
    if "deterministic_mean" in row:
        score += f" ({arg_max} {row['deterministic_mean']:.{digits}f})"
    return score, rnd


def markdown(rows: list[dict]) -> str:
    lines = ["| env | algo (backend) | seeds | final greedy score (mean +- std) | random | RL Zoo (published) | "
             "target | env steps | minutes |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['env']} | | | skipped: {row['skipped']} | | | | | |")
            continue
        score, rnd = score_cells(row, 1, "sampled policy; arg-max/mean action:")
        pub = RL_ZOO.get(row["env"])
        published = f"{pub[1]:.1f} +- {pub[2]:.1f} ({pub[0]}, {pub[3]} steps)" if pub else ""
        target = "" if row["target"] is None else f"{row['target']:g} ({'met' if row['meets_target'] else 'not met'})"
        lines.append(f"| {row['env']} | {row['algo']} ({row['backend']}) | {','.join(map(str, row['seeds']))} | "
                     f"{score} | {rnd} | "
                     f"{published} | {target} | {row['env_steps']} | {row['minutes']} |")
    return "\n".join(lines)


def machine() -> str:
    return f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def result_table(row: dict, backend: str, command: str) -> dict:
    result = {"status": "measured", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "machine": machine(), "seeds": row["seeds"], "backend": backend,
              "metric": "greedy return vs a random player (win 1, loss -1), mean over seats; per_seat: win/draw/loss"
              if "per_seat" in row else "mean greedy return over the scored seats", "mean": round(row["mean"], 4),
              "std": round(row["std"], 4), "random": round(row["random"], 4), "env_steps": row["env_steps"],
              "minutes": row["minutes"], "command": command}
    if "deterministic_mean" in row:
        result["deterministic_mean"] = round(row["deterministic_mean"], 4)
        result["metric"] = ("return of the sampled policy (deterministic_eval = false) vs a random player, mean over "
                            "seats; per_seat: win/draw/loss" if "per_seat" in row else
                            "mean return of the sampled policy (deterministic_eval = false) over the scored seats"
                            ) + "; deterministic_mean: the same with the arg-max / mean action"

    if "per_seat" in row:
        result["per_seat"], result["random_per_seat"] = row["per_seat"], row["random_per_seat"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", help="comma-separated env names (default: every recipe)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--minutes", type=float, default=15.0, help="cap on each training run (default 15)")
    parser.add_argument("--episodes", type=int, default=100, help="greedy test episodes (games per seat) at the end")
    parser.add_argument("--backend", default="torch", choices=["torch", "tf", "numpy", "auto"],
                        help="auto: numpy where bench/ measured it faster, else torch (each row names the one used)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", default="bench_suite.json", help="where to write the results")
    parser.add_argument("--write-results", action="store_true", help="write the scores into the recipes' [result]")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets, one seed: check that it runs")
    args = parser.parse_args(argv)
    if args.smoke and args.write_results:
        parser.error("--smoke runs are no results: leave out --write-results")
    names = args.env.split(",") if args.env else recipe_names()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.smoke:
        names, seeds, args.episodes = (names if args.env else ["CartPole-v1", "tictactoe_v3"]), seeds[:1], 2
    if args.backend == "torch":
        import torch

        torch.set_num_threads(args.threads)
    command = "python bench/bench_suite.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = []
    for name in names:
        r = recipe(name)
        r = smoke_recipe(r) if args.smoke else r.with_budget(minutes=min(r.budget.get("minutes", args.minutes),
                                                                         args.minutes))
        try:
            runs = [run_seed(r, seed, args.backend, args.episodes) for seed in seeds]
        except CLIError as exc:  # a missing optional package (Box2D, pymunk, rlcard, mpe2)
            print(f"{name}: skipped ({exc})", flush=True)
            rows.append({"env": name, "skipped": str(exc)})
            continue
        row = summarize(name, r, runs)
        rows.append(row)
        print(f"{name}: {row['mean']:.3f} +- {row['std']:.3f} (random {row['random']:.3f}), "
              f"{row['minutes']} min per seed ({row['cpu_minutes']} process CPU min), {row['backend']}", flush=True)
        if args.write_results:
            write_result(r.path, result_table(row, row["backend"], command))
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"machine": machine(), "backend": args.backend, "rl_zoo_source": RL_ZOO_URL, "rows": rows}, f,
                  indent=2, default=float)
    print()
    print(markdown(rows))
    print(f"\nRL Zoo figures: {RL_ZOO_URL} (one agent per env; LunarLander's is LunarLander-v2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
