"""DQN or PPO on CartPole-v1 with several learner processes (PyTorch DistributedDataParallel semantics,
or TensorFlow's MultiWorkerMirroredStrategy).

Every rank collects on its own envs into its own replay, takes its share of the global batch and
the same gradient steps (gradients averaged over the ranks); rank 0 tests, prints and saves.

Run:
  python examples/distributed_cartpole.py --nproc 2                        # 2 local ranks, gloo on CPU
  torchrun --standalone --nproc-per-node 2 examples/distributed_cartpole.py  # the same under torchrun
  torchrun --nnodes 2 --node-rank 0 --master-addr HOST --master-port 29500 --nproc-per-node 4 \\
      examples/distributed_cartpole.py --device cuda                       # nccl, one GPU per rank
  python examples/distributed_cartpole.py --nproc 1                        # one process, no group

TensorFlow (--backend tf): one process per worker, each started with its own TF_CONFIG (same
cluster, its own task index); without TF_CONFIG, one process with a MirroredStrategy over the
local devices (every visible GPU, else the CPU); --nproc and --device do not apply:
  TF_CONFIG='{"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}}' \
      python examples/distributed_cartpole.py --backend tf                 # on host0; index 1 on host1
  python examples/distributed_cartpole.py --backend tf                     # Mirrored, one process

Options: --algo DQN|PPO, --episodes N (budget per rank), --batch-size B (global), --seed S,
--save PATH (rank 0's run checkpoint; restores in one process), --backend torch|tf.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from marl_note.contrib.distributed.ranks import launch
from marl_note.trainers import DecentralizedTrainer


def check_backend(backend: str) -> None:
    """The agents' framework: torch (DDP semantics) or tf (tf.distribute strategies)."""
    if backend not in ("torch", "tf"):
        raise ValueError(f"--backend must be 'torch' or 'tf', got {backend!r}")


def _trainer(ctx: Any, algo: str, episodes: int, batch_size: int, seed: int, target: float) -> DecentralizedTrainer:
    on_policy = algo == "PPO"
    return DecentralizedTrainer("CartPole-v1", num_train_envs=8, num_test_envs=10, batch_size=batch_size,
                                update_freq=1024 if on_policy else 64, test_freq=50, episodes_per_train=episodes,
                                episodes_per_test=10, seed=seed, stop_fn=lambda metric, n: metric >= target,
                                distributed=ctx)


def _run(trainer: DecentralizedTrainer, agent: Any, ctx: Any, save: str | None, progress: bool) -> dict[str, Any]:
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=progress and ctx.is_chief,
                          checkpoint_path=save)
    trainer.close()
    return {"rank": ctx.rank, "world_size": ctx.world_size, "solved": stats["stopped_by_stop_fn"],
            "best": stats["best_reward"], "env_steps": stats["num_collected_steps"],
            "gradient_steps": stats["num_gradient_steps"], "wall_s": stats["training_time"]}


def train_tf(algo: str = "DQN", episodes: int = 2000, batch_size: int = 64, seed: int = 0,
             timeout: float | None = None,
             save: str | None = None, progress: bool = True, target: float = 475.0) -> dict[str, Any]:
    """One TF worker's run: a MultiWorkerMirroredStrategy worker when ``TF_CONFIG`` names a cluster of
    several, else one process with a MirroredStrategy over the local devices (GPUs, else the CPU)."""
    import tensorflow as tf

    import marl_note.agents.tf as agents
    from marl_note.contrib.distributed.tf.multiworker import init_distributed

    ctx = init_distributed(timeout=timeout)  # rank and world size from TF_CONFIG (one process without)
    strategy = ctx.collective.strategy if ctx.distributed else tf.distribute.MirroredStrategy()
    trainer = _trainer(ctx, algo, episodes, batch_size, seed, target)
    agent = getattr(agents, algo)(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed,
                                  strategy=strategy)
    return {**_run(trainer, agent, ctx, save, progress), "replicas": strategy.num_replicas_in_sync}


def train(algo: str = "DQN", episodes: int = 2000, batch_size: int = 64, seed: int = 0, backend: str = "torch",
          device: str = "cpu", dist_backend: str | None = None, timeout: float = 300.0, save: str | None = None,
          progress: bool = True, target: float = 475.0) -> dict[str, Any]:
    """One rank's run (the only one without ``WORLD_SIZE`` in the environment); its statistics."""
    check_backend(backend)
    if backend == "tf":
        return train_tf(algo, episodes, batch_size, seed, None, save, progress, target)  # TF: health check
    import marl_note.agents.torch as agents
    from marl_note.contrib.distributed.torch.ddp import init_distributed, shutdown

    ctx = init_distributed(dist_backend, timeout=timeout)
    try:
        if device == "cuda":  # one GPU per rank (init_distributed made it the current device)
            device = f"cuda:{ctx.local_rank}"
        trainer = _trainer(ctx, algo, episodes, batch_size, seed, target)
        agent = getattr(agents, algo)(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                                      device=device, seed=seed)
        return _run(trainer, agent, ctx, save, progress)
    finally:
        shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2,
                        help="local ranks to launch (torch; ignored under torchrun and with --backend tf)")
    parser.add_argument("--algo", choices=["DQN", "PPO"], default="DQN")
    parser.add_argument("--episodes", type=int, default=2000, help="training episodes per rank (at most)")
    parser.add_argument("--batch-size", type=int, default=64, help="the global batch, split over the ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=["torch", "tf"], default="torch")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per rank, nccl)")
    parser.add_argument("--dist-backend", choices=["gloo", "nccl"], default=None,
                        help="default: nccl with CUDA, else gloo")
    parser.add_argument("--save", default=None, help="rank 0's run checkpoint directory or .zip")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    check_backend(args.backend)  # before any process starts
    kwargs = dict(algo=args.algo, episodes=args.episodes, batch_size=args.batch_size, seed=args.seed,
                  backend=args.backend, device=args.device, dist_backend=args.dist_backend, save=args.save,
                  progress=not args.quiet)
    if args.backend == "tf" or "WORLD_SIZE" in os.environ or args.nproc == 1:  # TF_CONFIG / torchrun / one process
        out = train(**kwargs)
        if out["rank"] == 0:
            print(out)
    else:
        print(launch(train, args.nproc, **kwargs)[0])


if __name__ == "__main__":
    main()
