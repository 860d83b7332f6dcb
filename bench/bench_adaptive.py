"""Adaptive batch size against fixed batch sizes, and the learning-rate finder against a fixed-rate sweep
(not part of the test suite).

1. For each task (CartPole-v1 with DQN and with PPO, Acrobot-v1 with DQN) and seed: one run per
   fixed batch size in {32, 64, 128, 256, 512} and one per adaptive objective (``--objectives``:
   ``adabatch()`` with its defaults, ``objective="time"``, and/or ``"steps"``, bounded to [32, 512],
   starting at 64), each until the mean
   test return reaches the task's target (or the episode / wall budget runs out). Printed: env
   steps and wall time to the target per run, the median and best of the fixed runs, and the
   adaptive run's ratios to them. A figure per task (``--out``): the adaptive batch size and the
   measured B_simple over training. With several seeds, each configuration's median over the seeds
   is compared too (a single run to a target is a noisy draw: the same batch size takes 2-5x more
   or fewer env steps on another seed).
2. CartPole-v1 DQN (``--lr-tasks``: also ``acrobot-dqn``): ``LRFinder`` (loss metric) suggests a
   rate (the centre of the loss valley); fixed-rate runs over a grid of rates show which solve the
   task, and whether the suggestion lies inside that range.

Real numbers (long: an hour or more on 2 cores; `--workers N` runs N at a time on N idle cores):
    python bench/bench_adaptive.py --seeds 0,1,2 --out runs/bench_adaptive
Smoke run (a minute; budgets far too small to solve anything):
    python bench/bench_adaptive.py --quick --out /tmp/bench_adaptive
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

import numpy as np

from marl_note.contrib.adaptive import adabatch
from marl_note.contrib.finders.finders import LRFinder
from marl_note.trainers import DecentralizedTrainer

FIXED = (32, 64, 128, 256, 512)
# task: env id, algorithm, target mean test return, trainer settings, agent settings
TASKS: dict[str, tuple[str, str, float, dict[str, Any], dict[str, Any]]] = {
    "cartpole-dqn": ("CartPole-v1", "DQN", 475.0, dict(num_train_envs=16, update_freq=100, test_freq=50), {}),
    "cartpole-ppo": ("CartPole-v1", "PPO", 475.0, dict(num_train_envs=16, update_freq=2048, test_freq=50), {}),
    "acrobot-dqn": ("Acrobot-v1", "DQN", -100.0, dict(num_train_envs=16, update_freq=100, test_freq=20), {}),
}


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    import importlib

    return importlib.import_module(f"marl_note.agents.{name}")


# --quick: small envs counts, rollouts and warm-ups so that every path runs in seconds
QUICK: dict[str, dict[str, Any]] = {"trainer": {}, "agent": {}}


def one_run(task: str, mod: Any, seed: int, batch: int | None, max_episodes: int, max_minutes: float,
            agent_kw: dict[str, Any] | None = None, objective: str = "time") -> dict[str, Any]:
    """One training run to the task's target; ``batch=None``: the adaptive batch size from 64."""
    env_id, algo, target, trainer_kw, base_kw = TASKS[task]
    trainer_kw = {"num_test_envs": 10, "episodes_per_test": 10, **trainer_kw, **QUICK["trainer"]}
    base_kw = {**base_kw, **QUICK["agent"].get(algo, {})}
    start = time.perf_counter()
    trainer = DecentralizedTrainer(env_id, batch_size=batch or 64,
                                   episodes_per_train=max_episodes, seed=seed,
                                   stop_fn=lambda m, e: m >= target or time.perf_counter() - start > 60 * max_minutes,
                                   **trainer_kw)
    agent = getattr(mod, algo)(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed,
                               **{**base_kw, **(agent_kw or {})})
    callbacks = [] if batch is not None else [adabatch({"min": 32, "max": 512}, seed=seed, objective=objective)]
    stats = trainer.train([agent], learning_mask=[1], callbacks=callbacks, plot=False, progress=False)
    trainer.close()
    out = {"batch": batch or f"adaptive-{objective}", "solved": stats["best_reward"] >= target,
           "env_steps": stats["num_collected_steps"], "wall_s": round(stats["training_time"], 1),
           "best": stats["best_reward"]}
    if callbacks:
        cb = callbacks[0]
        out["history"] = {k: cb.history[k].values() for k in ("batch_size", "batch_target", "b_simple")}
        out["final_batch"] = trainer.batch_size
    return out


