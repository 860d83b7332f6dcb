"""Hindsight experience replay benchmarks (not part of the test suite).

- PointReachEnv (continuous, sparse reward): DDPG + HER (future, k=4) vs plain DDPG with the same
  budget of env steps and gradient steps; success rate of the greedy policy over 200 test episodes.
- BitFlippingEnv (discrete, sparse reward): DQN + HER vs plain DQN for growing numbers of bits, the
  shape of Andrychowicz et al. (2017), figure 1: without HER DQN stops succeeding beyond ~15 bits.

Both use a plain batched loop over ``--envs`` environments (goal-dict observations stacked
key-wise), one ``update()`` per vector step.

Run:  python bench/bench_her.py [--backend torch] [--only point,bits] [--bits 10,20,30,40] [--her-only]
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import time

import numpy as np

from marl_note.envs.goal_envs import BitFlippingEnv, PointReachEnv
from marl_note.types import Transitions


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def stack(obs_list):
    return {k: np.stack([o[k] for o in obs_list]) for k in obs_list[0]}


def evaluate(agent, make_env, episodes: int, seed: int) -> float:
    """Greedy success rate over ``episodes`` episodes (all run side by side)."""
    envs = [make_env() for _ in range(episodes)]
    obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]
    live = list(range(episodes))
    success = np.zeros(episodes, bool)
    while live:
        act = agent.act(stack([obs[i] for i in live]), explore=False)
        still = []
        for a, i in zip(act, live):
            obs[i], _, term, trunc, info = envs[i].step(a if a.shape else int(a))
            if term or trunc:
                success[i] = bool(info.get("is_success", term))
            else:
                still.append(i)
        live = still
    return float(success.mean())


def train(agent, make_env, env_steps: int, n_envs: int, batch_size: int, seed: int,
          log_every: int = 0, test_fn=None) -> dict:
    envs = [make_env() for _ in range(n_envs)]
    obs = [e.reset(seed=seed + 1000 * i)[0] for i, e in enumerate(envs)]
    steps = grads = 0
    start = time.perf_counter()
    history = []
    next_log = log_every
    while steps < env_steps:
        act = agent.act(stack(obs), explore=True)
        next_obs, final, rew, term, trunc = [], [], [], [], []
        for e, a in zip(envs, act):
            o, r, te, tr, _ = e.step(a if a.shape else int(a))
            final.append(o)
            rew.append(r), term.append(te), trunc.append(tr)
            next_obs.append(e.reset()[0] if te or tr else o)
        agent.observe(Transitions(obs=stack(obs), act=np.asarray(act), rew=np.asarray(rew, np.float32),
                                  next_obs=stack(final), terminated=np.asarray(term), truncated=np.asarray(trunc),
                                  stream=np.arange(n_envs)))
        obs = next_obs
        steps += n_envs
        grads += agent.update(batch_size)["gradient_steps"]
        if log_every and steps >= next_log and test_fn is not None:
            history.append((steps, test_fn()))
            next_log += log_every
            if history[-1][1] >= 0.99:
                break
    return {"env_steps": steps, "gradient_steps": grads, "wall_s": time.perf_counter() - start, "history": history}


def point_reach(mod, her: bool, env_steps: int, seed: int) -> dict:
    env = PointReachEnv()
    kwargs = dict(her=dict(strategy="future", k=4), compute_reward=env.compute_reward) if her else {}
    agent = mod.DDPG(env.observation_space, env.action_space, hidden_sizes=(128, 128), gamma=0.98, tau=0.05,
                     learning_starts=1000, replay_ratio=0.5, noise=None, action_l2=1.0, target_clip=(-50.0, 0.0),
                     seed=seed, **kwargs)
    out = train(agent, PointReachEnv, env_steps, n_envs=4, batch_size=256, seed=seed)
    out["success"] = evaluate(agent, PointReachEnv, 200, seed=10_000 + seed)
    return out


def bit_flipping(mod, n_bits: int, her: bool, env_steps: int, seed: int) -> dict:
    env = BitFlippingEnv(n_bits)
    kwargs = dict(her=dict(strategy="future", k=4), compute_reward=env.compute_reward) if her else {}
    from marl_note.agents.exploration.policies import EpsGreedyQPolicy

    agent = mod.DQN(env.observation_space, env.action_space, hidden_sizes=(256,), gamma=0.98, lr=1e-3,
                    learning_starts=1000, replay_ratio=0.25, tau=0.05, buffer_size=100_000,
                    policy=EpsGreedyQPolicy(0.2), seed=seed, **kwargs)
    make = lambda: BitFlippingEnv(n_bits)  # noqa: E731
    out = train(agent, make, env_steps, n_envs=16, batch_size=128, seed=seed, log_every=max(env_steps // 10, 1),
                test_fn=lambda: evaluate(agent, make, 100, seed=20_000 + seed))
    out["success"] = evaluate(agent, make, 200, seed=10_000 + seed)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--only", default="point,bits")
    parser.add_argument("--bits", default="10,15,20,30")
    parser.add_argument("--point-steps", type=int, default=20_000)
    parser.add_argument("--bit-steps", type=int, default=None, help="env steps per bit-flipping run "
                        "(default 4000 * n_bits)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--her-only", action="store_true", help="skip the runs without HER (they stay at 0 "
                        "beyond ~15 bits and take the whole budget)")
    args = parser.parse_args()
    mod = backend(args.backend)
    print(f"# {platform.platform()} | {platform.processor() or platform.machine()} | {os.cpu_count()} cpus | "
          f"python {platform.python_version()} | backend {args.backend} | load {os.getloadavg()[0]:.2f}")
    only = args.only.split(",")
    if "point" in only:
        for her in (True,) if args.her_only else (True, False):
            r = point_reach(mod, her, args.point_steps, args.seed)
            print(f"PointReach DDPG{'+HER' if her else '     '}: success {r['success']:.2f}  "
                  f"env_steps {r['env_steps']}  gradient_steps {r['gradient_steps']}  wall {r['wall_s']:.0f}s",
                  flush=True)
    if "bits" in only:
        for n in [int(b) for b in args.bits.split(",")]:
            steps = args.bit_steps or 4000 * n
            for her in (True,) if args.her_only else (True, False):
                r = bit_flipping(mod, n, her, steps, args.seed)
                curve = " ".join(f"{s // 1000}k:{v:.2f}" for s, v in r["history"])
                print(f"BitFlipping n={n:2d} DQN{'+HER' if her else '     '}: success {r['success']:.2f}  "
                      f"env_steps {r['env_steps']}  gradient_steps {r['gradient_steps']}  "
                      f"wall {r['wall_s']:.0f}s  [{curve}]", flush=True)


if __name__ == "__main__":
    main()
