"""CartPole-v1 DQN to a greedy 475 with RL Zoo's hyperparameters: marl_note's numpy backend against SB3.

    python bench/bench_sb3_dqn.py [--seeds 0,1,2] [--only sb3,numpy] [--budget 50000] [--eval-every 1024]
                                  [--eval-episodes 10] [--target 475] [--verbose] [--smoke]

The settings are rl-baselines3-zoo's ``hyperparams/dqn.yml`` for CartPole-v1 (``n_timesteps`` 5e4,
``learning_rate`` 2.3e-3, ``batch_size`` 64, ``buffer_size`` 100000, ``learning_starts`` 1000,
``gamma`` 0.99, ``target_update_interval`` 10, ``train_freq`` 256, ``gradient_steps`` 128,
``exploration_fraction`` 0.16, ``exploration_final_eps`` 0.04, ``net_arch`` [256, 256]); SB3's DQN takes
them as they are (one env, as the zoo makes it). How each maps onto marl_note's DQN
(``DecentralizedTrainer`` with one training env):

- ``train_freq`` 256 env steps, ``gradient_steps`` 128 -> ``update_freq=256`` (the trainer collects 256 env
  steps, then calls ``update()``) and ``update_steps=128`` (gradient steps per ``update()`` call).
- ``learning_starts`` 1000 -> ``learning_starts=1000``: both take their first gradient steps after the
  rollout ending at env step 1024. (SB3 acts uniformly at random before ``learning_starts``; marl_note acts
  epsilon-greedily from the start, epsilon 1.0 -> 0.88 over those steps: the one difference left.)
- ``target_update_interval`` 10 is counted in *env steps* in SB3 (``DQN._on_step`` runs after every env step,
  ``tau`` 1.0: a copy), so during each 256-step rollout the target becomes a copy of the online network,
  which does not change while collecting; the 128 gradient steps that follow all use that copy. In
  marl_note that is ``target_update_agent_steps=10``: a copy at the end of every ``update()`` call that
  follows 10 or more new agent steps, here every call (the online network then rests until the next call).
- ``exploration_fraction`` 0.16 of ``n_timesteps`` 5e4, initial eps 1.0, final 0.04 ->
  ``policy=EpsGreedyQPolicy(1.0, 0.04, n_steps_annealing=8000)`` (both linear in env steps, from step 0;
  SB3's schedule stays relative to the 5e4 budget when a run stops early, and so does this one).
- Huber loss (SB3: ``smooth_l1_loss``), ``max_grad_norm`` 10, Adam (eps 1e-8), no double Q (SB3's DQN is
  the plain one) -> ``criterion="huber"``, ``max_grad_norm=10.0``, ``double=False``; ReLU MLP 256-256;
  ``gamma`` 0.99; ``buffer_size`` 100000; ``batch_size`` 64 (the trainer's); truncation at 500 steps
  bootstraps in both (SB3's replay ``handle_timeout_termination``, marl_note's ``truncated``).

The evaluation is the same code for both: every ``--eval-every`` env steps (a multiple of 256), right after
that rollout's gradient steps (SB3: at the next ``_on_rollout_start``; marl_note: ``train_fn``, which the
trainer calls before each collection chunk), ``--eval-episodes`` greedy episodes on a separate CartPole-v1
whose k-th episode resets with seed ``10_000 + k`` (the same start states every time, in both); a run stops
at a mean >= ``--target`` or at ``--budget`` env steps. The clocks (wall ``perf_counter`` and this process's
CPU time ``process_time``) run from the start of ``learn()`` / ``train()`` to the evaluation that reaches the
target (or the budget), less the time spent in the evaluations, which is reported apart. Each seed runs the
libraries back to back in this one process (the order alternates with the seed), one thread each
(``OMP_NUM_THREADS=1`` before numpy is imported, ``torch.set_num_threads(1)``, ``set_blas_threads(1)``:
one BLAS thread, warmed up, as the trainer's own ``train()`` does too). The last lines are the medians over
the seeds and numpy's wall and CPU time as a ratio of SB3's, then the same per env step (each run's time over
its env steps, the median over the seeds: the speed apart from how long each seed took to learn).

``--smoke`` runs each library for 1,024 env steps (128 gradient steps), evaluating twice with 2 episodes
(a smoke test of the script, not a measurement).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread from numpy's import on

import sys  # noqa: E402

# SB3's logger imports tensorboard, which imports TensorFlow where it is installed: half a minute and
# its thread pools for nothing here; tensorboard runs on its own stub without it
sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from marl_note.agents.blas import set_blas_threads  # noqa: E402
from marl_note.agents.exploration.policies import EpsGreedyQPolicy  # noqa: E402

ENV = "CartPole-v1"
# rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4 is --budget)
ZOO = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
           target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
           exploration_final_eps=0.04, net_arch=[256, 256])
TRAIN_FREQ = ZOO["train_freq"]


class Evaluator:
    """Greedy episodes on a separate env, the same start states each time; its own clocks."""

    def __init__(self, episodes: int, target: float, label: str = "", verbose: bool = False):
        self.env = gym.make(ENV)
        self.episodes, self.target, self.label, self.verbose = episodes, target, label, verbose
        self.wall = self.cpu = 0.0
        self.history: list[tuple[int, float]] = []

    def __call__(self, env_steps: int, greedy: Callable[[np.ndarray], int]) -> bool:
        """Evaluate at ``env_steps``; True when the mean return reaches the target."""
        wall, cpu = time.perf_counter(), time.process_time()
        returns = []
        for k in range(self.episodes):
            obs, _ = self.env.reset(seed=10_000 + k)
            total, done = 0.0, False
            while not done:
                obs, rew, terminated, truncated, _ = self.env.step(greedy(obs))
                total += float(rew)
                done = terminated or truncated
            returns.append(total)
        mean = float(np.mean(returns))
        self.history.append((env_steps, mean))
        if self.verbose:
            print(f"    {self.label}: {env_steps} env steps, greedy mean {mean:.1f}", flush=True)
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        return mean >= self.target

    def close(self) -> None:
        self.env.close()


def result(name: str, seed: int, start: tuple[float, float], end: tuple[float, float], evaluator: Evaluator,
           env_steps: int, gradient_steps: int, solved: bool) -> dict[str, Any]:
    return {"library": name, "seed": seed, "solved": solved, "env_steps": env_steps,
            "gradient_steps": gradient_steps, "wall_s": end[0] - start[0] - evaluator.wall,
            "cpu_s": end[1] - start[1] - evaluator.cpu, "eval_wall_s": evaluator.wall,
            "last_eval": evaluator.history[-1][1] if evaluator.history else float("nan"),
            "evals": len(evaluator.history)}


def run_sb3(seed: int, budget: int, eval_every: int, evaluator: Evaluator) -> dict[str, Any]:
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(1)
    zoo = dict(ZOO)
    net_arch = zoo.pop("net_arch")
    model = DQN("MlpPolicy", gym.make(ENV), policy_kwargs=dict(net_arch=net_arch), seed=seed, device="cpu",
                verbose=0, **zoo)
    # SB3's own logger (what learn() configures otherwise) writes nowhere at verbose=0 but makes an empty
    # folder in the machine's temporary directory on every learn(): the same logger, without the folder
    model.set_logger(Logger(folder=None, output_formats=[]))
    q_net = model.policy.q_net

    def greedy(obs: np.ndarray) -> int:
        with torch.no_grad():
            return int(q_net(torch.as_tensor(obs[None], dtype=torch.float32)).argmax())

    box: dict[str, Any] = {"stop": False, "solved": False}

    class Evaluate(BaseCallback):
        """Evaluates after each rollout's gradient steps (``_on_rollout_start``); stops at the next env step."""

        def _on_rollout_start(self) -> None:
            steps = self.num_timesteps
            if box["stop"] or steps == 0 or steps % eval_every:
                return
            solved = evaluator(steps, greedy)
            if solved:
                box.update(stop=True, solved=solved, end=(time.perf_counter(), time.process_time()),
                           env_steps=steps, gradient_steps=model._n_updates)

        def _on_step(self) -> bool:
            return not box["stop"]

    start = (time.perf_counter(), time.process_time())
    model.learn(total_timesteps=budget, callback=Evaluate())
    if "end" not in box:  # the budget is spent: the last rollout's gradient steps are done, a last evaluation
        steps = model.num_timesteps
        solved = evaluator(steps, greedy)
        box.update(solved=solved, end=(time.perf_counter(), time.process_time()), env_steps=steps,
                   gradient_steps=model._n_updates)
    model.env.close()
    return result("sb3", seed, start, box["end"], evaluator, box["env_steps"], box["gradient_steps"], box["solved"])


