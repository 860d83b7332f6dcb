"""Prioritized replay throughput (not part of the test suite).

For each capacity (1e4, 1e5, 1e6) the buffer is first filled to capacity, then a timed loop runs
cycles of: add ``--add`` transitions, sample ``--batch`` transitions, update their priorities
(what one DQN gradient step costs the replay). Reported: cycles/s, and sampled transitions/s.
If ``tianshou`` is importable, its ``PrioritizedReplayBuffer`` runs the same cycle in the same
process and the ratio marl_note / tianshou is printed; otherwise that column is skipped.

Run:  python bench/bench_per.py [--sizes 10000,100000,1000000] [--seconds 3] [--batch 256] [--add 16]
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import gymnasium as gym
import numpy as np

from marl_note.replay import PrioritizedReplayBuffer
from marl_note.types import Transitions

OBS_DIM = 8


def chunk(n: int, rng: np.random.Generator) -> Transitions:
    return Transitions(obs=rng.normal(size=(n, OBS_DIM)).astype(np.float32), act=rng.integers(0, 4, n),
                       rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.normal(size=(n, OBS_DIM)).astype(np.float32),
                       terminated=rng.random(n) < 0.01, truncated=np.zeros(n, bool))


def timed(cycle, seconds: float) -> float:
    """Cycles per second of ``cycle()`` over about ``seconds`` (after a short warm-up)."""
    for _ in range(20):
        cycle()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(50):
            cycle()
        n += 50
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def bench_marl_note(capacity: int, batch: int, add: int, seconds: float) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    buf = PrioritizedReplayBuffer(capacity, gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
                                  gym.spaces.Discrete(4), alpha=0.6, beta=0.4, seed=0)
    start = time.perf_counter()
    for lo in range(0, capacity, 10_000):
        buf.add(chunk(min(10_000, capacity - lo), rng))
    fill = capacity / (time.perf_counter() - start)
    pool = [chunk(add, rng) for _ in range(64)]
    td = np.abs(rng.normal(size=(64, batch)))
    state = {"i": 0}

    def cycle():
        i = state["i"] = (state["i"] + 1) % 64
        buf.add(pool[i])
        b = buf.sample(batch)
        buf.update_priorities(b.indices, td[i])

    return timed(cycle, seconds), fill


def bench_tianshou(capacity: int, batch: int, add: int, seconds: float) -> float | None:
    try:
        from tianshou.data import Batch
        from tianshou.data import PrioritizedReplayBuffer as TSBuffer
    except Exception:  # not installed (or incompatible): skip the comparison
        return None
    rng = np.random.default_rng(0)
    buf = TSBuffer(capacity, alpha=0.6, beta=0.4)
    for _ in range(capacity):  # tianshou adds one transition per call
        t = chunk(1, rng)
        buf.add(Batch(obs=t.obs, act=t.act, rew=t.rew, obs_next=t.next_obs, terminated=t.terminated,
                      truncated=t.truncated))
    pool = [chunk(add, rng) for _ in range(64)]
    td = np.abs(rng.normal(size=(64, batch)))
    state = {"i": 0}

    def cycle():
        i = state["i"] = (state["i"] + 1) % 64
        t = pool[i]
        for k in range(add):
            buf.add(Batch(obs=t.obs[k:k + 1], act=t.act[k:k + 1], rew=t.rew[k:k + 1], obs_next=t.next_obs[k:k + 1],
                          terminated=t.terminated[k:k + 1], truncated=t.truncated[k:k + 1]))
        _, idx = buf.sample(batch)
        buf.update_weight(idx, td[i][: len(idx)])

    return timed(cycle, seconds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--add", type=int, default=16)
    args = parser.parse_args()
    try:
        import tianshou
        ts = f"tianshou {tianshou.__version__}"
    except Exception:
        ts = "tianshou not importable: comparison skipped"
    print(f"# {platform.platform()} | {platform.processor() or platform.machine()} | {os.cpu_count()} cpus | "
          f"python {platform.python_version()} | numpy {np.__version__} | {ts} | load {os.getloadavg()[0]:.2f}")
    print(f"# cycle = add {args.add} + sample {args.batch} + update_priorities {args.batch}; obs dim {OBS_DIM}")
    for size in [int(float(s)) for s in args.sizes.split(",")]:
        rate, fill = bench_marl_note(size, args.batch, args.add, args.seconds)
        line = (f"capacity {size:>9,d}: {rate:8.0f} cycles/s  {rate * args.batch / 1e6:6.2f} M sampled/s  "
                f"(fill {fill / 1e6:.2f} M transitions/s)")
        ts_rate = bench_tianshou(size, args.batch, args.add, args.seconds)
        if ts_rate is not None:
            line += f"  | tianshou {ts_rate:8.0f} cycles/s  ratio {rate / ts_rate:.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
