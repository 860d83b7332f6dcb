"""Collection speed: DecentralizedTrainer's collector against a plain loop over one raw PettingZoo env.

Tic-tac-toe, 16 in-process envs. Prints agent-steps/s of each and the ratio collector / raw loop,
all measured in this one process, interleaved, in CPU time by default (the machines are shared and
noisy; compare ratios, not rates). Targets: random agents >= 0.7x the raw single-env loop (issue 2);
DQN acting, exploring and greedy, >= 1.0x (issue 11). Then the cost of one ``act`` call of DQN on
a batch of 16 through its numpy copy against the framework (``numpy_acting=False``).

The cost of the collector's checks of what enters it, on tic-tac-toe (rewards checked for NaN;
int8 boards in [0, 1] checked against their space) and on CartPole-v1 (float observations checked
for NaN and against their space's shape, dtype and bounds too), random agents: the non-finite check
alone (``check_finite``, issue 16: the default before the space check) and with the space check
(``check_spaces``, issue 30: the default now). Printed: the collection speed of each set of checks
over the unchecked collector's, in CPU time (the order alternates; still noisy on a shared machine),
and each check timed alone on the same recorded step results, as a share of the unchecked
collector's CPU time per vector step (the steadier figure).

Run:  python bench/bench_collect.py [--steps N] [--repeats R] [--tf] [--no-check | --only-checks]
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


def raw_loop(steps: int, seed: int = 0, clock=time.perf_counter) -> float:
    """Agent-steps/s of the textbook AEC loop: last(), a uniformly random legal action, step()."""
    env = tictactoe_v3.env()
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done = 0
    start = clock()
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
    return done / (clock() - start)


def collector_rate(agents, steps: int, num_envs: int = 16, explore: bool = True, check_finite: bool = True,
                   env_fn=tictactoe_v3.env, clock=time.perf_counter, check_spaces: bool = True) -> float:
    spec = make_spec(adapt(env_fn()))
    n = spec.num_agents
    col = Collector(SyncVectorEnv([env_fn] * num_envs), spec, agents, [explore] * n, [False] * n,
                    check_finite=check_finite, check_spaces=check_spaces)
    col.reset(seed=0)
    start = clock()
    stats = col.collect(n_steps=steps)
    return stats.agent_steps / (clock() - start)


CHECKS = {"none": {"check_finite": False, "check_spaces": False},
          "finite": {"check_finite": True, "check_spaces": False},
          "finite+spaces": {"check_finite": True, "check_spaces": True}}


def check_cost(env_fn, agents, steps: int, repeats: int, num_envs: int = 16) -> dict[str, tuple[float, float, float]]:
    """For the checks "finite" and "finite+spaces": (collection speed over the unchecked collector's,
    microseconds of the checks alone per vector step, that as a share of the unchecked collector's
    CPU time per vector step)."""
    from marl_note.trainers.step_check import StepCheck

    rates: dict[str, list[float]] = {name: [] for name in CHECKS}
    for k in range(repeats):
        for name in (list(CHECKS) if k % 2 == 0 else list(CHECKS)[::-1]):
            rates[name].append(collector_rate(agents, steps, num_envs, env_fn=env_fn, clock=time.process_time,
                                              **CHECKS[name]))
    spec = make_spec(adapt(env_fn()))
    n = spec.num_agents
    col = Collector(SyncVectorEnv([env_fn] * num_envs), spec, agents, [True] * n, [False] * n, check_finite=False,
                    check_spaces=False)
    col.reset(seed=0)
    recorded, step = [], col.venv.step
    col.venv.step = lambda actions: recorded.append(step(actions)) or recorded[-1]
    start = time.process_time()
    col.collect(n_steps=steps)
    per_step = (time.process_time() - start) / len(recorded)
    zeros = np.zeros(num_envs, np.int64)
    out = {}
    for name in ("finite", "finite+spaces"):
        check = StepCheck(spec, finite=CHECKS[name]["check_finite"], spaces=CHECKS[name]["check_spaces"])
        best = float("inf")
        for _ in range(3):  # best of 3 passes over the recorded steps
            start = time.process_time()
            for results in recorded:
                check.step(results, zeros, zeros)
            best = min(best, (time.process_time() - start) / len(recorded))
        out[name] = (float(np.median(rates[name]) / np.median(rates["none"])), best * 1e6, best / per_step)
    return out


def acting_ms(agent, obs: np.ndarray, mask: np.ndarray, explore: bool, repeats: int = 2000) -> float:
    """Milliseconds per ``agent.act`` call on one batch (best of 3 timings of ``repeats`` calls)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            agent.act(obs, mask, explore=explore)
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e3


