"""The self-play recipes at their full budget, numpy backend against torch: wall time and final strength.

    python bench/bench_numpy_selfplay.py [--env tictactoe_v3] [--seeds 0] [--backends numpy,torch]
                                         [--games 200] [--minutes 15] [--smoke]

For each seed, the zoo recipe (``marl_note/cli/recipes/ENV.toml``: tic-tac-toe's is the demo's DQN
self-play, one network in both seats) is trained with each backend back to back in this one process (the
order alternates with the seed), one thread each (the trainer's ``threads="auto"``: one torch thread, one
BLAS thread, warmed up), within the recipe's budget (``--minutes`` caps a run; the recipe's own cap
otherwise). Reported per run: the wall and process CPU time of ``train()`` (with the recipe's periodic
tests, as the recipe runs them), its split into collecting, updating and testing, the env and gradient
steps, and the final greedy strength as ``bench/bench_strength.py`` measures it: ``--games`` games per seat
against a random legal-move player, ``WinOrBlockPlayer`` and (tic-tac-toe) ``PerfectTicTacToePlayer`` or
(connect four) ``AlphaBetaPlayer(depth=2)``. The last lines are the medians over the seeds and numpy's wall
and CPU time as a ratio of torch's (issue #34's floor: at least 2x faster, i.e. <= 0.5x, the same strength), then
each seed's ratios of the wall time, of the wall time per env step (the backends' float rounding sends a seed down
other games, of other lengths, in the same number of games) and of the update time per gradient step.

``--smoke`` cuts the recipe to 400 env steps and 4 games per seat (a smoke test of the script, not a
measurement).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread from numpy's import on

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_strength import strength  # noqa: E402
from pettingzoo.classic import connect_four_v3, tictactoe_v3  # noqa: E402

from marl_note.agents import RandomAgent  # noqa: E402
from marl_note.cli.zoo import recipe  # noqa: E402
from marl_note.cli.zoo_run import prepare  # noqa: E402
from marl_note.contrib.board_games import AlphaBetaPlayer, PerfectTicTacToePlayer, WinOrBlockPlayer  # noqa: E402

GAMES = {"tictactoe_v3": tictactoe_v3.env, "connect_four_v3": connect_four_v3.env}


def opponents(env: str, space: Any, seed: int) -> dict[str, Any]:
    if env == "tictactoe_v3":
        return {"random": RandomAgent(space, seed=seed + 1),
                "win-or-block": WinOrBlockPlayer("tictactoe", seed=seed + 2),
                "perfect": PerfectTicTacToePlayer(seed=seed + 3)}
    return {"random": RandomAgent(space, seed=seed + 1), "win-or-block": WinOrBlockPlayer(seed=seed + 2),
            "alpha-beta d2": AlphaBetaPlayer(2, seed=seed + 5)}


def run_one(env: str, seed: int, backend: str, games: int, minutes: float | None, smoke: bool) -> dict[str, Any]:
    r = recipe(env)
    if smoke:
        r = r.with_budget(env_steps=400, minutes=None, episodes=None)
    elif minutes is not None:
        r = r.with_budget(minutes=minutes)
    run = prepare(r, seed=seed, backend=backend)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        stats = run.train()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        learners = list({id(a): a for a in run.learners.values()}.values())
        if len(learners) != 1:
            raise SystemExit(f"{env}: a self-play recipe has one learner in every seat, got {len(learners)}")
        learner = learners[0]
        measured = strength(GAMES[env], learner, opponents(env, learner.action_space, seed), games, seed)
    finally:
        run.close()
    return {"backend": run.backend, "seed": seed, "wall_s": wall, "cpu_s": cpu, "split": stats.get("time_split", {}),
            "env_steps": stats["num_collected_steps"], "gradient_steps": stats["num_gradient_steps"],
            "episodes": stats["num_collected_episodes"], "budget": stats.get("stopped_by_budget") or "episodes",
            "strength": measured}


def cells(table: dict[str, dict[str, Any]]) -> str:
    out = []
    for name, seats in table.items():
        per = ", ".join(f"{seat} W{r['win']:.0%}/D{r['draw']:.0%}/L{r['loss']:.0%}" for seat, r in seats.items()
                        if seat != "seconds")
        out.append(f"vs {name}: {per}")
    return "; ".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="tictactoe_v3", choices=sorted(GAMES))
    p.add_argument("--seeds", default="0")
    p.add_argument("--backends", default="numpy,torch")
    p.add_argument("--games", type=int, default=200, help="greedy games per seat and opponent at the end")
    p.add_argument("--minutes", type=float, default=None, help="cap on each run (default: the recipe's)")
    p.add_argument("--smoke", action="store_true", help="400 env steps, 4 games per seat: a smoke test")
    args = p.parse_args()
    if args.smoke:
        args.games = 4
    backends = args.backends.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{platform.platform()}, {os.cpu_count()} CPUs; {args.env} recipe, seeds {seeds}, backends {backends}; "
          f"load {os.getloadavg()}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        for backend in (backends if seed % 2 == 0 else backends[::-1]):
            r = run_one(args.env, seed, backend, args.games, args.minutes, args.smoke)
            runs.setdefault(backend, []).append(r)
            split = ", ".join(f"{k} {v:.0f} s" for k, v in r["split"].items())
            print(f"  seed {seed} {backend:6s} wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s ({split}); "
                  f"{r['episodes']} games, {r['env_steps']} env steps, {r['gradient_steps']} gradient steps, "
                  f"stopped by {r['budget']}; load {os.getloadavg()[0]:.1f}", flush=True)
            print(f"    {cells(r['strength'])}", flush=True)
    medians = {b: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")} for b, rs in runs.items()}
    for b, m in medians.items():
        print(f"  {b:6s} median wall {m['wall_s']:.1f} s, CPU {m['cpu_s']:.1f} s", flush=True)
    if "torch" in medians and "numpy" in medians:
        n, t = medians["numpy"], medians["torch"]
        print(f"  numpy / torch: wall {n['wall_s'] / t['wall_s']:.2f}x, CPU {n['cpu_s'] / t['cpu_s']:.2f}x "
              f"(issue #34: <= 0.5x, the same strength)", flush=True)
        print(f"  numpy / torch per seed: {per_seed(runs['numpy'], runs['torch'])}", flush=True)


def per_seed(numpy_runs: list[dict[str, Any]], torch_runs: list[dict[str, Any]]) -> str:
    """Each seed's ratios: of the wall time, of the wall time per env step (the two backends play other games,
    of other lengths, to the same number of games) and of the update time per gradient step."""
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b > 0 else "n/a"

    pairs = list(zip(numpy_runs, torch_runs, strict=True))
    wall = " / ".join(ratio(n["wall_s"], t["wall_s"]) for n, t in pairs)
    env = " / ".join(ratio(n["wall_s"] / max(n["env_steps"], 1), t["wall_s"] / max(t["env_steps"], 1))
                     for n, t in pairs)
    step = " / ".join(ratio(n["split"].get("update_s", 0.0) / max(n["gradient_steps"], 1),
                            t["split"].get("update_s", 0.0) / max(t["gradient_steps"], 1)) for n, t in pairs)
    return f"wall {wall}; wall per env step {env}; update time per gradient step {step}"


if __name__ == "__main__":
    main()
