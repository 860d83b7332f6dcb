"""Before vs after: the same benchmarks run from two revisions of the repository, interleaved.

A restructuring that moves no algorithm math must leave collection speed and learning unchanged.
This script checks out ``--before`` (a git revision) into a temporary worktree, then runs, round by
round and alternating which revision goes first, each revision's own ``bench/bench_collect.py``
(collector speed on tic-tac-toe, CPU time, as ratios to the raw PettingZoo loop measured in the
same process) and the training runs of ``bench/bench_learning.py`` (CartPole-v1, DQN and PPO with
their defaults, 16 train envs, seed 0, one torch thread) for a fixed 400 training episodes: env
steps, gradient steps, and the CPU time of the training process (steadier than wall time on a shared
machine; both are printed). Each run is a fresh interpreter whose ``marl_note`` is that revision's.
Printed: every figure of both revisions and the ratio after / before (median over rounds); the env
and gradient step counts should match exactly (the same seeds, the same math), and the time ratios
be 1 within noise.

Run:  python bench/bench_versions.py --before a6e0003 [--after WORKTREE] [--rounds 3] [--steps 20000]

``--after`` is a directory holding the revision to compare (default: this repository's working
tree). The temporary worktree is removed at the end.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
_RATE = re.compile(r"^(collector, [^\d]+?)\s+(\d+) agent-steps/s\s+([\d.]+)x raw loop", re.M)


def run(tree: Path, args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(args)} failed in {tree} (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


# The same calls in both revisions: bench_learning.cartpole's trainer, for a fixed number of episodes.
_TRAIN = """
import sys, time
import torch
torch.set_num_threads(1)
from marl_note.agents.torch import DQN, PPO
from marl_note.trainers import DecentralizedTrainer
on_policy = sys.argv[1] == "PPO"
trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=16, num_test_envs=10,
                               update_freq=2048 if on_policy else 100, test_freq=50, episodes_per_train=400,
                               episodes_per_test=10, seed=0)
agent = (PPO if on_policy else DQN)(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
cpu, wall = time.process_time(), time.perf_counter()
stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
print("TRAIN", stats["num_collected_steps"], stats["num_gradient_steps"], time.process_time() - cpu,
      time.perf_counter() - wall)
"""


def measure(tree: Path, steps: int, learning: bool) -> dict[str, float]:
    figures: dict[str, float] = {}
    text = run(tree, ["bench/bench_collect.py", "--steps", str(steps), "--repeats", "1", "--no-check"])
    for name, _, ratio in _RATE.findall(text):
        figures[f"{name.strip()} (x raw loop)"] = float(ratio)
    if learning:
        for algo in ("DQN", "PPO"):
            line = [ln for ln in run(tree, ["-c", _TRAIN, algo]).splitlines() if ln.startswith("TRAIN ")][-1]
            for key, value in zip(("env_steps", "gradient_steps", "cpu_s", "wall_s"), line.split()[1:]):
                figures[f"CartPole {algo} 400 episodes, {key}"] = float(value)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision to compare against (e.g. a6e0003)")
    parser.add_argument("--after", type=Path, default=ROOT, help="directory of the revision to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20000, help="agent steps per collector row")
    parser.add_argument("--no-learning", action="store_true", help="collector rows only")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="marl_note_before_"))
    before = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(before), args.before],
                   check=True)
    try:
        results: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        for r in range(args.rounds):
            order = [("before", before), ("after", args.after.resolve())]
            for label, tree in order if r % 2 == 0 else order[::-1]:
                for key, value in measure(tree, args.steps, not args.no_learning).items():
                    results[label].setdefault(key, []).append(value)
                print(f"round {r + 1}: {label} done", flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; before {args.before}, after {args.after}; "
          f"medians of {args.rounds} interleaved rounds")
    print(f"{'figure':52s} {'before':>10s} {'after':>10s} {'after/before':>12s}")
    for key, values in results["before"].items():
        b, a = float(np.median(values)), float(np.median(results["after"].get(key, [np.nan])))
        print(f"{key:52s} {b:10.2f} {a:10.2f} {a / b:12.3f}")


if __name__ == "__main__":
    main()