def dqn_agents(spec, backends: list[str]) -> dict[str, tuple[object, object | None]]:
    """Backend -> (DQN acting as configured by default, the same DQN acting in the framework or None
    where this version has no ``numpy_acting`` option)."""
    import inspect

    out = {}
    for backend in backends:
        try:
            if backend == "torch":
                import torch

                from marl_note.agents.torch import DQN
                torch.set_num_threads(1)
            else:
                import tensorflow as tf

                from marl_note.agents.tf import DQN  # type: ignore[assignment]
                tf.config.threading.set_intra_op_parallelism_threads(1)
        except ImportError:
            print(f"{backend} not installed: skipping its DQN rows")
            continue
        obs_space, act_space = spec.observation_space("player_1"), spec.action_space("player_1")
        framework = None
        if "numpy_acting" in inspect.signature(DQN).parameters:
            framework = DQN(obs_space, act_space, seed=0, numpy_acting=False)
        out[backend] = DQN(obs_space, act_space, seed=0), framework
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tf", action="store_true", help="DQN rows in TensorFlow too (slow to import)")
    parser.add_argument("--no-check", action="store_true", help="skip the rows of the checks' cost")
    parser.add_argument("--only-checks", action="store_true", help="only the rows of the checks' cost")
    parser.add_argument("--wall", action="store_true", help="rates in wall-clock time (default: CPU time of "
                        "this process, steadier on a shared machine; every row runs on one thread)")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    spec = make_spec(adapt(tictactoe_v3.env()))
    randoms = [RandomAgent(spec.action_space(a), seed=i) for i, a in enumerate(spec.possible_agents)]
    if not args.only_checks:
        speed_rows(args, spec, randoms, clock)
    if not args.no_check:
        check_rows(args, randoms)


def speed_rows(args: argparse.Namespace, spec, randoms: list, clock) -> None:
    """The collector against the raw loop, and DQN's acting."""
    dqns = dqn_agents(spec, ["torch", "tf"] if args.tf else ["torch"])
    rows: dict[str, list[float]] = {"raw single-env loop": [], "collector, random agents": []}
    for backend in dqns:
        rows[f"collector, DQN ({backend}) exploring"] = []
        rows[f"collector, DQN ({backend}) greedy"] = []
    for _ in range(args.repeats):  # interleave so that machine noise hits every row alike
        rows["raw single-env loop"].append(raw_loop(args.steps, clock=clock))
        rows["collector, random agents"].append(collector_rate(randoms, args.steps, clock=clock))
        for backend, (dqn, _) in dqns.items():
            for explore, how in ((True, "exploring"), (False, "greedy")):
                rows[f"collector, DQN ({backend}) {how}"].append(collector_rate([dqn, dqn], args.steps,
                                                                                explore=explore, clock=clock))
    base = float(np.median(rows["raw single-env loop"]))
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}; "
          f"tic-tac-toe, 16 in-process envs, {args.steps} agent steps x {args.repeats} (median), "
          f"{'wall-clock' if args.wall else 'CPU'} time; "
          f"DQN with its default 128-128 MLP")
    for name, rates in rows.items():
        if rates:
            med = float(np.median(rates))
            print(f"{name:36s} {med:10.0f} agent-steps/s   {med / base:5.2f}x raw loop "
                  f"(range {min(rates) / base:4.2f}-{max(rates) / base:4.2f}x)")
    obs = np.random.default_rng(0).integers(0, 2, (16, *spec.observation_space("player_1").shape)).astype(np.int8)
    mask = np.ones((16, spec.action_space("player_1").n), bool)
    for backend, (dqn, framework) in dqns.items():
        if framework is None:
            continue
        for explore, how in ((False, "greedy"), (True, "exploring")):
            fast, slow = acting_ms(dqn, obs, mask, explore), acting_ms(framework, obs, mask, explore)
            print(f"DQN ({backend}) act(), batch of 16, {how:9s}: numpy copy {fast:6.3f} ms, framework "
                  f"{slow:6.3f} ms: {slow / fast:5.1f}x faster")


def check_rows(args: argparse.Namespace, randoms: list) -> None:
    """The cost of the non-finite check, and of the space check beside it."""
    print(f"checks: {platform.processor() or platform.machine()}, {platform.python_version()}; 16 in-process envs, "
          f"random agents, {args.steps} agent steps x {args.repeats} (median), CPU time")
    cartpole = lambda: gym.make("CartPole-v1")  # noqa: E731
    cartpole_agents = [RandomAgent(gym.spaces.Discrete(2), seed=0)]
    for name, env_fn, agents in (("tic-tac-toe", tictactoe_v3.env, randoms),
                                 ("CartPole-v1", cartpole, cartpole_agents)):
        for checks, (ratio, micros, share) in check_cost(env_fn, agents, args.steps, args.repeats).items():
            print(f"{name:11s} {checks:13s} checked / unchecked {ratio:5.3f}; the checks alone {micros:5.1f} us "
                  f"per 16-env step = {100 * share:4.1f}% of the unchecked collector's CPU time")

if __name__ == "__main__":
    main()
