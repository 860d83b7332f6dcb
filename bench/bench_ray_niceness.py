"""The Ray pool's actors at Ray's default worker niceness (15) against the pool's (0), idle or beside other jobs.

A short CartPole DQN run with 2 Ray actors (12 episodes, the pool tests' settings), ``--runs`` times under
each niceness: Ray started once per niceness in this process (``start_ray`` with ``RAY_worker_niceness``
set), the two alternating ``--rounds`` times so that the machine's load moves both alike. ``--load N``
starts N one-thread CPU-bound processes beside the runs (a shared machine) and stops them at the end.
Printed: the time from building the pool to its actors being ready, and each run's wall time; medians
and their ratio.

Run:  python bench/bench_ray_niceness.py [--load 2] [--rounds 2] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

HOG = "import numpy as np\na = np.random.rand(64, 64).astype(np.float32)\nwhile True: a = np.tanh(a @ a)"


def measure(niceness: int, runs: int) -> tuple[list[float], list[float]]:
    """``(actor start-up s, run s)`` of ``runs`` trainer runs on a Ray started at ``niceness``."""
    import ray

    from marl_note.agents.torch import DQN
    from marl_note.contrib.pool import ray_backend
    from marl_note.trainers import DecentralizedTrainer

    started: list[float] = []
    wait = ray_backend.RayPool._wait_started

    def timed(pool):
        t = time.perf_counter()
        wait(pool)
        started.append(time.perf_counter() - t)

    ray_backend.RayPool._wait_started = timed
    os.environ[ray_backend.NICENESS_VARIABLE] = str(niceness)
    try:
        ray_backend.start_ray(num_cpus=2)
        walls = []
        for _ in range(runs):
            t = time.perf_counter()
            trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=4, num_test_envs=2, update_freq=64,
                                           episodes_per_train=12, test_freq=6, episodes_per_test=2, seed=0,
                                           actors=2, sync_every=2, pool={"backend": "ray"})
            agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
                        learning_starts=32, seed=0, num_steps=3)
            trainer.train([agent], learning_mask=[1], plot=False, progress=False)
            walls.append(time.perf_counter() - t)
    finally:
        ray.shutdown()
        os.environ.pop(ray_backend.NICENESS_VARIABLE, None)
        ray_backend.RayPool._wait_started = wait
    return started, walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=0, help="one-thread CPU-bound processes started beside the runs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="trainer runs per Ray start")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load: {args.load} one-thread processes", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], env=env) for _ in range(args.load)]
    results: dict[int, tuple[list[float], list[float]]] = {15: ([], []), 0: ([], [])}
    try:
        for r in range(args.rounds):
            for niceness in ((15, 0) if r % 2 == 0 else (0, 15)):
                started, walls = measure(niceness, args.runs)
                results[niceness][0].extend(started)
                results[niceness][1].extend(walls)
                print(f"round {r}, niceness {niceness:2d}: actors ready {', '.join(f'{s:.2f}' for s in started)} s; "
                      f"runs {', '.join(f'{w:.2f}' for w in walls)} s", flush=True)
    finally:
        for hog in hogs:
            hog.terminate()
            hog.wait()
    med = {n: (statistics.median(s), statistics.median(w)) for n, (s, w) in results.items()}
    for n in (15, 0):
        print(f"niceness {n:2d}: median actors ready {med[n][0]:.2f} s, median run {med[n][1]:.2f} s")
    print(f"niceness 0 / 15: actors ready {med[0][0] / med[15][0]:.2f}x, run {med[0][1] / med[15][1]:.2f}x")


if __name__ == "__main__":
    main()
