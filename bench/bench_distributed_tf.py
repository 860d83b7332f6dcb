"""The TensorFlow modes of ``bench_distributed.py --backend tf`` (not part of the test suite).

A strategy's devices and ``TF_CONFIG`` are fixed when TensorFlow starts, so every configuration
runs in fresh processes: ``mirrored`` is one process with a MirroredStrategy on N logical CPU
devices (the process's batch is the global batch); ``multiworker`` is N worker processes on
127.0.0.1, each with its own ``TF_CONFIG``, a MultiWorkerMirroredStrategy and its share of the
global batch (the trainer modes: each worker collecting on its own envs, rank 0 testing); ``ps``
is one process, the coordinator of a ParameterServerStrategy over an in-process cluster of N
workers and one parameter server on 127.0.0.1 (variables on the parameter server, each update
scheduled on a free worker by the ClusterCoordinator and fetched back: one step at a time, so more
workers add no parallelism to one learner; the trainer is the single-process trainer).
``python bench/bench_distributed_tf.py MODE KIND N STEPS ENV_STEPS SEED MAX_EPISODES`` is one
such process; it prints rank 0's result as a JSON line.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 3600  # seconds per configuration


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def run_config(mode: str, kind: str, n: int, steps: int, env_steps: int, seed: int, max_episodes: int) -> dict:
    """One configuration in fresh processes; rank 0's result."""
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "TF_CPP_MIN_LOG_LEVEL": "2"}
    base.pop("TF_CONFIG", None)
    args = [sys.executable, str(Path(__file__).resolve()), mode, kind, str(n), str(steps), str(env_steps), str(seed),
            str(max_episodes)]
    envs = [base]
    if mode == "multiworker":
        cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(n)]}
        envs = [{**base, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
                for i in range(n)]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for env in envs]
    try:
        logs = [p.communicate(timeout=LIMIT)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    lines = [line for line in logs[0].splitlines() if line.startswith("{")]
    if procs[0].returncode or not lines:
        failed = [i for i, p in enumerate(procs) if p.returncode] or [0]
        tails = "\n".join(f"--- worker {i} (exit {procs[i].returncode}):\n{logs[i][-3000:]}" for i in failed)
        raise RuntimeError(f"{mode} {kind} with {n} replicas failed:\n{tails}")
    return json.loads(lines[-1])


MODES = ("mirrored", "multiworker", "ps")


def tf_table(replicas: list[int], steps: int, env_steps: int, seed: int, solve: bool = False,
             smoke: bool = False, modes: tuple[str, ...] = MODES) -> dict[str, dict[int, dict]]:
    """The TF ``modes`` for each replica count (``ps``: workers), printed as they come:
    ``{mode: {replicas: result}}``."""
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown TF modes {unknown}; the modes are {list(MODES)}")
    table: dict[str, dict[int, dict]] = {}
    for mode in modes:
        for kind in ("learner", "trainer") + (("solve",) if solve else ()):
            for n in replicas:
                row = run_config(mode, kind, n, steps, env_steps, seed, 100 if smoke else 5_000)
                table.setdefault(f"{mode}-{kind}", {})[n] = row
                print(json.dumps({"mode": f"{mode}-{kind}", "replicas": n,
                                  **{k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}}),
                      flush=True)
    return table


# --------------------------------------------------------------------------- one configuration's process

def _setup(mode: str, n: int):
    """(rank context, strategy) of this process."""
    import tensorflow as tf

    from marl_note.contrib.distributed.tf.multiworker import init_distributed
    from marl_note.distributed import DistributedContext

    if mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
        return DistributedContext(), tf.distribute.MirroredStrategy([f"/CPU:{i}" for i in range(n)])
    if mode == "ps":
        return DistributedContext(), _parameter_server(n)
    ctx = init_distributed()  # no per-collective timeout (it costs a thread per collective)
    return ctx, (ctx.collective.strategy if ctx.distributed else tf.distribute.MultiWorkerMirroredStrategy())


_SERVERS: list = []  # the in-process cluster's servers (they cannot be stopped: the process leaves with os._exit)


def _parameter_server(workers: int):
    """A ParameterServerStrategy over ``workers`` in-process workers and one parameter server."""
    import tensorflow as tf

    ports = _free_ports(workers + 1)
    spec = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in ports[:-1]], "ps": [f"127.0.0.1:{ports[-1]}"]})
    _SERVERS.extend(tf.distribute.Server(spec, job_name="worker", task_index=i, protocol="grpc")
                    for i in range(workers))
    _SERVERS.append(tf.distribute.Server(spec, job_name="ps", task_index=0, protocol="grpc"))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    return tf.distribute.experimental.ParameterServerStrategy(resolver)


