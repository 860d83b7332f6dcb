"""Threads: env steps per second of command-line runs with the frameworks' default thread count against one thread.

The runs of issue #33: ``train --env FrozenLake-v1 --env-arg map_name=8x8 --algo dqn``, ``train --env
Taxi-v4 --algo dqn`` and the zoo's CartPole recipe (``train --env CartPole-v1``), each for a fixed
number of env steps (``--env-steps``; the run's periodic and final tests included, as a user waits
for them), through ``marl_note.cli.main`` in this one process. "old" is the frameworks' default
(PyTorch: one intra-op thread per usable core, ``--threads`` that many), "new" the default now
(``--threads 1``). The two alternate run by run (interleaved, the order swapped each repeat), first
idle, then loaded: two CPU-bound busy-loop processes started by this script run beside it; one short
unmeasured run of each task comes first (imports and first-use costs). PyTorch's
inter-op pool is set once for the whole process (to one thread); it is idle for these networks.

Printed per run: env steps/s; then per task and load the median of each and the ratio new / old
(> 1: one thread is faster). Rates depend on the machine and whatever else runs on it: compare the
ratios of one invocation.

Run:  python bench/bench_threads.py [--repeats R] [--scale S] [--tasks frozenlake,taxi,cartpole] [--idle-only]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator

TASKS = {
    "frozenlake": (["--env", "FrozenLake-v1", "--env-arg", "map_name=8x8", "--algo", "dqn"], 3000),
    "taxi": (["--env", "Taxi-v4", "--algo", "dqn"], 6000),
    "cartpole": (["--env", "CartPole-v1"], 6000),  # the zoo's recipe
}


def busy_loop() -> None:
    """A CPU-bound process: what another job on a shared machine looks like to this one."""
    while True:
        pass


@contextlib.contextmanager
def busy_loops(n: int = 2) -> Iterator[None]:
    """``n`` busy-loop processes (:func:`busy_loop`) running beside the block: a loaded machine."""
    hogs = [mp.get_context("spawn").Process(target=busy_loop, daemon=True) for _ in range(n)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join()


def run_once(task: str, threads: int, scale: float) -> float:
    """Env steps per second of one command-line run of ``task`` with ``--threads threads``."""
    from marl_note.cli import main

    args, steps = TASKS[task]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "run")
        argv = ["train", *args, "--env-steps", str(max(100, int(steps * scale))), "--eval-episodes", "0",
                "--quiet", "--out", out, "--threads", str(threads)]
        printed = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(printed):
            status = main(argv)
        seconds = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({status}):\n{printed.getvalue()}")
        with open(os.path.join(out, "marl_note_run.json")) as f:
            env_steps = json.load(f)["env_steps"]
    return env_steps / seconds


def measure(tasks: list[str], repeats: int, scale: float, old: int, label: str) -> dict[tuple[str, str], list[float]]:
    rates: dict[tuple[str, str], list[float]] = {}
    for rep in range(repeats):
        for task in tasks:
            order = [("old", old), ("new", 1)] if rep % 2 == 0 else [("new", 1), ("old", old)]
            for name, threads in order:
                rate = run_once(task, threads, scale)
                rates.setdefault((task, name), []).append(rate)
                print(f"  {label:6s} {task:10s} {name} ({threads} thread{'s' if threads > 1 else ''}): "
                      f"{rate:8.0f} env steps/s", flush=True)
    return rates


def summary(rates: dict[tuple[str, str], list[float]], tasks: list[str], label: str) -> None:
    for task in tasks:
        old, new = statistics.median(rates[(task, "old")]), statistics.median(rates[(task, "new")])
        print(f"{label:6s} {task:10s} old {old:8.0f} env steps/s, new {new:8.0f} env steps/s: "
              f"new / old = {new / old:.2f}x (medians of {len(rates[(task, 'old')])})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies each task's env steps")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--idle-only", action="store_true")
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"--tasks: unknown {unknown}; known: {', '.join(TASKS)}")
    import torch

    from marl_note.agents.threads import usable_cores

    old = torch.get_num_threads()  # PyTorch's default: one per usable core
    print(f"{platform.machine()}, {usable_cores()} usable cores, load {os.getloadavg()[0]:.1f}; "
          f"old = {old} threads (PyTorch's default), new = 1", flush=True)
    for task in tasks:  # imports and first-use costs, paid before any measured run (else the first one pays them)
        run_once(task, 1, 0.01)
    results = {"idle": measure(tasks, args.repeats, args.scale, old, "idle")}
    if not args.idle_only:
        with busy_loops(2):
            results["loaded"] = measure(tasks, args.repeats, args.scale, old, "loaded")
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    for label, rates in results.items():
        summary(rates, tasks, label)


if __name__ == "__main__":
    main()
