"""Connect four self-play benchmark (not part of the test suite).

Runs the recipe of ``examples/connect_four_selfplay.py`` (DQN; an opponent pool of snapshots plus
two fixed opponents, a random player and a random player that takes wins; Elo; the weights with
the best worst-seat win rate kept) for a fixed budget of games per seed, then prints the
win/draw/loss rates of the kept learner against a random legal-move player in each seat (500 fresh
games per seat), the learner's Elo against its first snapshot, and the wall time. Target: >= 0.95
wins in each seat within a few minutes on 2 cores.

Run:  python bench/bench_connect_four.py [--episodes 15000] [--seeds 0,1,2]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform

HERE = os.path.dirname(os.path.abspath(__file__))


def load_example():
    path = os.path.join(HERE, os.pardir, "examples", "connect_four_selfplay.py")
    spec = importlib.util.spec_from_file_location("connect_four_selfplay", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=15000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--fixed-fraction", type=float, default=0.7)
    args = parser.parse_args()
    example = load_example()
    import torch

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__} (1 thread)")
    print(f"budget: {args.episodes} self-play games per seed, fixed_fraction={args.fixed_fraction}")
    mins = []
    for seed in (int(s) for s in args.seeds.split(",")):
        out = example.train(args.episodes, seed, fixed_fraction=args.fixed_fraction, progress=False)
        seats = "; ".join(f"{seat}: win {w:.1%} draw {d:.1%} loss {lo:.1%}"
                          for seat, (w, d, lo) in out["vs_random"].items())
        first = out["first_snapshot"]
        elo = f"Elo {out['elo']['learner']:.0f} vs first snapshot {out['elo'][first]:.0f}" if first else ""
        print(f"seed {seed}: {seats}; {elo}; {out['seconds']:.0f} s, {out['gradient_steps']} gradient steps",
              flush=True)
        mins.append(min(w for w, _, _ in out["vs_random"].values()))
    print(f"worst-seat win rate per seed: {[round(m, 3) for m in mins]}; "
          f"seeds reaching 0.95 in both seats: {sum(m >= 0.95 for m in mins)}/{len(mins)}")


if __name__ == "__main__":
    main()