def plot_history(task: str, seed: int, history: dict[str, list], out_dir: str) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5))
    ax = fig.add_subplot()
    for name, style in (("batch_size", "-"), ("batch_target", "--"), ("b_simple", ":")):
        pts = np.asarray(history[name], float).reshape(-1, 2)
        if len(pts):
            ax.plot(pts[:, 0], pts[:, 1], style, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("training episodes")
    ax.set_title(f"{task}, seed {seed}: adaptive batch size, its target and B_simple")
    ax.legend()
    path = os.path.join(out_dir, f"adaptive_{task}_seed{seed}.png")
    fig.savefig(path, dpi=100)
    return path


def compare(runs: list[dict[str, Any]], key: str) -> str:
    """Each adaptive run's ``key`` against the median and the best of the fixed runs (unsolved: inf)."""
    value = {r["batch"]: (r[key] if r["solved"] else float("inf")) for r in runs}
    fixed = [v for b, v in value.items() if isinstance(b, int)]
    median, best = statistics.median(fixed), min(fixed)
    parts = []
    for name, ada in value.items():
        if isinstance(name, int):
            continue
        verdict = "<= median" if ada <= median else "> median"
        ratio = ada / best if np.isfinite(best) and best > 0 else float("nan")
        parts.append(f"{name} {ada} ({verdict}, {ratio:.2f}x the best)")
    return f"{key}: fixed median {median}, best {best}; " + "; ".join(parts)


def _job(args: tuple) -> dict[str, Any]:
    """One run of the batch benchmark in a worker process (``--workers``): the backend by name, and the
    smoke settings passed along (a spawned process starts with this module's defaults)."""
    task, backend_name, seed, batch, objective, max_episodes, max_minutes, quick = args
    QUICK.update(quick)
    run = one_run(task, backend(backend_name), seed, batch, max_episodes, max_minutes, objective=objective or "time")
    return {**run, "task": task, "seed": seed, "objective": objective}


def _numbered_job(item: tuple[int, tuple]) -> tuple[int, dict[str, Any]]:
    return item[0], _job(item[1])


def batch_benchmark(tasks: list[str], backend_name: str, seeds: list[int], sizes: tuple[int, ...], max_episodes: int,
                    max_minutes: float, out_dir: str, objectives: tuple[str, ...] = ("time",),
                    workers: int = 1) -> None:
    """Every (task, seed, configuration) run, ``workers`` at a time in processes of one torch thread each
    (on a machine with that many idle cores; the configurations then share the machine alike), and the
    comparisons per seed and over seeds."""
    configs = (*((b, "") for b in sizes), *((None, o) for o in objectives))
    jobs = [(task, backend_name, seed, batch, objective, max_episodes, max_minutes, dict(QUICK))
            for task in tasks for seed in seeds for batch, objective in configs]
    if workers > 1:
        import multiprocessing

        done: dict[int, dict[str, Any]] = {}
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for k, run in pool.imap_unordered(_numbered_job, enumerate(jobs)):
                done[k] = run
                print(f"  [{len(done)}/{len(jobs)}] {run['task']} seed {run['seed']} {run['batch']}: "
                      f"solved {run['solved']}, {run['env_steps']} env steps, {run['wall_s']} s", flush=True)
        results = [done[k] for k in range(len(jobs))]  # the order of the serial run (medians pair runs by it)
    else:
        results = [_job(job) for job in jobs]
    for task in tasks:
        by_seed = []
        for seed in seeds:
            full_runs = [r for r in results if r["task"] == task and r["seed"] == seed]
            runs = [{k: v for k, v in r.items() if k not in ("task", "seed", "objective", "history")}
                    for r in full_runs]
            for run, full in zip(runs, full_runs):
                history, objective = full.get("history"), full["objective"]
                print(f"  {task} seed {seed}: {run}", flush=True)
                if history is not None:
                    print(f"    plot: {plot_history(f'{task}-{objective}', seed, history, out_dir)}")
            print(f"{task} seed {seed}: {compare(runs, 'env_steps')}")
            print(f"{task} seed {seed}: {compare(runs, 'wall_s')}", flush=True)
            by_seed.append(runs)
        if len(seeds) > 1:  # one run per seed is a noisy draw: compare each configuration's median over seeds
            medians = [{"batch": run["batch"], "solved": True,
                        **{key: statistics.median(r[key] if r["solved"] else float("inf")
                                                  for r in (runs[i] for runs in by_seed))
                           for key in ("env_steps", "wall_s")}}
                       for i, run in enumerate(by_seed[0])]
            print(f"{task} medians over seeds {seeds}: " + ", ".join(
                f"{m['batch']}: {m['env_steps']:.0f} env steps / {m['wall_s']:.1f} s" for m in medians))
            print(f"{task} over seeds: {compare(medians, 'env_steps')}")
            print(f"{task} over seeds: {compare(medians, 'wall_s')}", flush=True)


def lr_benchmark(task: str, mod: Any, seed: int, rates: np.ndarray, finder_num: int, finder_episodes: int,
                 max_episodes: int, max_minutes: float, out_dir: str) -> None:
    """LRFinder's suggestion on a DQN task against the fixed rates that solve it."""
    env_id, algo, _, trainer_kw, base_kw = TASKS[task]
    finder = LRFinder(lambda trainer: getattr(mod, algo)(trainer.observation_space("agent_0"),
                                                         trainer.action_space("agent_0"), seed=seed,
                                                         **{**base_kw, **QUICK["agent"].get(algo, {})}))
    settings = {k: v for k, v in {**trainer_kw, **QUICK["trainer"]}.items() if k != "test_freq"}
    result = finder.find(env_id, start_lr=1e-5, end_lr=1.0, num=finder_num, episodes_per_train=finder_episodes,
                         seed=seed, **settings)
    try:
        suggestion, valley = result.suggestion(), result.valley()
    except ValueError as exc:  # too few points (the smoke run)
        print(f"LRFinder on {task}: {result!r}; no suggestion: {exc}")
        return
    span = "none" if valley is None else f"{valley[0]:.3g} .. {valley[1]:.3g}"
    plot = result.plot(os.path.join(out_dir, f"lr_finder_{task}.png"))
    print(f"LRFinder on {task}: {result!r}; valley {span}; suggestion {suggestion:.3g} (steepest point "
          f"{result.suggestion(method='steepest'):.3g}); plot {plot}")
    solving = []
    for lr in rates:
        run = one_run(task, mod, seed, 64, max_episodes, max_minutes, {"lr": float(lr)})
        print(f"  {task} fixed lr {lr:.3g}: {run}", flush=True)
        if run["solved"]:
            solving.append(float(lr))
    if solving:
        inside = min(solving) <= suggestion <= max(solving)
        print(f"{task}: fixed rates that solve it: {min(solving):.3g} .. {max(solving):.3g} ({len(solving)} of "
              f"{len(rates)}); the suggestion {suggestion:.3g} is {'inside' if inside else 'outside'}")
    else:
        print(f"{task}: no fixed rate solved it within the budget")


def seed_list(text: str) -> list[int]:
    """``"0,1,2"`` or a range ``"0-7"`` (or both: ``"0-3,9"``)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--only", default="cartpole-dqn,cartpole-ppo,acrobot-dqn,lr")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds or ranges: 0,1,2 or 0-7")
    parser.add_argument("--max-episodes", type=int, default=3000)
    parser.add_argument("--max-minutes", type=float, default=15.0, help="wall-time budget of each run")
    parser.add_argument("--out", default="runs/bench_adaptive", help="directory of the plots")
    parser.add_argument("--batches", default=",".join(map(str, FIXED)), help="the fixed batch sizes compared")
    parser.add_argument("--objectives", default="time",
                        help="the adaptive batch rule's objectives compared (time, steps; comma-separated)")
    parser.add_argument("--lr-tasks", default="cartpole-dqn", help="DQN tasks of the LRFinder check (lr)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, two batch sizes, one seed")
    parser.add_argument("--workers", type=int, default=1,
                        help="batch runs at a time, each a process of one torch thread (up to the idle cores)")
    args = parser.parse_args()
    if args.workers < 1:
        raise SystemExit(f"--workers must be at least 1, got {args.workers}")
    os.makedirs(args.out, exist_ok=True)
    mod = backend(args.backend)
    seeds = seed_list(args.seeds)
    sizes, episodes, minutes = tuple(int(b) for b in args.batches.split(",")), args.max_episodes, args.max_minutes
    rates, finder_num, finder_episodes = np.geomspace(1e-4, 1e-1, 7), 60, 400
    if args.quick:
        sizes, episodes, minutes, seeds = (32, 64), 6, 0.5, seeds[:1]
        rates, finder_num, finder_episodes = np.array([1e-3, 1e-2]), 6, 30
        QUICK["trainer"] = {"num_train_envs": 4, "update_freq": 128, "test_freq": 3, "num_test_envs": 2,
                            "episodes_per_test": 2}
        QUICK["agent"] = {"DQN": {"learning_starts": 128, "replay_ratio": 0.03}, "PPO": {"n_steps": 128, "n_epochs": 2}}
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, backend {args.backend}, "
          f"seeds {seeds}, fixed batches {sizes}{', QUICK (smoke run)' if args.quick else ''}")
    tasks = [t for t in args.only.split(",") if t != "lr"]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}, lr")
    objectives = tuple(o for o in args.objectives.split(",") if o)
    bad = [o for o in objectives if o not in ("time", "steps")]
    if bad or not objectives:
        raise SystemExit(f"unknown objective(s) {bad or args.objectives!r}; choose from time, steps")
    batch_benchmark(tasks, args.backend, seeds, sizes, episodes, minutes, args.out, objectives, args.workers)
    if "lr" in args.only.split(","):
        for task in args.lr_tasks.split(","):
            lr_benchmark(task, mod, seeds[0], rates, finder_num, finder_episodes, episodes, minutes, args.out)


if __name__ == "__main__":
    main()
