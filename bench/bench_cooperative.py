"""Cooperative benchmark (not part of the test suite): MAPPO, IPPO, shared PPO, MADDPG and random on PettingZoo envs.

Every learner trains through DecentralizedTrainer for the same env-step budget and seed, then plays
``--test-episodes`` episodes greedily (arg-max actions) and, for MAPPO/IPPO, with sampled actions;
the figure is the team return: the episode return summed over the agents, averaged over episodes.
Wall time and this process's CPU time (``time.process_time()``) are printed per row, with the load.

Run:  python bench/bench_cooperative.py [--env simple_spread_v3] [--env-steps 100000] [--seed 0]
                                        [--only mappo,ippo,ppo,maddpg,random] [--backend torch]
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import time

import numpy as np

from marl_note.agents import RandomAgent
from marl_note.envs import with_agent_id
from marl_note.trainers import DecentralizedTrainer

N_ENVS = 8


def make_env(name: str):
    if name == "simple_spread_v3":
        from mpe2 import simple_spread_v3
        return lambda: simple_spread_v3.parallel_env(max_cycles=25)
    if name == "simple_reference_v3":
        from mpe2 import simple_reference_v3
        return lambda: simple_reference_v3.parallel_env(max_cycles=25)
    if name == "simple_speaker_listener_v4":
        from mpe2 import simple_speaker_listener_v4
        return lambda: simple_speaker_listener_v4.parallel_env(max_cycles=25)
    if name == "pursuit_v5":
        from pettingzoo.sisl import pursuit_v5
        return lambda: pursuit_v5.parallel_env(max_cycles=500)
    raise SystemExit(f"unknown env {name!r}")


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def trainer_for(env, env_steps: int, seed: int, update_freq: int, test_episodes: int) -> DecentralizedTrainer:
    probe = env()
    cycles = int(getattr(probe.unwrapped, "max_cycles", 25))
    probe.close()
    episodes = max(N_ENVS, env_steps // cycles)
    return DecentralizedTrainer(env, num_train_envs=N_ENVS, num_test_envs=10, batch_size=1024,
                                update_freq=update_freq, test_freq=max(1, episodes // 4),
                                episodes_per_train=episodes, episodes_per_test=test_episodes, seed=seed)


def team(result: dict) -> float:
    return float(np.sum(result["rewards"], axis=1).mean())


def run(algo: str, env_name: str, mod, env_steps: int, seed: int, test_episodes: int) -> dict:
    env = make_env(env_name)
    start, cpu = time.perf_counter(), time.process_time()
    if algo == "random":
        trainer = trainer_for(env, env_steps, seed, 400, test_episodes)
        seats = [RandomAgent(trainer.action_space(a), seed=seed + k) for k, a in enumerate(trainer.possible_agents)]
        out = {"greedy": team(trainer.test(seats, episodes=test_episodes)), "env_steps": 0}
    elif algo == "ppo":  # one PPO shared by every seat, observations with the agent id
        trainer = trainer_for(with_agent_id(env), env_steps, seed, 400, test_episodes)
        agent = mod.PPO(trainer.observation_space(trainer.possible_agents[0]),
                        trainer.action_space(trainer.possible_agents[0]), n_steps=2400, seed=seed)
        seats = [agent] * len(trainer.possible_agents)
        stats = trainer.train(seats, learning_mask=[1] * len(seats), plot=False, progress=False)
        out = {"greedy": team(trainer.test(seats, episodes=test_episodes)), "env_steps": stats["num_collected_steps"]}
    else:
        trainer = trainer_for(env, env_steps, seed, 400 if algo != "maddpg" else 200, test_episodes)
        if algo == "maddpg":
            learner = mod.MADDPG.from_trainer(trainer, seed=seed)
        else:
            share = len({str(trainer.observation_space(a)) for a in trainer.possible_agents}) == 1
            cls = mod.MAPPO if algo == "mappo" else mod.IPPO
            learner = cls.from_trainer(trainer, seed=seed, share_actor=share)
        seats = learner.seat_agents()
        stats = trainer.train(seats, learning_mask=[1] * len(seats), plot=False, progress=False)
        out = {"greedy": team(trainer.test(seats, episodes=test_episodes)), "env_steps": stats["num_collected_steps"]}
        if algo != "maddpg":  # the stochastic policy PPO learned (sampled actions in test episodes)
            learner.cfg = dataclasses.replace(learner.cfg, deterministic_eval=False)
            out["sampled"] = team(trainer.test(seats, episodes=test_episodes))
    trainer.close()
    out.update(wall_s=round(time.perf_counter() - start, 1), cpu_s=round(time.process_time() - cpu, 1),
               load=os.getloadavg()[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="simple_spread_v3")
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-episodes", type=int, default=100)
    parser.add_argument("--backend", default="torch", choices=("torch", "tf"))
    parser.add_argument("--only", default="mappo,ippo,ppo,maddpg,random")
    parser.add_argument("--json", default=None, help="append each row as a JSON line to this file")
    args = parser.parse_args()
    mod = backend(args.backend)
    print(f"# {args.env}, {args.env_steps} env steps, seed {args.seed}, {args.backend}, {platform.machine()} "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for algo in args.only.split(","):
        row = {"env": args.env, "algo": algo, "seed": args.seed, "budget": args.env_steps,
               **run(algo, args.env, mod, args.env_steps, args.seed, args.test_episodes)}
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
