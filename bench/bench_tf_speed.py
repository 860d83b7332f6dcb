"""TensorFlow vs PyTorch speed, in one process (not part of the test suite).

Both backends run one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``, TF intra/inter
op threads 1), start from the same seed, and their measurements are interleaved repetitions whose
medians are compared as TF/torch ratios (the machine's load moves both alike):

- ``act``: one ``act`` call on a batch of 16 CartPole observations, a 64-64 MLP DQN, greedy and
  exploring; through the numpy copy (the default) and through the framework (``numpy_acting=False``).
- ``step``: one DQN gradient step with the default config (128-128, batch 64) on CartPole-sized
  inputs: the network step alone (``nets.train_step`` on fixed arrays) and the agent's whole
  ``learn`` (replay sampling, arrays, step, target update), also with prioritized replay.
- ``budget``: CartPole-v1 DQN through ``DecentralizedTrainer`` for a fixed budget of env steps
  (the same env steps and, through ``replay_ratio``, the same gradient steps for both backends):
  the wall time of the training loop, tests off. Runs that train to a score differ in length
  (float differences compound), so this is the fair comparison.
- ``--solve``: CartPole-v1 DQN to a mean test return of 475 on seeds 0, 1, 2 (long: minutes per run).

Run:  python bench/bench_tf_speed.py [--only act,step,budget] [--env-steps 20000] [--reps 5]
      python bench/bench_tf_speed.py --quick        (a smoke run: small counts)
      python bench/bench_tf_speed.py --solve [--seeds 0,1,2]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from marl_note.agents import tf as tf_agents  # noqa: E402
from marl_note.agents import torch as torch_agents  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402
from marl_note.types import Transitions  # noqa: E402

BACKENDS = {"torch": torch_agents, "tf": tf_agents}
OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)  # CartPole-v1's spaces
ACT = gym.spaces.Discrete(2)


def one_thread() -> str:
    torch.set_num_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return (f"threads: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, torch {torch.get_num_threads()}, "
            f"TF intra {tf.config.threading.get_intra_op_parallelism_threads()} / "
            f"inter {tf.config.threading.get_inter_op_parallelism_threads()}")


def interleaved(fns: dict[str, Callable[[], float]], reps: int) -> dict[str, float]:
    """Median over ``reps`` rounds of each ``fn()`` (seconds per call), the backends taking turns."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            times[name].append(fn())
    return {name: statistics.median(ts) for name, ts in times.items()}


def per_call(fn: Callable[[], object], calls: int) -> Callable[[], float]:
    def timed() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls

    return timed


def report(title: str, medians: dict[str, float], unit: float = 1e3, unit_name: str = "ms") -> None:
    ratio = medians["tf"] / medians["torch"]
    print(f"{title}: torch {medians['torch'] * unit:.3f} {unit_name}, TF {medians['tf'] * unit:.3f} {unit_name}, "
          f"TF/torch {ratio:.2f}x", flush=True)


def random_transitions(n: int, rng: np.random.Generator) -> Transitions:
    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 2, n),
                       rew=np.ones(n), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.05, truncated=np.zeros(n, bool))


# --------------------------------------------------------------------------- (a) acting

def bench_act(reps: int, calls: int, seed: int) -> None:
    obs = np.random.default_rng(seed).normal(size=(16, 4)).astype(np.float32)
    for numpy_acting in (True, False):
        agents = {name: mod.DQN(OBS, ACT, hidden_sizes=(64, 64), seed=seed, numpy_acting=numpy_acting)
                  for name, mod in BACKENDS.items()}
        how = "numpy copy" if numpy_acting else "framework (numpy_acting=False)"
        for explore in (False, True):
            fns = {name: per_call(lambda a=a, e=explore: a.act(obs, explore=e), calls) for name, a in agents.items()}
            for fn in fns.values():
                fn()  # warm-up: traces, the numpy export
            report(f"act, batch 16, 64-64, {'exploring' if explore else 'greedy'}, {how}",
                   interleaved(fns, reps), 1e6, "us")


# --------------------------------------------------------------------------- (b) gradient steps

def step_arrays(agent, batch: int, seed: int) -> dict[str, np.ndarray]:
    return agent.arrays(random_transitions(batch, np.random.default_rng(seed)))


