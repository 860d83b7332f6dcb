"""Do the zoo's recipes generalise? Each recipe's settings, unchanged, on a sibling env outside the public suite.

``bench_suite.py`` measures every recipe on its own env. Here each pair in ``PAIRS`` trains one
recipe's settings (algorithm, agent options, wrappers, trainer options, budget) on another env of
the same family that the recipe was never tuned on (:meth:`marl_note.cli.zoo.Recipe.on_env`: the
recipe's env arguments, stop reward, target and scored seats stay behind), then scores the trained
agents against random players measured in the same run, exactly as ``bench_suite.py`` does. A pair
"generalises" when it clearly beats random: its score is above the random score by more than two
standard errors of the noisier of the two (for board games: more wins than a random player in every
seat). For Gymnasium envs the table also says whether the score reaches the env's registered
``reward_threshold``: beating random is a floor, and a policy can beat random without solving the
task (SAC that learns to stand still on MountainCarContinuous scores 0 against random's -33).

Writes ``--json`` (default bench_transfer.json) and prints a markdown table.

Run:  python bench/bench_transfer.py                          # every pair, seed 0, <= 6 minutes a run
      python bench/bench_transfer.py --pairs leduc_holdem_v4,Blackjack-v1 --seeds 0,1 --minutes 10
      python bench/bench_transfer.py --smoke                  # tiny budgets: check that it runs
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_suite import machine, run_seed, score_cells, smoke_recipe, summarize  # noqa: E402

from marl_note.cli.common import CLIError  # noqa: E402
from marl_note.cli.zoo import recipe  # noqa: E402

# (recipe, sibling env outside the suite, that env's arguments, why this pair)
PAIRS = [
    ("CartPole-v1", "Blackjack-v1", {}, "DQN on a Tuple observation (toy text)"),
    ("CartPole-v1", "FrozenLake-v1", {}, "DQN on a Discrete observation, slippery, sparse reward"),
    ("LunarLander-v3", "LunarLander-v3", {"continuous": True}, "PPO with Box actions instead of Discrete"),
    ("Pendulum-v1", "MountainCarContinuous-v0", {}, "SAC with a sparse goal reward"),
    ("texas_holdem_v4", "leduc_holdem_v4", {}, "PPO self-play on another rlcard poker"),
    ("simple_spread_v3", "simple_reference_v3", {}, "shared PPO, cooperative MPE with communication"),
    ("simple_tag_v3", "simple_speaker_listener_v4", {}, "shared PPO over unlike seats (3 vs 11 features)"),
    ("pursuit_v5", "multiwalker_v9", {}, "shared PPO, sisl with Box actions, walkers fall"),
    ("pistonball_v6", "cooperative_pong_v6", {}, "shared PPO from pixels, another butterfly game"),
]


def pair_key(env: str, kwargs: dict) -> str:
    return env + "".join(f",{k}={v}" for k, v in kwargs.items())


def beats_random(row: dict) -> bool:
    """Clearly above random: for board games more wins in every seat; else a gap wider than both spreads."""
    if "per_seat" in row:
        return bool(row["beats_random"])
    runs = row["runs"]
    spread = max(max(x["final"].get("std", 0.0) for x in runs), max(x["random_detail"].get("std", 0.0) for x in runs))
    episodes = min(x["final"].get("episodes", 1) for x in runs)
    return row["mean"] - row["random"] > 2 * spread / max(episodes, 1) ** 0.5  # two standard errors


def reward_threshold(env: str) -> float | None:
    """Gymnasium's ``reward_threshold`` for a Gymnasium id (the score its registry calls solved), else None."""
    import gymnasium

    try:
        return gymnasium.spec(env).reward_threshold
    except gymnasium.error.Error:  # a PettingZoo name
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", help="comma-separated sibling envs of PAIRS (default: every pair)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--minutes", type=float, default=6.0, help="cap on each training run (default 6)")
    parser.add_argument("--episodes", type=int, default=100, help="test episodes (games per seat) at the end")
    parser.add_argument("--json", default="bench_transfer.json", help="where to write the results")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets, one seed, two pairs: check that it runs")
    args = parser.parse_args(argv)
    pairs = PAIRS
    if args.pairs:
        wanted = args.pairs.split(",")
        unknown = [w for w in wanted if w not in {p[1] for p in PAIRS}]
        if unknown:
            parser.error(f"--pairs: no pair for {unknown}; known: {', '.join(p[1] for p in PAIRS)}")
        pairs = [p for p in PAIRS if p[1] in wanted]
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.smoke:
        pairs, seeds, args.episodes = (pairs if args.pairs else [PAIRS[0], PAIRS[4]]), seeds[:1], 2
    import torch

    torch.set_num_threads(1)
    rows = []
    for name, env, kwargs, why in pairs:
        r = recipe(name).on_env(env, kwargs)
        r = smoke_recipe(r) if args.smoke else r.with_budget(minutes=min(r.budget.get("minutes", args.minutes),
                                                                         args.minutes))
        key = pair_key(env, kwargs)
        try:
            runs = [run_seed(r, seed, "torch", args.episodes) for seed in seeds]
        except CLIError as exc:  # a missing optional package
            print(f"{key}: skipped ({exc})", flush=True)
            rows.append({"env": key, "recipe": r.label, "skipped": str(exc)})
            continue
        row = summarize(key, r, runs)
        row["why"], row["generalises"], row["threshold"] = why, beats_random(row), reward_threshold(env)
        rows.append(row)
        print(f"{r.label}: {row['mean']:.3f} +- {row['std']:.3f} (random {row['random']:.3f}), "
              f"{row['env_steps']} env steps, {row['minutes']} min", flush=True)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"machine": machine(), "minutes_cap": args.minutes, "rows": rows}, f, indent=2, default=float)
    print()
    print(markdown(rows))
    return 0


def markdown(rows: list[dict]) -> str:
    lines = ["| recipe | on env | what is new | seeds | score | random | beats random | solved (Gymnasium's "
             "reward_threshold) | env steps | minutes |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        origin = row["recipe"].rsplit(" on ", 1)[0]
        if "skipped" in row:
            lines.append(f"| {origin} | {row['env']} | | | skipped: {row['skipped']} | | | | | |")
            continue
        score, rnd = score_cells(row, 2, "sampled; arg-max")
        seeds = ",".join(map(str, row["seeds"]))
        threshold = row.get("threshold")
        solved = "" if threshold is None else f"{'yes' if row['mean'] >= threshold else 'no'} ({threshold:g})"
        lines.append(f"| {origin} | {row['env']} | {row['why']} | {seeds} | {score} | {rnd} | "
                     f"{'yes' if row['generalises'] else 'no'} | {solved} | {row['env_steps']} | {row['minutes']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
