"""Collection alone in bench_sb3_dqn.py's numpy run (one CartPole-v1 env, DQN 256-256 acting) or in a zoo recipe's.

    python bench/bench_dqn_collect.py [--steps 20480] [--seed 0] [--recipe ENV] [--against DIR] [--rounds 5]

The trainer and the agent are built as ``bench/bench_sb3_dqn.py`` builds them (RL Zoo's settings: one
train env, ``update_freq`` 256, the 256-256 ReLU Q-network acting through its numpy copy, epsilon-greedy
from 1.0 to 0.04 over 8,000 env steps, a 100,000-transition replay), except that ``learning_starts`` lies
past the last chunk: every ``update()`` takes no gradient step, so what is timed is the rest of that run's
loop: acting, the env step, the collector's checks and bookkeeping, storing into the replay, the
trainer's per-chunk work (and the one test episode the trainer plays when the run stops). Printed: this
process's CPU time (``process_time``) and wall time per env step in microseconds, and a fingerprint of
what was collected (a hash of the replay's stored transitions and the agent's generator state), which
must not change when only the speed of collection changes.

``--recipe ENV`` times a DQN zoo recipe's collection instead (``marl_note/cli/recipes/ENV.toml`` with the numpy
backend, its envs, seats and replay: connect four's self-play with 16 envs and 3-step returns), built as
``bench/bench_numpy_selfplay.py`` builds it but with ``learning_starts`` past the last chunk and no periodic test.

``--against DIR`` compares two trees: each round runs this script once in a fresh interpreter for
``DIR`` (e.g. a worktree of the commit before) and once for this repository (the order alternating),
one BLAS thread each; printed are each run's figures, the medians and the ratio this tree / ``DIR`` of
the CPU time per env step, and whether the fingerprints agree.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def measure(steps: int, seed: int) -> dict[str, Any]:
    """Collect ``steps`` env steps with the bench's trainer and agent (no gradient steps); figures and fingerprint."""
    from marl_note.agents.blas import set_blas_threads
    from marl_note.agents.exploration.policies import EpsGreedyQPolicy
    from marl_note.agents.numpy import DQN
    from marl_note.trainers import DecentralizedTrainer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_sb3_dqn import ENV, TRAIN_FREQ, ZOO

    set_blas_threads(1)
    budget = 50_000  # the zoo's n_timesteps: the exploration schedule is a share of it

    def train_fn(episodes: int, env_steps: int) -> None:
        """Called before each chunk: the chunk that reaches ``steps`` is the last."""
        if env_steps + TRAIN_FREQ >= steps:
            trainer.stop_training = True

    trainer = DecentralizedTrainer(ENV, num_train_envs=1, num_test_envs=1, update_freq=TRAIN_FREQ,
                                   batch_size=ZOO["batch_size"], test_freq=10**9, episodes_per_train=10**6,
                                   episodes_per_test=1, seed=seed, train_fn=train_fn, threads=1)
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed,
                hidden_sizes=tuple(ZOO["net_arch"]), activation="relu", lr=ZOO["learning_rate"],
                gamma=ZOO["gamma"], buffer_size=ZOO["buffer_size"], learning_starts=steps + 2 * TRAIN_FREQ,
                update_steps=ZOO["gradient_steps"], target_update_agent_steps=ZOO["target_update_interval"],
                double=False, criterion="huber", max_grad_norm=10.0,
                policy=EpsGreedyQPolicy(1.0, ZOO["exploration_final_eps"],
                                        n_steps_annealing=round(ZOO["exploration_fraction"] * budget)))
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    finally:
        trainer.close()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return fingerprinted([agent], stats, wall, cpu)


