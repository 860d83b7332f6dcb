"""PSRO exploitability against training time on OpenSpiel's kuhn and leduc poker.

Runs PSRO (:class:`marl_note.trainers.psro.PSRO`; DQN best responses, LP Nash meta-solver) for a
budget of process CPU seconds per seed, one thread, and prints the exact exploitability of the
meta-strategy mixture after every iteration with the CPU and wall seconds spent, then a summary
per game: the final exploitability per seed, the median, and whether it is under the issue's floor
(kuhn < 0.05 within 2 minutes, leduc < 0.30 within 10 minutes). The reference figure printed
beside it is the exploitability of the uniform random policy in the same run (OpenSpiel's code).

    OMP_NUM_THREADS=1 python bench/bench_psro.py --game kuhn_poker --seeds 0 1 2 --minutes 2
    OMP_NUM_THREADS=1 python bench/bench_psro.py --game leduc_poker --seeds 0 --minutes 10 \\
        --observation information_state --episodes 4000

``--csv FILE`` writes every iteration (game, seed, iteration, cpu, wall, exploitability) for a plot.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FLOORS = {"kuhn_poker": (0.05, 2.0), "leduc_poker": (0.30, 10.0)}


def run(game: str, seed: int, minutes: float, episodes: int, observation: str, hidden: int, meta_solver: str,
        rows: list) -> float:
    import torch

    from marl_note.agents.exploration.policies import EpsGreedyQPolicy
    from marl_note.agents.torch import DQN
    from marl_note.envs.openspiel import openspiel_env
    from marl_note.trainers import DecentralizedTrainer
    from marl_note.trainers.psro import PSRO

    torch.set_num_threads(1)
    trainer = DecentralizedTrainer(lambda: openspiel_env(game, observation=observation), num_train_envs=8,
                                   num_test_envs=1, episodes_per_train=episodes, episodes_per_test=1,
                                   test_freq=10 * episodes, update_freq=32, batch_size=64, seed=seed)
    spaces = trainer.observation_space("player_0"), trainer.action_space("player_0")
    # the learner's own steps: about 1.5 per kuhn episode, 2 per leduc episode
    anneal = max(200, int(0.7 * episodes * (1.5 if game == "kuhn_poker" else 2.0)))

    def make(i: int):
        return DQN(*spaces, hidden_sizes=(hidden, hidden), lr=1e-3, learning_starts=64, replay_ratio=0.5,
                   target_update=50, gamma=1.0, policy=EpsGreedyQPolicy(1.0, 0.02, n_steps_annealing=anneal),
                   seed=1000 * seed + i)

    psro = PSRO(trainer, make, game=game, observation=observation, meta_solver=meta_solver, seed=seed)
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    last = psro.exploitability().exploitability
    print(f"{game} seed {seed}: uniform random {last:.4f}", flush=True)
    while time.process_time() - start_cpu < 60 * minutes:
        logs = psro.step()
        cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start_wall
        if cpu > 60 * minutes:
            print(f"  iteration {logs['iteration']} ended past the budget ({cpu:.0f} s CPU): not counted", flush=True)
            break
        last = logs["exploitability"]
        rows.append([game, seed, logs["iteration"], f"{cpu:.1f}", f"{wall:.1f}", f"{last:.5f}"])
        print(f"  iteration {logs['iteration']:3d}: exploitability {last:.4f}  cpu {cpu:6.1f} s  wall {wall:6.1f} s",
              flush=True)
    trainer.close()
    return last


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--game", default="kuhn_poker")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=None, help="CPU minutes per seed (default: the issue's)")
    p.add_argument("--episodes", type=int, default=1500, help="training episodes per best response")
    p.add_argument("--observation", default="observation", choices=["observation", "information_state"])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--meta-solver", default="nash", choices=["nash", "prd", "uniform"])
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    floor, floor_minutes = FLOORS.get(args.game, (float("nan"), 2.0))
    minutes = args.minutes if args.minutes is not None else floor_minutes
    print(f"machine load: {os.getloadavg()}; {minutes} CPU minutes per seed, one thread", flush=True)
    rows: list = []
    finals = [run(args.game, s, minutes, args.episodes, args.observation, args.hidden, args.meta_solver, rows)
              for s in args.seeds]
    med = statistics.median(finals)
    print(f"{args.game} PSRO ({args.observation}, {args.episodes} episodes per best response): final "
          f"exploitability per seed {[round(f, 4) for f in finals]}, median {med:.4f}; floor {floor} within "
          f"{floor_minutes} min: {'met' if max(finals) < floor else 'NOT met'} (every seed), load {os.getloadavg()}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["game", "seed", "iteration", "cpu_seconds", "wall_seconds", "exploitability"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
