"""Collection speed: DecentralizedTrainer's collector against a plain loop over one raw PettingZoo env.

Tic-tac-toe, 16 in-process envs. Prints agent-steps/s of each and the ratio collector / raw loop,
all measured in this one process (the machines are shared and noisy; compare ratios, not rates).
Target (issue 2): random agents >= 0.7x the raw single-env loop.

Run:  python bench/bench_collect.py [--steps N] [--repeats R]
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.trainers import Collector


def raw_loop(steps: int, seed: int = 0) -> float:
    """Agent-steps/s of the textbook AEC loop: last(), a uniformly random legal action, step()."""
    env = tictactoe_v3.env()
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done = 0
    start = time.perf_counter()
    while done < steps:
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
        else:
            legal = np.flatnonzero(obs["action_mask"])
            env.step(int(legal[rng.integers(len(legal))]))
            done += 1
        if not env.agents:
            env.reset()
    return done / (time.perf_counter() - start)


def collector_rate(agents, steps: int, num_envs: int = 16, explore: bool = True) -> float:
    spec = make_spec(adapt(tictactoe_v3.env()))
    col = Collector(SyncVectorEnv([tictactoe_v3.env] * num_envs), spec, agents, [explore] * 2, [False, False])
    col.reset(seed=0)
    start = time.perf_counter()
    stats = col.collect(n_steps=steps)
    return stats.agent_steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = make_spec(adapt(tictactoe_v3.env()))
    randoms = [RandomAgent(spec.action_space(a), seed=i) for i, a in enumerate(spec.possible_agents)]
    rows = {"raw single-env loop": [], "collector, random agents": [], "collector, DQN acting": []}
    dqn = None
    try:
        import torch

        from marl_note.agents.torch import DQN

        torch.set_num_threads(1)
        dqn = DQN(spec.observation_space("player_1"), spec.action_space("player_1"), seed=0)
    except ImportError:
        print("torch not installed: skipping the DQN row")
    for _ in range(args.repeats):  # interleave so that machine noise hits every row alike
        rows["raw single-env loop"].append(raw_loop(args.steps))
        rows["collector, random agents"].append(collector_rate(randoms, args.steps))
        if dqn is not None:
            rows["collector, DQN acting"].append(collector_rate([dqn, dqn], args.steps, explore=False))
    base = float(np.median(rows["raw single-env loop"]))
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}; "
          f"tic-tac-toe, 16 in-process envs, {args.steps} agent steps x {args.repeats} (median)")
    for name, rates in rows.items():
        if rates:
            med = float(np.median(rates))
            print(f"{name:28s} {med:10.0f} agent-steps/s   {med / base:5.2f}x raw loop")


if __name__ == "__main__":
    main()
