"""PSRO exploitability against training time on OpenSpiel's kuhn and leduc poker.

Runs PSRO (:class:`marl_note.trainers.psro.PSRO`; DQN best responses, numpy backend, squared TD loss,
gamma 1, LP Nash meta-solver) for a budget of process CPU seconds per seed, one thread, and prints the
exact exploitability of the meta-strategy mixture after every iteration with the CPU and wall seconds
spent and the best responses' gap (what OpenSpiel's best response to the mixture wins minus what the
trained one wins; ``--best-response exact`` uses OpenSpiel's as the oracle, a reference), then a summary
per game: the final exploitability per seed, the median, and whether it is under the issue's floor
(kuhn < 0.05 within 2 minutes, leduc < 0.30 within 10 minutes). The reference figure printed
beside it is the exploitability of the uniform random policy in the same run (OpenSpiel's code).

    OMP_NUM_THREADS=1 python bench/bench_psro.py --game kuhn_poker --seeds 0 1 2 --minutes 2
    OMP_NUM_THREADS=1 python bench/bench_psro.py --game leduc_poker --seeds 0 --minutes 10 \\
        --observation information_state --episodes 4000

``--csv FILE`` writes every iteration (game, seed, iteration, cpu, wall, exploitability, the trained and
the exact best response's values against the mixture, their gap) for a plot.
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


def run(game: str, seed: int, minutes: float, args: argparse.Namespace, rows: list) -> float:
    from marl_note.agents.exploration.policies import EpsGreedyQPolicy
    from marl_note.envs.openspiel import openspiel_env
    from marl_note.trainers import DecentralizedTrainer
    from marl_note.trainers.psro import PSRO

    if args.backend == "torch":
        import torch

        from marl_note.agents.torch import DQN
        torch.set_num_threads(1)
    else:
        from marl_note.agents.numpy import DQN  # type: ignore[assignment]
    episodes, observation = args.episodes, args.observation
    trainer = DecentralizedTrainer(lambda: openspiel_env(game, observation=observation), num_train_envs=args.envs,
                                   num_test_envs=1, episodes_per_train=episodes, episodes_per_test=1,
                                   test_freq=10 * episodes, update_freq=args.update_freq,
                                   batch_size=args.batch_size, seed=seed)
    spaces = trainer.observation_space("player_0"), trainer.action_space("player_0")
    # the learner's own steps: about 1.5 per kuhn episode, 2 per leduc episode
    anneal = max(200, int(args.anneal * episodes * (1.5 if game == "kuhn_poker" else 2.0)))

    def make(i: int):
        return DQN(*spaces, hidden_sizes=(args.hidden,) * args.layers, lr=args.lr, learning_starts=64,
                   replay_ratio=args.replay_ratio, target_update=args.target_update, gamma=1.0,
                   criterion=args.criterion,
                   policy=EpsGreedyQPolicy(1.0, args.eps_end, n_steps_annealing=anneal), seed=1000 * seed + i)

    psro = PSRO(trainer, make, game=game, observation=observation, meta_solver=args.meta_solver,
                best_response=args.best_response, seed=seed)
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
        rows.append([game, seed, logs["iteration"], f"{cpu:.1f}", f"{wall:.1f}", f"{last:.5f}",
                     f"{logs['br_value']:.5f}", f"{logs['br_exact_value']:.5f}", f"{logs['br_gap']:.5f}"])
        print(f"  iteration {logs['iteration']:3d}: exploitability {last:.4f}  BR gap {logs['br_gap']:.4f} "
              f"(trained {logs['br_value']:.4f}, exact {logs['br_exact_value']:.4f})  cpu {cpu:6.1f} s  "
              f"wall {wall:6.1f} s", flush=True)
        if args.iterations is not None and logs["iteration"] >= args.iterations:
            break
    trainer.close()
    return last


def parser() -> argparse.ArgumentParser:
    """The options (also read by ``bench_exploitability.py --methods psro``, which runs PSRO with these defaults)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--game", default="kuhn_poker")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=None, help="CPU minutes per seed (default: the issue's)")
    p.add_argument("--episodes", type=int, default=1500, help="training episodes per best response")
    p.add_argument("--observation", default="observation", choices=["observation", "information_state"])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2, help="hidden layers of the best response's Q-network")
    p.add_argument("--meta-solver", default="nash", choices=["nash", "prd", "uniform"])
    p.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eps-end", type=float, default=0.02, help="epsilon at the end of its annealing")
    p.add_argument("--anneal", type=float, default=0.7, help="fraction of a best response's steps annealing epsilon")
    p.add_argument("--replay-ratio", type=float, default=0.5)
    p.add_argument("--target-update", type=int, default=50)
    p.add_argument("--criterion", default="mse", choices=["huber", "mse"],
                   help="the Q-learning loss (Huber's fit is not the mean of returns of +-2 chips)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--update-freq", type=int, default=32)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--iterations", type=int, default=None, help="stop after this many iterations")
    p.add_argument("--best-response", default="trained", choices=["trained", "exact"],
                   help="exact: OpenSpiel's best response as each new member (a comparison, not RL)")
    p.add_argument("--csv", default=None)
    return p


def main() -> None:
    args = parser().parse_args()
    floor, floor_minutes = FLOORS.get(args.game, (float("nan"), 2.0))
    minutes = args.minutes if args.minutes is not None else floor_minutes
    print(f"machine load: {os.getloadavg()}; {minutes} CPU minutes per seed, one thread", flush=True)
    rows: list = []
    finals = [run(args.game, s, minutes, args, rows) for s in args.seeds]
    med = statistics.median(finals)
    oracle = (f"{args.episodes} episodes per trained best response" if args.best_response == "trained"
              else "EXACT best responses (OpenSpiel's oracle; a reference, not the RL floor)")
    verdict = ("met" if max(finals) < floor else "NOT met") if args.best_response == "trained" else "n/a (exact oracle)"
    print(f"{args.game} PSRO ({args.observation}, {oracle}): final exploitability per seed "
          f"{[round(f, 4) for f in finals]}, median {med:.4f}; floor {floor} within {floor_minutes} min: "
          f"{verdict} (every seed), load {os.getloadavg()}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["game", "seed", "iteration", "cpu_seconds", "wall_seconds", "exploitability", "br_value",
                        "br_exact_value", "br_gap"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
