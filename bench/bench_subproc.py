"""Env steps per second of SubprocVectorEnv vs SyncVectorEnv, printed as ratios in one run.

    python bench/bench_subproc.py [--envs 8] [--processes N] [--steps 300] [--burn-ms 1.0]

Workloads: CartPole behind a wrapper that burns ``--burn-ms`` of CPU per step (where processes
should pay off, up to the number of *idle* cores), the same with a sleep instead of CPU work (an
env waiting on an external simulator: overlaps even on a busy machine), plain tic-tac-toe (a ~20 us
env step, so the pipe round trip dominates), and an env with a 84x84x3 uint8 observation (where
shared memory matters).
Every env acts on every step; action choice happens in the parent and costs the same for both.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings
from functools import partial

import gymnasium as gym
import numpy as np

from marl_note.envs.subproc import SubprocVectorEnv
from marl_note.envs.vector import SyncVectorEnv

warnings.filterwarnings("ignore", category=DeprecationWarning)
from pettingzoo.classic import tictactoe_v3  # noqa: E402


class BurnCPU(gym.Wrapper):
    """Busy-waits ``ms`` milliseconds of CPU in every step (a stand-in for an expensive simulator)."""

    def __init__(self, env: gym.Env, ms: float):
        super().__init__(env)
        self.seconds = ms / 1000.0

    def step(self, action):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


class BigObs(gym.Env):
    """Cheap env with an Atari-sized uint8 image observation."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.frame = self.np_random.integers(0, 256, (84, 84, 3), dtype=np.uint8)
        return self.frame.copy(), {}

    def step(self, action):
        self.t += 1
        self.frame[self.t % 84] = action
        return self.frame.copy(), 0.0, False, self.t >= 200, {}


class Sleep(gym.Wrapper):
    """Sleeps ``ms`` milliseconds per step (an env waiting on an external simulator: no CPU used)."""

    def __init__(self, env: gym.Env, ms: float):
        super().__init__(env)
        self.seconds = ms / 1000.0

    def step(self, action):
        time.sleep(self.seconds)
        return self.env.step(action)


def make_slow(ms: float) -> gym.Env:
    return BurnCPU(gym.make("CartPole-v1"), ms)


def make_sleepy(ms: float) -> gym.Env:
    return Sleep(gym.make("CartPole-v1"), ms)


def run(venv, steps: int, action_n: int, seed: int = 0) -> float:
    """Env steps per second over ``steps`` vector steps in which every env acts."""
    rng = np.random.default_rng(seed)
    res = venv.reset(seed=seed)
    for _ in range(5):  # warm up pipes and caches
        res.update(venv.step(_actions(res, action_n, rng)))
    t0 = time.perf_counter()
    for _ in range(steps):
        res.update(venv.step(_actions(res, action_n, rng)))
    return steps * venv.num_envs / (time.perf_counter() - t0)


def _actions(res, action_n, rng):
    out = {}
    for i, r in res.items():
        out[i] = {a: (int(rng.choice(np.flatnonzero(r.masks[a]))) if a in r.masks else int(rng.integers(action_n)))
                  for a in r.obs}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--processes", type=int, default=None, help="default: min(envs, cpu count)")
    ap.add_argument("--steps", type=int, default=300, help="vector steps per measurement")
    ap.add_argument("--burn-ms", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the best rate is kept")
    args = ap.parse_args()
    procs = args.processes or min(args.envs, os.cpu_count() or 1)
    workloads = [
        (f"cartpole+{args.burn_ms:g}ms cpu", partial(make_slow, args.burn_ms), 2, max(args.steps // 2, 20)),
        (f"cartpole+{args.burn_ms:g}ms sleep", partial(make_sleepy, args.burn_ms), 2, max(args.steps // 2, 20)),
        ("tictactoe", tictactoe_v3.env, 9, args.steps * 4),
        ("84x84x3 uint8 obs", BigObs, 4, args.steps * 2),
    ]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"{args.envs} envs, {procs} worker processes, {os.cpu_count()} CPUs (load average {load}); "
          f"env steps/s, best of {args.repeats} (higher is better)")
    print(f"{'workload':<22}{'sync':>10}{'subproc':>10}{'subproc':>10}{'ratio':>8}{'ratio':>8}")
    print(f"{'':<22}{'':>10}{'shm':>10}{'pipe':>10}{'shm':>8}{'pipe':>8}")
    for name, fn, action_n, steps in workloads:
        fns = [fn] * args.envs
        venvs = [SyncVectorEnv(fns)] + [SubprocVectorEnv(fns, processes=procs, shared_memory=shm)
                                        for shm in (True, False)]
        best = [0.0] * len(venvs)
        for rep in range(args.repeats):  # interleaved, so drifting background load hits all alike
            for k, venv in enumerate(venvs):
                best[k] = max(best[k], run(venv, steps, action_n, seed=rep))
        for venv in venvs:
            venv.close()
        s, rates = best[0], best[1:]
        print(f"{name:<22}{s:>10.0f}{rates[0]:>10.0f}{rates[1]:>10.0f}{rates[0] / s:>8.2f}{rates[1] / s:>8.2f}")


if __name__ == "__main__":
    main()
