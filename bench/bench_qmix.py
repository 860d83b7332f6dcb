"""Value decomposition benchmark (not part of the test suite): VDN and QMIX against independent DQN and a
random player on simple_spread_v3 (3 agents, discrete actions), the same env-step budget for each.

Each learner trains through DecentralizedTrainer (8 train envs, batch 128, one update call every
200 env steps) for ``--episodes`` episodes of 25 steps (two 20-episode greedy tests during training
give the history), then plays ``--test-episodes`` greedy episodes; the score is the mean episode
return per agent (the trainer's metric; simple_spread's rewards are negative distances and
collision penalties, higher is better). VDN and QMIX learn the team reward as the mean of the
agents' rewards (``team_reward="mean"``); independent DQN is one DQN per seat, each on its own
reward, with the same exploration schedule (eps 1 -> 0.05 over the first 40% of the budget),
learning rate, batch and replay ratio (per network: so it makes 3x the gradient steps of the one
joint learner, whose step trains every agent's Q-network). Wall time and the process CPU time are
printed with the load average (the machine is shared).

Run:  python bench/bench_qmix.py [--episodes 2000] [--seed 0] [--only qmix,vdn,dqn,random] [--backend torch]
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import time

import numpy as np
from mpe2 import simple_spread_v3

from marl_note.agents import RandomAgent
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.trainers import DecentralizedTrainer

MAX_CYCLES = 25
SHARED = dict(lr=5e-4, replay_ratio=0.25, learning_starts=1000, hidden_sizes=(64, 64), gamma=0.99)


def spread():
    return simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES)


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def make_trainer(episodes: int, seed: int, test_episodes: int) -> DecentralizedTrainer:
    # two short tests during training (20 episodes, for the history), the score from the final test
    return DecentralizedTrainer(spread, num_train_envs=8, num_test_envs=10, batch_size=128, update_freq=200,
                                test_freq=max(1, episodes // 2), episodes_per_train=episodes,
                                episodes_per_test=20, seed=seed)


def timed(run):
    wall, cpu = time.perf_counter(), time.process_time()
    out = run()
    out.update(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu, load=os.getloadavg()[0])
    return out


def run_joint(agents_mod, name: str, episodes: int, seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(episodes, seed, test_episodes)
    anneal = max(1, int(0.4 * episodes * MAX_CYCLES))
    learner = getattr(agents_mod, name).from_trainer(trainer, seed=seed, eps_anneal_steps=anneal, target_update=200,
                                                     **SHARED)

    def run():
        stats = trainer.train(learner.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
        result = trainer.test(learner.seat_agents(), episodes=test_episodes)
        trainer.close()
        return {"return": result["reward"], "history": [round(m, 2) for _, m in stats["test_history"]],
                "grad_steps": stats["num_gradient_steps"], "env_steps": stats["num_collected_steps"]}
    return timed(run)


def run_dqn(agents_mod, episodes: int, seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(episodes, seed, test_episodes)
    anneal = max(1, int(0.4 * episodes * MAX_CYCLES))
    dqns = [agents_mod.DQN(trainer.observation_space(a), trainer.action_space(a), seed=seed + k, target_update=200,
                           policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=anneal), **SHARED)
            for k, a in enumerate(trainer.possible_agents)]

    def run():
        stats = trainer.train(dqns, learning_mask=[1, 1, 1], plot=False, progress=False)
        result = trainer.test(dqns, episodes=test_episodes)
        trainer.close()
        return {"return": result["reward"], "history": [round(m, 2) for _, m in stats["test_history"]],
                "grad_steps": stats["num_gradient_steps"], "env_steps": stats["num_collected_steps"]}
    return timed(run)


def run_random(seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(1, seed, test_episodes)
    seats = [RandomAgent(trainer.action_space(a), seed=seed + k) for k, a in enumerate(trainer.possible_agents)]

    def run():
        result = trainer.test(seats, episodes=test_episodes)
        trainer.close()
        return {"return": result["reward"], "history": [], "grad_steps": 0, "env_steps": 0}
    return timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000, help="training episodes per learner (25 steps each)")
    parser.add_argument("--test-episodes", type=int, default=100)
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="qmix,vdn,dqn,random")
    args = parser.parse_args()
    agents_mod = backend(args.backend)
    print(f"# simple_spread_v3 (max_cycles={MAX_CYCLES}), {args.episodes} training episodes "
          f"({args.episodes * MAX_CYCLES} env steps), {args.test_episodes} greedy test episodes, "
          f"backend={args.backend}, seed={args.seed}, python {platform.python_version()}, {os.cpu_count()} CPUs")
    print("# mean episode return per agent (higher is better); wall and process CPU seconds; load average at the end")
    for name in args.only.split(","):
        if name == "random":
            r = run_random(args.seed, args.test_episodes)
        elif name == "dqn":
            r = run_dqn(agents_mod, args.episodes, args.seed, args.test_episodes)
        else:
            r = run_joint(agents_mod, name.upper(), args.episodes, args.seed, args.test_episodes)
        print(f"{name:8s} return {r['return']:8.2f}   wall {r['wall']:6.1f}s   cpu {r['cpu']:6.1f}s   "
              f"load {r['load']:4.1f}   env steps {r['env_steps']}   gradient steps {r['grad_steps']}   "
              f"test history {r['history']}", flush=True)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
