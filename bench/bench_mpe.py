"""MPE benchmark (not part of the test suite): simple_spread_v3 for a fixed budget of episodes.

Compares, through DecentralizedTrainer with the same env budget:
- MADDPG (centralised critics, one actor per seat) in all three seats,
- one shared-parameter PPO in all three seats (observations carry a one-hot agent id),
- uniformly random actions,
and prints the mean episode return per agent over greedy test episodes (higher is better; the
rewards of simple_spread are negative distances and collision penalties).

Run:  python bench/bench_mpe.py [--episodes 1600] [--backend torch] [--seed 0] [--only maddpg,ppo]
"""
from __future__ import annotations

import argparse
import importlib
import platform
import time

import numpy as np
from mpe2 import simple_spread_v3

from marl_note.agents import RandomAgent
from marl_note.envs import with_agent_id
from marl_note.trainers import DecentralizedTrainer

MAX_CYCLES = 25


def spread():
    return simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES)


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def make_trainer(env, episodes: int, seed: int, update_freq: int, test_episodes: int) -> DecentralizedTrainer:
    return DecentralizedTrainer(env, num_train_envs=8, num_test_envs=10, batch_size=1024, update_freq=update_freq,
                                test_freq=max(1, episodes // 4), episodes_per_train=episodes,
                                episodes_per_test=test_episodes, seed=seed)


def run_maddpg(agents_mod, episodes: int, seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(spread, episodes, seed, update_freq=200, test_episodes=test_episodes)
    maddpg = agents_mod.MADDPG.from_trainer(trainer, seed=seed)
    start = time.perf_counter()
    stats = trainer.train(maddpg.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
    result = trainer.test(maddpg.seat_agents(), episodes=test_episodes)
    trainer.close()
    return {"return": result["reward"], "time": time.perf_counter() - start,
            "history": [round(m, 2) for _, m in stats["test_history"]], "grad_steps": stats["num_gradient_steps"],
            "env_steps": stats["num_collected_steps"]}


def run_shared_ppo(agents_mod, episodes: int, seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(with_agent_id(spread), episodes, seed, update_freq=400, test_episodes=test_episodes)
    ppo = agents_mod.PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), n_steps=2400,
                         seed=seed)
    start = time.perf_counter()
    stats = trainer.train([ppo] * 3, learning_mask=[1, 1, 1], plot=False, progress=False)
    result = trainer.test([ppo] * 3, episodes=test_episodes)
    trainer.close()
    return {"return": result["reward"], "time": time.perf_counter() - start,
            "history": [round(m, 2) for _, m in stats["test_history"]], "grad_steps": stats["num_gradient_steps"],
            "env_steps": stats["num_collected_steps"]}


def run_random(seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(spread, 1, seed, update_freq=100, test_episodes=test_episodes)
    seats = [RandomAgent(trainer.action_space(a), seed=seed + k) for k, a in enumerate(trainer.possible_agents)]
    start = time.perf_counter()
    result = trainer.test(seats, episodes=test_episodes)
    trainer.close()
    return {"return": result["reward"], "time": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1600, help="training episodes per learner (25 steps each)")
    parser.add_argument("--test-episodes", type=int, default=50)
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="maddpg,ppo,random")
    args = parser.parse_args()
    only = set(args.only.split(","))
    agents_mod = backend(args.backend)
    print(f"# simple_spread_v3 (max_cycles={MAX_CYCLES}), {args.episodes} training episodes, "
          f"{args.test_episodes} greedy test episodes, backend={args.backend}, seed={args.seed}, "
          f"python {platform.python_version()}")
    print("# mean episode return per agent (higher is better)")
    if "random" in only:
        r = run_random(args.seed, args.test_episodes)
        print(f"random       return {r['return']:8.2f}")
    if "maddpg" in only:
        r = run_maddpg(agents_mod, args.episodes, args.seed, args.test_episodes)
        print(f"MADDPG       return {r['return']:8.2f}   time {r['time']:6.1f}s   env steps {r['env_steps']}   "
              f"gradient steps {r['grad_steps']}   test history {r['history']}")
    if "ppo" in only:
        r = run_shared_ppo(agents_mod, args.episodes, args.seed, args.test_episodes)
        print(f"shared PPO   return {r['return']:8.2f}   time {r['time']:6.1f}s   env steps {r['env_steps']}   "
              f"updates {r['grad_steps']}   test history {r['history']}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
