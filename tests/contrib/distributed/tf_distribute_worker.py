"""Runs in a subprocess for ``test_tf_distribute.py`` (a strategy's devices must be set up before
TensorFlow starts): ``python -m tests.contrib.distributed.tf_distribute_worker MODE OUT.json [TMPDIR ALGORITHMS]``.

- ``mirrored``: two logical CPU devices, ``MirroredStrategy``. Every algorithm: the same agent built
  with and without the strategy observes the same real-env transitions and updates once; the
  largest difference of their states is reported. Also checkpoints both ways, the numpy acting copy
  and a refused non-finite step.
- ``worker`` / ``worker-die``: one ``MultiWorkerMirroredStrategy`` worker (``TF_CONFIG`` set by
  the test); DQN and PPO: each worker trains on its half of the same global batch and compares with
  a single-process copy trained on the whole batch. With ``worker-die`` rank 1 then exits and
  rank 0 reports how its next step failed.
- ``ps``: ``ParameterServerStrategy`` on an in-process cluster; each DQN and PPO step is scheduled
  on a worker by a ``ClusterCoordinator`` and equals the single-process step.
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from marl_note.types import Transitions  # noqa: E402

START = time.perf_counter()


def mark(out: dict, what: str) -> None:
    """Record when ``what`` finished (seconds since the start), to see where a slow run spends its time."""
    out.setdefault("marks", {})[what] = round(time.perf_counter() - START, 1)


def max_diff(a: dict, b: dict) -> float:
    """Largest absolute difference over the float arrays the two states share (inf for a missing key)."""
    worst = 0.0
    for key, value in a.items():
        value = np.asarray(value)
        if value.dtype.kind != "f":
            continue
        if key not in b:
            return float("inf")
        worst = max(worst, float(np.abs(value.astype(np.float64) - np.asarray(b[key], np.float64)).max(initial=0.0)))
    return worst


def env_transitions(env_id: str, n: int, seed: int, act_space=None) -> Transitions:
    """``n`` transitions of a real Gymnasium env under uniformly random actions."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    rows: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "next_obs", "terminated", "truncated")}
    space = act_space or env.action_space
    space.seed(seed)
    for _ in range(n):
        act = space.sample()
        env_act = act if act_space is None else np.clip(act, env.action_space.low, env.action_space.high)
        next_obs, rew, term, trunc, _ = env.step(env_act)
        for k, v in zip(rows, (obs, act, rew, next_obs, term, trunc)):
            rows[k].append(v)
        obs = env.reset()[0] if term or trunc else next_obs
    env.close()
    arrays = {k: np.asarray(v) for k, v in rows.items()}
    return Transitions(obs=arrays["obs"].astype(np.float32), act=arrays["act"], rew=arrays["rew"].astype(np.float32),
                       next_obs=arrays["next_obs"].astype(np.float32), terminated=arrays["terminated"],
                       truncated=arrays["truncated"], stream=np.zeros(n, np.int64))


def dqn_arrays(n: int, seed: int) -> dict:
    """A DQN train-step batch (``DQNCore.arrays``' keys) of ``n`` real CartPole transitions."""
    cart = env_transitions("CartPole-v1", n, seed)
    return {"obs": cart.obs, "act": cart.act.astype(np.int32), "next_obs": cart.next_obs, "rew": cart.rew,
            "discount": np.full(n, 0.99, np.float32), "alive": (~cart.terminated).astype(np.float32),
            "legal": np.ones((n, 2), bool),
            "weights": np.random.default_rng(seed).uniform(0.5, 1.5, n).astype(np.float32)}


