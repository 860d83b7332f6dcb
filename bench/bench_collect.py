"""Collection speed: DecentralizedTrainer's collector against a plain loop over one raw PettingZoo env.

Tic-tac-toe, 16 in-process envs. Prints agent-steps/s of each and the ratio collector / raw loop,
all measured in this one process (the machines are shared and noisy; compare ratios, not rates).
Target (issue 2): random agents >= 0.7x the raw single-env loop.

The cost of the non-finite check (issue 16), on tic-tac-toe (rewards checked, int8 boards skipped)
and on CartPole-v1 (float observations checked too), random agents: the ratio of collection speed
with / without ``check_finite`` in CPU time (alternating order; still noisy on a shared machine),
and the check timed alone on recorded step results, as a share of the collector's CPU time per
vector step (the steadier figure).

Run:  python bench/bench_collect.py [--steps N] [--repeats R]
"""
from __future__ import annotations

import argparse
import platform
import time

import gymnasium as gym
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


def collector_rate(agents, steps: int, num_envs: int = 16, explore: bool = True, check_finite: bool = True,
                   env_fn=tictactoe_v3.env, clock=time.perf_counter) -> float:
    spec = make_spec(adapt(env_fn()))
    n = spec.num_agents
    col = Collector(SyncVectorEnv([env_fn] * num_envs), spec, agents, [explore] * n, [False] * n,
                    check_finite=check_finite)
    col.reset(seed=0)
    start = clock()
    stats = col.collect(n_steps=steps)
    return stats.agent_steps / (clock() - start)


def check_cost(env_fn, agents, steps: int, repeats: int, num_envs: int = 16) -> tuple[float, float, float]:
    """(checked / unchecked collection speed, microseconds of the check per vector step, that as a
    share of the unchecked collector's CPU time per vector step)."""
    from marl_note.trainers.finite import FiniteCheck

    rates: dict[bool, list[float]] = {True: [], False: []}
    for k in range(repeats):
        for check in ((True, False) if k % 2 == 0 else (False, True)):
            rates[check].append(collector_rate(agents, steps, num_envs, check_finite=check, env_fn=env_fn,
                                               clock=time.process_time))
    spec = make_spec(adapt(env_fn()))
    n = spec.num_agents
    col = Collector(SyncVectorEnv([env_fn] * num_envs), spec, agents, [True] * n, [False] * n, check_finite=False)
    col.reset(seed=0)
    recorded, step = [], col.venv.step
    col.venv.step = lambda actions: recorded.append(step(actions)) or recorded[-1]
    start = time.process_time()
    col.collect(n_steps=steps)
    per_step = (time.process_time() - start) / len(recorded)
    check, zeros = FiniteCheck(spec), np.zeros(num_envs, np.int64)
    start = time.process_time()
    for _ in range(5):
        for results in recorded:
            check.step(results, zeros, zeros)
    check_s = (time.process_time() - start) / (5 * len(recorded))
    return float(np.median(rates[True]) / np.median(rates[False])), check_s * 1e6, check_s / per_step


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
    cartpole = lambda: gym.make("CartPole-v1")  # noqa: E731
    cartpole_agents = [RandomAgent(gym.spaces.Discrete(2), seed=0)]
    for name, env_fn, agents in (("tic-tac-toe (rewards)", tictactoe_v3.env, randoms),
                                 ("CartPole-v1 (rewards + obs)", cartpole, cartpole_agents)):
        ratio, micros, share = check_cost(env_fn, agents, args.steps, args.repeats)
        print(f"check_finite, {name:28s} checked / unchecked {ratio:5.3f} (CPU time); the check alone "
              f"{micros:5.1f} us per 16-env step = {100 * share:4.1f}% of the collector's CPU time")

if __name__ == "__main__":
    main()