def measure_recipe(env: str, steps: int, seed: int) -> dict[str, Any]:
    """Collect ``steps`` env steps with zoo recipe ``env`` (numpy backend, no gradient steps, no periodic test)."""
    import dataclasses

    from marl_note.agents.blas import set_blas_threads
    from marl_note.cli.zoo import recipe
    from marl_note.cli.zoo_run import prepare

    set_blas_threads(1)
    r = recipe(env).with_budget(env_steps=steps, minutes=None, episodes=None)
    if r.algo != "dqn":
        raise SystemExit(f"--recipe times a DQN recipe's collection; {env}'s algorithm is {r.algo}")
    r = dataclasses.replace(r, agent={**r.agent, "learning_starts": 10 * steps},
                            trainer={**r.trainer, "test_freq": 10**9})
    run = prepare(r, seed=seed, backend="numpy")
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        stats = run.train()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        learners = list({id(a): a for a in run.learners.values()}.values())
    finally:
        run.close()
    return fingerprinted(learners, stats, wall, cpu)


def fingerprinted(agents: list[Any], stats: dict[str, Any], wall: float, cpu: float) -> dict[str, Any]:
    """Per env step figures, and a hash of every agent's stored transitions and generator state."""
    import numpy as np

    digest = hashlib.sha1()
    for agent in agents:
        for name, value in sorted(agent.replay.state_dict().items()):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        digest.update(json.dumps(agent.rng.bit_generator.state, sort_keys=True, default=str).encode())
    n = stats["num_collected_steps"]
    return {"env_steps": n, "episodes": stats["num_collected_episodes"], "cpu_us": 1e6 * cpu / n,
            "wall_us": 1e6 * wall / n, "fingerprint": digest.hexdigest()[:12]}


def run_tree(tree: Path, steps: int, seed: int, recipe: str | None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--steps", str(steps), "--seed", str(seed), "--json"]
    out = subprocess.run(cmd + (["--recipe", recipe] if recipe else []), env=env, capture_output=True, text=True,
                         check=True, cwd=tree).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20_480, help="env steps to collect (rounded up to whole chunks of 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--against", type=Path, default=None, help="a tree to compare with (a worktree of another commit)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the comparison")
    p.add_argument("--recipe", default=None, help="a DQN zoo recipe's collection (e.g. connect_four_v3) instead")
    p.add_argument("--json", action="store_true", help="print one JSON line (what --against reads)")
    args = p.parse_args()
    if args.against is None:
        r = measure(args.steps, args.seed) if args.recipe is None else \
            measure_recipe(args.recipe, args.steps, args.seed)
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{r['env_steps']} env steps ({r['episodes']} episodes): CPU {r['cpu_us']:.1f} us, wall "
                  f"{r['wall_us']:.1f} us per env step; fingerprint {r['fingerprint']}; load {os.getloadavg()}")
        return
    trees = {"before": args.against.resolve(), "after": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    what = f"{args.recipe} recipe's collection" if args.recipe else "collection"
    print(f"{what}, {args.steps} env steps, seed {args.seed}: before = {trees['before']}, after = {ROOT}; "
          f"load {os.getloadavg()}", flush=True)
    for k in range(args.rounds):
        for name in (("before", "after") if k % 2 == 0 else ("after", "before")):
            r = run_tree(trees[name], args.steps, args.seed, args.recipe)
            runs[name].append(r)
            print(f"  round {k} {name:6s} CPU {r['cpu_us']:7.1f} us, wall {r['wall_us']:7.1f} us per env step "
                  f"({r['episodes']} episodes, fingerprint {r['fingerprint']})", flush=True)
    med = {name: {key: statistics.median(r[key] for r in rs) for key in ("cpu_us", "wall_us")}
           for name, rs in runs.items()}
    prints = {r["fingerprint"] for rs in runs.values() for r in rs}
    print(f"medians: before CPU {med['before']['cpu_us']:.1f} us, after {med['after']['cpu_us']:.1f} us per env step: "
          f"after / before {med['after']['cpu_us'] / med['before']['cpu_us']:.3f}x (wall "
          f"{med['after']['wall_us'] / med['before']['wall_us']:.3f}x); the same transitions: {len(prints) == 1}; "
          f"load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