def cases(names: tuple[str, ...]):
    """(name, agent factory taking strategy=..., function feeding it, update batch size) of ``names``."""
    from marl_note.agents import tf as A
    from tests.agents.maddpg_helpers import joint_batch

    cart = env_transitions("CartPole-v1", 32, 0)
    pend = env_transitions("Pendulum-v1", 32, 0)
    cart_obs = gym.make("CartPole-v1").observation_space
    pend_obs = gym.make("Pendulum-v1").observation_space
    ma_obs = {"a": gym.spaces.Box(-1, 1, (3,), np.float32), "b": gym.spaces.Box(-1, 1, (4,), np.float32)}
    ma_act = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,), np.float32)}
    small = dict(hidden_sizes=(16, 16), seed=3)
    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    every = [
        ("DQN", lambda **kw: A.DQN(cart_obs, gym.spaces.Discrete(2), learning_starts=8, update_steps=2, PR=True,
                                   max_grad_norm=0.5, **small, **kw), lambda a: a.observe(cart), 10),
        ("PPO", lambda **kw: A.PPO(cart_obs, gym.spaces.Discrete(2), n_steps=32, n_epochs=2, **small,
                                   **kw), lambda a: a.observe(cart), 10),
        ("DDPG", lambda **kw: A.DDPG(pend_obs, box, learning_starts=8, update_steps=2, **small, **kw),
         lambda a: a.observe(pend), 10),
        ("SAC", lambda **kw: A.SAC(pend_obs, box, learning_starts=8, update_steps=2, **small, **kw),
         lambda a: a.observe(pend), 10),
        ("MADDPG", lambda **kw: A.MADDPG(ma_obs, ma_act, learning_starts=8, update_steps=2, **small, **kw),
         lambda a: a.observe_joint(joint_batch(32, np.random.default_rng(1), ma_obs, ma_act, dead=0.0)), 10),
    ]
    return [case for case in every if case[0] in names]


def two_logical_cpus() -> None:
    """Split the CPU into two logical devices (before TensorFlow starts) for ``MirroredStrategy``."""
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def mirrored(out: dict, tmp: str, names: tuple[str, ...]) -> None:
    import tensorflow as tf

    from marl_note.agents.tf import DQN
    from marl_note.types import NonFiniteError

    strategy = tf.distribute.MirroredStrategy(["/CPU:0", "/CPU:1"])
    out["replicas"] = strategy.num_replicas_in_sync
    out["diff"], out["copies"], out["numpy_acting"], out["case_seconds"] = {}, {}, {}, {}
    for name, make, feed, batch in cases(names):
        start = time.perf_counter()
        single, dist = make(), make(strategy=strategy)
        for agent in (single, dist):
            feed(agent)
            agent.update(batch)
        out["diff"][name] = max_diff(single.state_dict(), dist.state_dict())
        copies = [[c.numpy() for c in v.value.values] for _, v, _ in next(iter(dist.nets.params.values()))]
        out["copies"][name] = max(float(np.abs(a - b).max()) for a, b in copies)
        policy = dist.numpy_policy()
        if policy is not None:
            out["numpy_acting"][name] = max_diff(single.numpy_policy().state(), policy.state())
        out["case_seconds"][name] = round(time.perf_counter() - start, 2)
        if name == "DQN":
            out["saved_config_has_strategy"] = "strategy" in dist.config
            dist.save(f"{tmp}/dist")
            single.save(f"{tmp}/single")
            dqn, dqn_dist = single, dist
    if "DQN" not in names:
        return
    noise_scale(out, strategy)
    rl_subclass(out, strategy)
    from marl_note.compat.rebuild import rebuild
    rebuild(dqn_dist, {"gamma": 0.95})  # what agent.set() does: the new object keeps the strategy
    out["rebuilt"] = [dqn_dist.strategy is strategy, type(dqn_dist.nets.params["q_net"][0][1].value).__name__]
    restored = DQN.restore(f"{tmp}/dist")  # written under the strategy, read without one
    out["restored_plain"] = [restored.strategy is None, max_diff(dqn_dist.state_dict(), restored.state_dict())]
    restored_dist = DQN.restore(f"{tmp}/single", strategy=strategy)  # the other way round
    out["restored_dist"] = [type(restored_dist.nets.params["q_net"][0][1].value).__name__,
                            max_diff(dqn.state_dict(), restored_dist.state_dict())]
    plain = DQN.restore(f"{tmp}/single")
    for agent in (plain, restored_dist):  # and both train on identically from there
        agent.observe(env_transitions("CartPole-v1", 8, 1))
        agent.update(10)
    out["after_restore"] = max_diff(plain.state_dict(), restored_dist.state_dict())
    one = dqn_arrays(1, 3)  # one row for two replicas: the second has none and must add nothing
    for agent in (plain, restored_dist):
        out.setdefault("one_row_loss", []).append(agent.nets.train_step(one, "DQN", 1)[0]["loss"])
    out["one_row"] = max_diff(plain.state_dict(), restored_dist.state_dict())
    before = restored_dist.state_dict()
    bad = dqn_arrays(8, 2)
    bad["rew"][3] = np.nan
    try:
        restored_dist.nets.train_step(bad, "DQN", 1)
        out["nonfinite"] = "no error"
    except NonFiniteError as exc:
        out["nonfinite"] = str(exc)
    out["nonfinite_unchanged"] = max_diff(before, restored_dist.state_dict())


