"""Distributed-training benchmark (not part of the test suite): 1 against 2 replicas, PyTorch (gloo, CPU)
or TensorFlow (``--backend tf``: MirroredStrategy on 1 vs 2 logical CPU devices of one process,
MultiWorkerMirroredStrategy with 1 vs 2 worker processes on 127.0.0.1 through ``TF_CONFIG``, and
ParameterServerStrategy with 1 vs 2 in-process workers and one parameter server).

- learner: DQN gradient steps on a fixed global batch split over the replicas (no envs): updates/s
  and samples/s (gradient-step samples: updates/s x global batch).
- trainer: the whole trainer on CartPole-v1 (DQN, every rank collecting on its own envs) for a
  fixed env-step budget per rank: updates/s and samples/s (env steps of all ranks per second).
- solve (optional, --solve, long): CartPole-v1 until a mean test return of 475 with 1 and 2 ranks.

Each configuration runs in freshly launched ranks (``marl_note.contrib.distributed.ranks.launch``); the
times are rank 0's, after a barrier, without process start-up. Ratios are 2 replicas / 1 replica.

Run:  python bench/bench_distributed.py [--backend torch|tf] [--smoke] [--solve] [--replicas 1,2] [--seed 0]
      [--learner-steps 2000] [--env-steps 40000] [--tf-modes mirrored,multiworker,ps]
(TF: every configuration in fresh processes, since devices and TF_CONFIG are fixed when TensorFlow
starts; the modes are named mirrored-learner, mirrored-trainer, multiworker-learner, multiworker-trainer,
ps-learner, ps-trainer, and with --solve also <mode>-solve.)
"""
from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np
from bench_distributed_tf import tf_table, time_learner  # (beside this script: bench/ is on the path)

from marl_note.contrib.distributed.ranks import launch


def _init():
    from marl_note.contrib.distributed.torch.ddp import init_distributed

    ctx = init_distributed("gloo", timeout=600)
    ctx.barrier()
    return ctx


def learner(steps: int, global_batch: int, hidden: int) -> dict:
    import gymnasium as gym

    from marl_note.agents.torch import DQN
    from marl_note.contrib.distributed.torch.ddp import shutdown

    ctx = _init()
    try:
        agent = DQN(gym.spaces.Box(-1, 1, (16,), np.float32), gym.spaces.Discrete(4), hidden_sizes=(hidden, hidden),
                    seed=0)
        return time_learner(agent, ctx, steps, global_batch)
    finally:
        shutdown()


def _trainer(ctx, seed: int, episodes: int, stop_fn=None, train_fn=None, batch_size: int = 64):
    from marl_note.trainers import DecentralizedTrainer

    return DecentralizedTrainer("CartPole-v1", num_train_envs=8, num_test_envs=10, batch_size=batch_size,
                                update_freq=64, test_freq=50, episodes_per_train=episodes, episodes_per_test=10,
                                seed=seed, stop_fn=stop_fn, train_fn=train_fn, distributed=ctx)


def trainer_throughput(env_steps: int, seed: int) -> dict:
    from marl_note.agents.torch import DQN
    from marl_note.contrib.distributed.torch.ddp import shutdown

    ctx = _init()
    try:
        box: dict = {}
        trainer = _trainer(ctx, seed, episodes=10**9,
                           train_fn=lambda e, s: setattr(box["t"], "stop_training", s >= env_steps))
        box["t"] = trainer
        agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), learning_starts=500,
                    seed=seed)
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
        trainer.close()
        wall = stats["training_time"]
        return {"updates_per_s": stats["num_gradient_steps"] / wall,
                "samples_per_s": stats["num_collected_steps"] * ctx.world_size / wall, "wall_s": wall}
    finally:
        shutdown()


def solve(seed: int, max_episodes: int) -> dict:
    from marl_note.agents.torch import DQN
    from marl_note.contrib.distributed.torch.ddp import shutdown

    ctx = _init()
    try:
        trainer = _trainer(ctx, seed, episodes=max_episodes, stop_fn=lambda metric, n: metric >= 475)
        agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed)
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
        trainer.close()
        return {"solved": stats["stopped_by_stop_fn"], "wall_s": stats["training_time"], "best": stats["best_reward"],
                "env_steps_all_ranks": stats["num_collected_steps"] * ctx.world_size,
                "gradient_steps": stats["num_gradient_steps"]}
    finally:
        shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny budgets: checks that it runs, measures nothing")
    parser.add_argument("--solve", action="store_true", help="also CartPole to 475 (minutes per configuration)")
    parser.add_argument("--backend", choices=["torch", "tf"], default="torch")
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learner-steps", type=int, default=None, help="gradient steps timed (default 2000)")
    parser.add_argument("--env-steps", type=int, default=None, help="trainer env steps per rank (default 40000)")
    parser.add_argument("--tf-modes", default="mirrored,multiworker,ps", help="TF modes to run (--backend tf)")
    args = parser.parse_args()
    replicas = [int(r) for r in args.replicas.split(",")]
    steps, env_steps = (20, 2_000) if args.smoke else (2_000, 40_000)
    steps, env_steps = args.learner_steps or steps, args.env_steps or env_steps
    print(json.dumps({"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()}))
    table: dict[str, dict[int, dict]] = {}
    if args.backend == "tf":
        table = tf_table(replicas, steps, env_steps, args.seed, solve=args.solve, smoke=args.smoke,
                         modes=tuple(m for m in args.tf_modes.split(",") if m))
        replicas = []  # printed by tf_table as they come
    for n in replicas:
        table.setdefault("learner", {})[n] = launch(learner, n, steps, 256, 256)[0]
        table.setdefault("trainer", {})[n] = launch(trainer_throughput, n, env_steps, args.seed)[0]
        if args.solve:
            table.setdefault("solve", {})[n] = launch(solve, n, args.seed, 100 if args.smoke else 5_000)[0]
        for mode, rows in table.items():
            print(json.dumps({"mode": mode, "replicas": n, **{k: round(v, 3) if isinstance(v, float) else v
                                                               for k, v in rows[n].items()}}))
    if 1 in [int(r) for r in args.replicas.split(",")]:
        for mode in [m for m in table if "solve" not in m]:
            for n in sorted(table[mode]):
                if n != 1 and 1 in table[mode]:
                    ratios = {k: round(table[mode][n][k] / table[mode][1][k], 3) if table[mode][1][k] else None
                              for k in ("updates_per_s", "samples_per_s")}
                    print(json.dumps({"mode": mode, "ratio": f"{n}/1", **ratios}))


if __name__ == "__main__":
    main()