def time_learner(agent, ctx, steps: int, global_batch: int) -> dict:
    """Updates/s and samples/s of ``agent`` (a DQN on 16 features, 4 actions; either backend) on this
    rank's share of a fixed random global batch, after 5 warm-up steps; ranks meet before and after."""
    ctx.prepare(agent)
    n = ctx.shard_batch(global_batch)
    rng = np.random.default_rng(ctx.rank)
    batch = {"obs": rng.normal(size=(n, 16)).astype(np.float32), "act": rng.integers(0, 4, n),
             "next_obs": rng.normal(size=(n, 16)).astype(np.float32), "rew": rng.normal(size=n).astype(np.float32),
             "discount": np.full(n, 0.99, np.float32), "alive": np.ones(n, np.float32), "legal": np.ones((n, 4), bool),
             "weights": np.ones(n, np.float32)}
    for i in range(5):  # warm-up (tracing)
        agent.nets.train_step(batch, who="DQN", update=i + 1)
    ctx.barrier()
    start = time.perf_counter()
    for i in range(steps):
        agent.nets.train_step(batch, who="DQN", update=i + 6)
    ctx.barrier()
    wall = time.perf_counter() - start
    return {"updates_per_s": steps / wall, "samples_per_s": steps * global_batch / wall}


def _learner(ctx, strategy, steps: int, global_batch: int = 256, hidden: int = 256) -> dict:
    import gymnasium as gym

    from marl_note.agents.tf import DQN

    agent = DQN(gym.spaces.Box(-1, 1, (16,), np.float32), gym.spaces.Discrete(4), hidden_sizes=(hidden, hidden), seed=0,
                strategy=strategy)
    return time_learner(agent, ctx, steps, global_batch)


def _trainer(ctx, strategy, seed: int, episodes: int, env_steps: int | None, stop_at: float | None) -> dict:
    from marl_note.agents.tf import DQN
    from marl_note.trainers import DecentralizedTrainer

    box: dict = {}
    train_fn = None if env_steps is None else (lambda e, s: setattr(box["t"], "stop_training", s >= env_steps))
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=8, num_test_envs=10, batch_size=64, update_freq=64,
                                   test_freq=50, episodes_per_train=episodes, episodes_per_test=10, seed=seed,
                                   train_fn=train_fn, distributed=ctx,
                                   stop_fn=None if stop_at is None else (lambda metric, n: metric >= stop_at))
    box["t"] = trainer
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                learning_starts=1000 if env_steps is None else min(500, env_steps // 4), seed=seed, strategy=strategy)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    wall = stats["training_time"]
    if stop_at is not None:
        return {"solved": stats["stopped_by_stop_fn"], "wall_s": wall, "best": stats["best_reward"],
                "env_steps_all_ranks": stats["num_collected_steps"] * ctx.world_size,
                "gradient_steps": stats["num_gradient_steps"]}
    return {"updates_per_s": stats["num_gradient_steps"] / wall,
            "samples_per_s": stats["num_collected_steps"] * ctx.world_size / wall, "wall_s": wall}


def main() -> None:
    mode, kind, n, steps, env_steps, seed, max_episodes = sys.argv[1:8]
    ctx, strategy = _setup(mode, int(n))
    if kind == "learner":
        out = _learner(ctx, strategy, int(steps))
    elif kind == "trainer":
        out = _trainer(ctx, strategy, int(seed), 10**9, int(env_steps), None)
    else:
        out = _trainer(ctx, strategy, int(seed), int(max_episodes), None, 475.0)
    out["replicas"] = int(n) if mode == "ps" else strategy.num_replicas_in_sync  # (ps: the workers)
    if ctx.is_chief:
        print(json.dumps(out), flush=True)
    if mode == "ps":
        os._exit(0)  # (in-process servers cannot be stopped: leave without joining them)


if __name__ == "__main__":
    main()