def noise_scale(out: dict, strategy) -> None:
    """DQN's gradient noise scale under the strategy: ``grad_sq_norm`` of a batch as in one process,
    and the measurement a 2-replica step gives (each replica's |g|^2 on its half, the global |g|^2)."""
    from marl_note.agents.noise_scale import noise_scale_terms
    from marl_note.agents.tf import DQN

    space = gym.make("CartPole-v1").observation_space
    single, dist = (DQN(space, gym.spaces.Discrete(2), hidden_sizes=(16,), seed=3, strategy=s)
                    for s in (None, strategy))
    batch = env_transitions("CartPole-v1", 12, 5)
    whole = single.noise_scale.grad_sq_norm(batch)
    out["grad_sq_norm"] = [whole, dist.noise_scale.grad_sq_norm(batch)]
    small = float(np.mean([single.noise_scale.grad_sq_norm(batch[:6]), single.noise_scale.grad_sq_norm(batch[6:])]))
    out["noise_expected"] = list(noise_scale_terms(small, 6, whole, 12))
    dist.learn(batch)
    out["noise_measured"] = [dist.noise_scale.count, dist.noise_scale.g_sq, dist.noise_scale.trace_sigma]


def rl_subclass(out: dict, strategy) -> None:
    """A user ``RL`` subclass built in the strategy's scope: two updates equal one device's; what
    cannot run under it is refused at construction."""
    import keras
    import tensorflow as tf

    from marl_note.agents import tf as A
    from tests.compat.rl_helpers import user_rl

    space, acts = gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2)
    single = user_rl(A, space, acts, learning_starts=8)
    with strategy.scope():
        dist = user_rl(A, space, acts, learning_starts=8)
    cart = env_transitions("CartPole-v1", 32, 0)
    for agent in (single, dist):
        agent.observe(cart)
        out.setdefault("rl_losses", []).append([agent.update(10)["loss"] for _ in range(2)])
    out["rl_diff"] = max_diff(single.state_dict(), dist.state_dict())
    outside = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    from marl_note.compat.tf import RL

    class Given(RL):  # a network made before (outside) the scope
        def __init__(self, observation_space, action_space, **kwargs):
            super().__init__(observation_space, action_space, **kwargs)
            self.q, self.optimizer = outside, keras.optimizers.Adam(1e-3)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            return tf.reduce_mean(tf.square(tf.reduce_sum(self.q(s) * tf.one_hot(a, 2), 1) - r))

    for kwargs in ({}, {"tf_function": False}):
        try:
            with strategy.scope():
                Given(space, acts, **kwargs)
            out.setdefault("rl_refused", []).append("no error")
        except (TypeError, ValueError) as exc:
            out.setdefault("rl_refused", []).append(f"{type(exc).__name__}: {exc}")


def _threads() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def trainer_run(out: dict, strategy, tmp: str) -> None:
    """A short DQN run of the trainer on CartPole, one rank per worker (each from its own weights:
    ``prepare`` must give every worker rank 0's); rank 0 tests and checkpoints."""
    from marl_note.agents.tf import DQN
    from marl_note.contrib.distributed.tf.multiworker import init_distributed
    from marl_note.trainers import DecentralizedTrainer

    ctx = init_distributed(strategy)
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, batch_size=16, update_freq=16,
                                   test_freq=4, episodes_per_train=8, episodes_per_test=1, seed=0, distributed=ctx)
    space = gym.make("CartPole-v1").observation_space
    agent = DQN(space, gym.spaces.Discrete(2), hidden_sizes=(16,), learning_starts=16, seed=ctx.rank,
                strategy=ctx.collective.strategy)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False,
                          checkpoint_path=os.path.join(tmp, f"run_rank{ctx.rank}"))
    trainer.close()
    np.savez(os.path.join(tmp, f"weights_rank{ctx.rank}.npz"), **agent.nets.state_dict())
    out["trainer"] = {"updates": agent.updates, "tests": len(stats["test_history"]),
                      "episodes": stats["num_collected_episodes"]}


