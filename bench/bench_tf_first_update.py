"""A TensorFlow agent's first update (its trace) in a fresh process, this tree against another (not part of the suite).

A TF agent traces its graph step on its first ``update``; that costs more CPU than hundreds of later
steps, and every new process pays it (a CLI run, an actor-pool learner, each test that builds a TF
agent). This script measures it where it happens: in fresh processes, one per measurement, this
tree's process and the other tree's (``--against DIR``, e.g. a worktree of an earlier commit)
alternating, so that the machine's load moves both alike. Each process builds the agent on
CartPole-sized spaces (64-64, batch 64, one thread), stores 256 random transitions, then times with
``time.process_time()``:

- ``first``: the first ``update`` (the trace and one step);
- ``second agent``: a second agent of the same class built and updated in the same process (what is
  left once the process has traced that class once: graph building and optimisation);
- ``later update``: the median of 20 later ``update(64)`` calls (each the agent's default gradient steps
  per call; PPO's one rollout of the 256 transitions; to see that the steps themselves did not move).

Run:  python bench/bench_tf_first_update.py --against DIR [--algos dqn,sac,ddpg,ppo] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import numpy as np, gymnasium as gym
from marl_note.agents import tf as tf_agents
from marl_note.types import Transitions

algo = sys.argv[1]
box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
continuous = algo in ("SAC", "DDPG")
act_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
rng = np.random.default_rng(0)
n = 256
act = rng.uniform(-1, 1, (n, 1)).astype(np.float32) if continuous else rng.integers(0, 2, n)
batch = Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=act,
                    rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                    terminated=rng.random(n) < 0.05, truncated=np.zeros(n, bool), stream=np.zeros(n, np.int64))
options = dict(hidden_sizes=(64, 64), seed=0)
options.update(n_steps=n) if algo == "PPO" else options.update(learning_starts=1)  # PPO: one rollout per update


def fresh(seed):
    agent = getattr(tf_agents, algo)(box, act_space, **{**options, "seed": seed})
    agent.observe(batch)
    return agent


agent = fresh(0)
t = time.process_time()
agent.update(64)
first = time.process_time() - t
steps = []
for _ in range(20):
    agent.observe(batch)
    t = time.process_time()
    agent.update(64)
    steps.append(time.process_time() - t)
t = time.process_time()
fresh(1).update(64)
second = time.process_time() - t
print(json.dumps({"first": first, "second agent": second, "later update": sorted(steps)[len(steps) // 2]}))
"""


def measure(tree: Path, algo: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", CHILD, algo], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{algo} in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="the tree to compare with (a worktree)")
    parser.add_argument("--algos", default="dqn,sac,ddpg,ppo", help="comma-separated TF agents")
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per tree and algorithm")
    args = parser.parse_args()
    if not (args.against / "marl_note").is_dir():
        raise SystemExit(f"--against {args.against}: no marl_note package there")
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}; this tree {ROOT} against {args.against}; {args.rounds} rounds")
    print("| algorithm | measure | this tree (CPU s, median) | other tree | ratio |")
    print("|---|---|---|---|---|")
    for algo in (a.strip().upper() for a in args.algos.split(",")):
        ours: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        for _ in range(args.rounds):
            ours.append(measure(ROOT, algo))
            theirs.append(measure(args.against, algo))
        for key in ("first", "second agent", "later update"):
            a = statistics.median(r[key] for r in ours)
            b = statistics.median(r[key] for r in theirs)
            scale, unit = (1e3, " ms") if key == "later update" else (1.0, "")
            print(f"| {algo} | {key} | {a * scale:.3f}{unit} | {b * scale:.3f}{unit} | {a / b:.2f}x |", flush=True)
    print(f"# load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