def bench_step(reps: int, calls: int, seed: int, batch: int = 64) -> None:
    for PR in (False, True):
        agents = {}
        for name, mod in BACKENDS.items():
            agent = mod.DQN(OBS, ACT, seed=seed, prioritized=PR, learning_starts=0)
            agent.observe(random_transitions(5000, np.random.default_rng(seed)))
            agents[name] = agent
        if not PR:
            arrays = {name: step_arrays(a, batch, seed) for name, a in agents.items()}
            fns = {name: per_call(lambda a=a, x=arrays[name]: a.nets.train_step(x, "DQN", 1), calls)
                   for name, a in agents.items()}
            for fn in fns.values():
                fn()
            report(f"DQN network step (nets.train_step), default config, batch {batch}", interleaved(fns, reps))
        fns = {name: per_call(lambda a=a: a.learn(a.replay.sample(batch)), calls) for name, a in agents.items()}
        for fn in fns.values():
            fn()
        report(f"DQN learn (sample + arrays + step + target{' + priorities' if PR else ''}), "
               f"{'prioritized' if PR else 'uniform'} replay, batch {batch}", interleaved(fns, reps))


# --------------------------------------------------------------------------- (c) CartPole runs

def cartpole_run(backend: str, seed: int, env_steps: int | None, solve_to: float | None,
                 max_episodes: int = 3000) -> dict:
    """DQN on CartPole-v1 (16 envs, update_freq 100, batch 64, the default agent) until ``env_steps``
    env steps (tests off) or a mean test return ``solve_to`` (10 test episodes every 50)."""
    box: dict = {}

    def train_fn(episodes: int, steps: int) -> None:
        if steps == 0 and "start" not in box:
            box["start"] = time.perf_counter()
        if env_steps is not None and steps >= env_steps and "end" not in box:
            box["end"] = time.perf_counter()
            box["env_steps"], box["gradient_steps"] = steps, box["agent"].updates
            box["trainer"].stop_training = True

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=16, num_test_envs=10, update_freq=100,
                                   test_freq=50 if solve_to is not None else 10**9, episodes_per_train=max_episodes,
                                   episodes_per_test=10, seed=seed, train_fn=train_fn,
                                   stop_fn=None if solve_to is None else (lambda metric, n: metric >= solve_to))
    agent = BACKENDS[backend].DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed)
    box.update(trainer=trainer, agent=agent)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    if env_steps is not None:
        return {"wall_s": box["end"] - box["start"], "env_steps": box["env_steps"],
                "gradient_steps": box["gradient_steps"]}
    return {"solved": stats["stopped_by_stop_fn"], "wall_s": round(stats["training_time"], 1),
            "env_steps": stats["num_collected_steps"], "gradient_steps": stats["num_gradient_steps"]}


def bench_budget(reps: int, env_steps: int, seed: int) -> None:
    runs: dict[str, list[dict]] = {"torch": [], "tf": []}
    for _ in range(reps):
        for name in runs:
            runs[name].append(cartpole_run(name, seed, env_steps, None))
    medians = {name: statistics.median(r["wall_s"] for r in rs) for name, rs in runs.items()}
    counts = {name: (rs[0]["env_steps"], rs[0]["gradient_steps"]) for name, rs in runs.items()}
    print(f"CartPole-v1 DQN, fixed budget (env steps, gradient steps): {counts}, {reps} run(s) each", flush=True)
    report("  training loop wall time", medians, 1.0, "s")


def bench_solve(seeds: list[int]) -> None:
    for seed in seeds:
        for name in BACKENDS:
            print(f"CartPole-v1 DQN to 475, {name}, seed {seed}:", cartpole_run(name, seed, None, 475.0), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="act,step,budget", help="comma-separated: act, step, budget")
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (medians)")
    parser.add_argument("--env-steps", type=int, default=20_000, help="the fixed budget's env steps")
    parser.add_argument("--budget-reps", type=int, default=1, help="fixed-budget runs per backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: small counts")
    parser.add_argument("--solve", action="store_true", help="CartPole to 475 on --seeds instead")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {platform.python_version()}, "
          f"torch {torch.__version__}, TF {tf.__version__}")
    print(one_thread(), flush=True)
    if args.solve:
        bench_solve([int(s) for s in args.seeds.split(",")])
        return
    reps, calls, env_steps = (3, 50, 3000) if args.quick else (args.reps, 500, args.env_steps)
    tasks = args.only.split(",")
    unknown = set(tasks) - {"act", "step", "budget"}
    if unknown:
        raise SystemExit(f"unknown --only {sorted(unknown)}; choose from act, step, budget")
    if "act" in tasks:
        bench_act(reps, calls * 4, args.seed)
    if "step" in tasks:
        bench_step(reps, calls, args.seed)
    if "budget" in tasks:
        bench_budget(args.budget_reps, env_steps, args.seed)


if __name__ == "__main__":
    main()