def worker(out: dict, die: bool, tmp: str | None = None) -> None:

    from marl_note.agents.tf import DQN, PPO
    from marl_note.contrib.distributed.tf.multiworker import rank_from_tf_config
    mark(out, "import")

    rank, world = rank_from_tf_config()
    from marl_note.contrib.distributed.tf.multiworker import init_distributed
    strategy = init_distributed().collective.strategy  # the default: no per-collective timeout
    mark(out, "strategy")
    out.update(rank=rank, world=world, replicas=strategy.num_replicas_in_sync)
    n = 12
    lo, hi = rank * n // world, (rank + 1) * n // world
    arrays = dqn_arrays(n, 0)
    space = gym.make("CartPole-v1").observation_space
    single = DQN(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3, max_grad_norm=0.5)
    dist = DQN(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3, max_grad_norm=0.5, strategy=strategy)
    single.nets.train_step(arrays, "single", 0)
    _, td = dist.nets.train_step({k: v[lo:hi] for k, v in arrays.items()}, "dist", 0)
    out["dqn_diff"] = max_diff(single.state_dict(), dist.state_dict())
    mark(out, "dqn")
    out["td_rows"] = int(len(td))
    ppo_single = PPO(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3)
    ppo_dist = PPO(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3, strategy=strategy)
    rng = np.random.default_rng(1)
    act = arrays["act"].astype(np.int64)
    logp, _ = ppo_single.nets.evaluate(arrays["obs"], act, arrays["legal"])
    batch = (arrays["obs"], act, arrays["legal"], logp + 0.1, rng.normal(size=n),
             rng.normal(size=n), rng.uniform(0.5, 1.5, n))
    ppo_single.nets.train_step(*batch, who="single", update=0)
    ppo_dist.nets.train_step(*(b[lo:hi] for b in batch), who="dist", update=0)
    out["ppo_diff"] = max_diff(ppo_single.state_dict(), ppo_dist.state_dict())
    mark(out, "ppo")
    from marl_note.agents import tf as A
    from marl_note.contrib.distributed.tf.multiworker import TFCollective
    from tests.compat.rl_helpers import user_rl
    rl_single = user_rl(A, space, gym.spaces.Discrete(2))
    with strategy.scope():
        rl_dist = user_rl(A, space, gym.spaces.Discrete(2))
    TFCollective(strategy, rank).prepare(rl_dist)  # an RL subclass's networks: rank 0's state on every worker
    rl_batch = tuple(arrays[k] for k in ("obs", "act", "next_obs", "rew", "alive"))
    rl_single.nets.train_step(rl_single, rl_batch)
    rl_dist.nets.train_step(rl_dist, tuple(b[lo:hi] for b in rl_batch))
    out["rl_diff"] = max_diff(rl_single.state_dict(), rl_dist.state_dict())
    mark(out, "rl")
    from marl_note.contrib.distributed.tf.multiworker import any_worker, broadcast_from_rank0
    out["broadcast"] = broadcast_from_rank0(strategy, np.array([rank + 5, 7 * rank])).tolist()
    out["any"] = [any_worker(strategy, rank == 1), any_worker(strategy, False)]
    collective, before = TFCollective(strategy, rank), _threads()
    for i in range(40):  # the trainer's per-chunk lockstep: no thread may outlive its collective
        collective.broadcast({"go_on": True, "steps": i})
    out["threads_added"] = _threads() - before
    mark(out, "helpers")
    if tmp is not None:
        trainer_run(out, strategy, tmp)
        mark(out, "trainer")
    out["last_barrier"] = any_worker(strategy, False)  # both workers are here before one of them leaves
    if not die:
        return
    if rank == 1:
        out["exited"] = True
        return
    start = time.perf_counter()
    try:
        dist.nets.train_step({k: v[lo:hi] for k, v in arrays.items()}, "dist", 1)
        out["second_step"] = "no error"
    except Exception as exc:  # noqa: BLE001 (which error it is is the result)
        out["second_step"] = f"{type(exc).__name__}: {exc}"
    out["failed_after"] = time.perf_counter() - start
    from marl_note.contrib.distributed.tf.multiworker import TFCollective
    try:  # the trainer's collectives fail the same way, named
        TFCollective(strategy, rank).barrier()
        out["barrier"] = "no error"
    except Exception as exc:  # noqa: BLE001 (which error it is is the result)
        out["barrier"] = f"{type(exc).__name__}: {exc}"