def run_marl_note(seed: int, budget: int, eval_every: int, evaluator: Evaluator,
                  backend: str = "numpy") -> dict[str, Any]:
    import importlib

    from marl_note.trainers import DecentralizedTrainer

    mod = importlib.import_module(f"marl_note.agents.{backend}")
    box: dict[str, Any] = {"solved": False}

    def train_fn(episodes: int, env_steps: int) -> None:
        """Called before each collection chunk, i.e. after the previous chunk's gradient steps."""
        if env_steps == 0 or (env_steps % eval_every and env_steps < budget):
            return
        solved = evaluator(env_steps, greedy)
        if solved or env_steps >= budget:
            box.update(solved=solved, end=(time.perf_counter(), time.process_time()), env_steps=env_steps,
                       gradient_steps=agent.updates)
            trainer.stop_training = True

    trainer = DecentralizedTrainer(ENV, num_train_envs=1, num_test_envs=1, update_freq=TRAIN_FREQ,
                                   batch_size=ZOO["batch_size"], test_freq=10**9, episodes_per_train=10**6,
                                   episodes_per_test=1, seed=seed, train_fn=train_fn, threads=1)
    anneal = round(ZOO["exploration_fraction"] * budget)
    agent = mod.DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed,
                    hidden_sizes=tuple(ZOO["net_arch"]), activation="relu", lr=ZOO["learning_rate"],
                    gamma=ZOO["gamma"], buffer_size=ZOO["buffer_size"], learning_starts=ZOO["learning_starts"],
                    update_steps=ZOO["gradient_steps"], target_update_agent_steps=ZOO["target_update_interval"],
                    double=False, criterion="huber", max_grad_norm=10.0,
                    policy=EpsGreedyQPolicy(1.0, ZOO["exploration_final_eps"], n_steps_annealing=anneal))

    def greedy(obs: np.ndarray) -> int:
        return int(agent.act(obs[None])[0])

    start = (time.perf_counter(), time.process_time())
    try:
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    finally:
        trainer.close()
    if "end" not in box:
        box.update(end=(time.perf_counter(), time.process_time()), env_steps=stats["num_collected_steps"],
                   gradient_steps=agent.updates)
    return result(f"marl_note {backend}", seed, start, box["end"], evaluator, box["env_steps"],
                  box["gradient_steps"], box["solved"])


def show(r: dict[str, Any]) -> None:
    status = "reached" if r["solved"] else "NOT reached"
    print(f"  seed {r['seed']} {r['library']:16s} target {status} at {r['env_steps']} env steps "
          f"({r['gradient_steps']} gradient steps, last eval {r['last_eval']:.1f}, {r['evals']} evals): "
          f"wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s (+ evaluation {r['eval_wall_s']:.1f} s wall)",
          flush=True)


def load() -> str:
    return os.getloadavg().__repr__() if hasattr(os, "getloadavg") else "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--only", default="sb3,numpy", help="comma list of sb3, numpy, torch (marl_note's torch DQN)")
    p.add_argument("--budget", type=int, default=50_000, help="env steps (the zoo's n_timesteps)")
    p.add_argument("--eval-every", type=int, default=1024, help="env steps between evaluations (a multiple of 256)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--target", type=float, default=475.0)
    p.add_argument("--verbose", action="store_true", help="print every evaluation")
    p.add_argument("--smoke", action="store_true", help="1,024 env steps each: a smoke test, not a measurement")
    args = p.parse_args()
    if args.eval_every % TRAIN_FREQ:
        raise SystemExit(f"--eval-every must be a multiple of train_freq {TRAIN_FREQ}, got {args.eval_every}")
    if args.smoke:
        args.budget, args.eval_every, args.eval_episodes = 1024, 512, 2
    names = args.only.split(",")
    unknown = set(names) - {"sb3", "numpy", "torch"}
    if unknown:
        raise SystemExit(f"--only takes sb3, numpy, torch; got {sorted(unknown)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    set_blas_threads(1)
    try:
        import stable_baselines3
        sb3_version = stable_baselines3.__version__
    except ImportError:
        sb3_version = "not installed"
    print(f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"numpy {np.__version__}, stable-baselines3 {sb3_version}; load {load()}", flush=True)
    print(f"CartPole-v1 DQN, RL Zoo settings, target {args.target} over {args.eval_episodes} greedy episodes "
          f"every {args.eval_every} env steps, budget {args.budget} env steps; seeds {seeds}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        order = names if seed % 2 == 0 else names[::-1]
        for name in order:
            evaluator = Evaluator(args.eval_episodes, args.target, f"seed {seed} {name}", args.verbose)
            if name == "sb3":
                r = run_sb3(seed, args.budget, args.eval_every, evaluator)
            else:
                r = run_marl_note(seed, args.budget, args.eval_every, evaluator, backend=name)
            evaluator.close()
            runs.setdefault(r["library"], []).append(r)
            show(r)
        print(f"  (load {load()})", flush=True)
    print("medians over the seeds:", flush=True)
    medians = {lib: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "env_steps")}
               for lib, rs in runs.items()}
    for lib, m in medians.items():
        solved = sum(r["solved"] for r in runs[lib])
        print(f"  {lib:16s} wall {m['wall_s']:.1f} s, CPU {m['cpu_s']:.1f} s, env steps {m['env_steps']:.0f} "
              f"({solved}/{len(runs[lib])} reached the target)", flush=True)
    # per env step (each run's time over its env steps, then the median): the speed apart from the run's length
    per_step = {lib: {k: statistics.median(r[k] / r["env_steps"] for r in rs) for k in ("wall_s", "cpu_s")}
                for lib, rs in runs.items()}
    for lib, m in per_step.items():
        print(f"  {lib:16s} per env step: wall {1e3 * m['wall_s']:.2f} ms, CPU {1e3 * m['cpu_s']:.2f} ms", flush=True)
    if "sb3" in medians:
        for lib, m in medians.items():
            if lib != "sb3":
                base, mine, theirs = medians["sb3"], per_step[lib], per_step["sb3"]
                print(f"  {lib} / sb3: wall {m['wall_s'] / base['wall_s']:.2f}x, "
                      f"CPU {m['cpu_s'] / base['cpu_s']:.2f}x (issue #34's floor: wall <= 0.4x); per env step: wall "
                      f"{mine['wall_s'] / theirs['wall_s']:.2f}x, CPU {mine['cpu_s'] / theirs['cpu_s']:.2f}x",
                      flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"git {commit}; load {load()}", flush=True)


if __name__ == "__main__":
    main()