def free_ports(n: int) -> list[int]:
    import socket
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def parameter_server(out: dict, tmp: str) -> None:
    """An in-process cluster (2 workers, 1 parameter server, this process the coordinator)."""
    import tensorflow as tf

    from marl_note.agents.tf import DQN, PPO

    ports = free_ports(3)
    spec = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in ports[:2]], "ps": [f"127.0.0.1:{ports[2]}"]})
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = 3  # a 2-core machine hosts 2 workers and the coordinator
    servers = [tf.distribute.Server(spec, job_name="worker", task_index=i, config=config, protocol="grpc")
               for i in range(2)]
    servers.append(tf.distribute.Server(spec, job_name="ps", task_index=0, protocol="grpc"))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    space = gym.make("CartPole-v1").observation_space
    single = DQN(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3, max_grad_norm=0.5)
    dist = DQN(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3, max_grad_norm=0.5, strategy=strategy)
    out["variable_device"] = dist.nets.params["q_net"][0][1].value.device
    arrays = dqn_arrays(12, 0)
    for k in range(3):
        single.nets.train_step(arrays, "single", k)
        dist.nets.train_step(arrays, "dist", k)
    out["coordinator"] = getattr(strategy, "_cluster_coordinator", None) is not None
    out["dqn_diff"] = max_diff(single.state_dict(), dist.state_dict())
    ppo = [PPO(space, gym.spaces.Discrete(2), hidden_sizes=(16, 16), seed=3, n_steps=32, n_epochs=2, strategy=s)
           for s in (None, strategy)]
    cart = env_transitions("CartPole-v1", 32, 0)
    for agent in ppo:
        agent.observe(cart)
        out.setdefault("ppo_steps", []).append(agent.update(10)["gradient_steps"])
    out["ppo_diff"] = max_diff(ppo[0].state_dict(), ppo[1].state_dict())
    ppo[1].save(f"{tmp}/ppo_ps")
    out["restored_plain"] = max_diff(ppo[1].state_dict(), PPO.restore(f"{tmp}/ppo_ps").state_dict())
    from marl_note.agents import tf as A
    from tests.compat.rl_helpers import user_rl
    try:
        with strategy.scope():
            user_rl(A, space, gym.spaces.Discrete(2))
        out["rl_refused"] = "no error"
    except TypeError as exc:
        out["rl_refused"] = str(exc)


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    out: dict = {"mode": mode}
    try:
        if mode == "mirrored":
            two_logical_cpus()
            mirrored(out, sys.argv[3], tuple(sys.argv[4].split(",")))
        elif mode == "ps":  # (after the MirroredStrategy checks of the algorithms named, if any)
            if len(sys.argv) > 4:
                two_logical_cpus()
                out["mirrored"] = {}
                mirrored(out["mirrored"], sys.argv[3], tuple(sys.argv[4].split(",")))
                mark(out, "mirrored")
            parameter_server(out, sys.argv[3])
        else:
            worker(out, die=mode == "worker-die", tmp=sys.argv[3] if len(sys.argv) > 3 else None)
    finally:
        out["seconds"] = time.perf_counter() - START
        with open(path, "w") as f:
            json.dump(out, f)
    if out.get("exited") or mode == "ps":  # (in-process servers cannot be stopped: leave without joining them)
        os._exit(0)  # rank 1 of worker-die: leave without saying goodbye to the cluster


if __name__ == "__main__":
    main()
