"""Cooperative benchmark (not part of the test suite): MAPPO, IPPO, shared PPO, MADDPG and random on PettingZoo envs.

Every learner trains through DecentralizedTrainer for the same env-step budget and seed, then plays
``--test-episodes`` episodes greedily (arg-max actions) and, for MAPPO/IPPO, with sampled actions;
the figure is the team return: the episode return summed over the agents, averaged over episodes.
Wall time and this process's CPU time (``time.process_time()``) are printed per row, with the load.

Shared PPO ("ppo") is the zoo recipe whose shared-PPO figure docs/benchmarks.md compares against:
its agent options, wrappers and trainer settings (``SHARED_PPO_RECIPE``: simple_spread's on
simple_spread and simple_reference, simple_tag's padded seats on simple_speaker_listener, pursuit's
on pursuit). It plays the arg-max action ("greedy") and, like MAPPO, its samples ("sampled").
``--recipe NAME`` trains MAPPO/IPPO with a zoo recipe's ``[agent]`` options and its trainer's
``num_envs``, ``batch_size`` and ``update_freq`` instead of the defaults.
pursuit_v5 runs the zoo recipe's 200-step episodes (``--max-cycles`` changes it); periodic tests
during training play ``--periodic-test-episodes`` episodes (default: ``--test-episodes``).

Run:  python bench/bench_cooperative.py [--env simple_spread_v3] [--env-steps 100000] [--seed 0]
                                        [--only mappo,ippo,ppo,maddpg,random] [--backend torch]
                                        [--recipe simple_reference_v3-mappo] [--max-cycles 200]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's marl_note

from marl_note.agents import RandomAgent  # noqa: E402
from marl_note.cli.zoo import recipe  # noqa: E402
from marl_note.cli.zoo_run import WrappedEnv  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402

N_ENVS = 8
# the zoo recipe whose shared-PPO figure each env is compared with (docs/benchmarks.md: the zoo, and
# "Does a recipe generalise?" for the two envs that have no recipe of their own)
SHARED_PPO_RECIPE = {"simple_spread_v3": "simple_spread_v3", "simple_reference_v3": "simple_spread_v3",
                     "simple_speaker_listener_v4": "simple_tag_v3", "pursuit_v5": "pursuit_v5"}
MAX_CYCLES = {"simple_spread_v3": 25, "simple_reference_v3": 25, "simple_speaker_listener_v4": 25,
              "pursuit_v5": 200}  # pursuit: the zoo recipe's episodes (the env's default is 500)


def make_env(name: str, cycles: int):
    if name in ("simple_spread_v3", "simple_reference_v3", "simple_speaker_listener_v4"):
        module = importlib.import_module(f"mpe2.{name}")
        return functools.partial(module.parallel_env, max_cycles=cycles)
    if name == "pursuit_v5":
        from pettingzoo.sisl import pursuit_v5
        return functools.partial(pursuit_v5.parallel_env, max_cycles=cycles)
    raise SystemExit(f"unknown env {name!r}")


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def trainer_for(env, cycles: int, env_steps: int, seed: int, update_freq: int, test_episodes: int,
                num_envs: int = N_ENVS, batch_size: int = 1024) -> DecentralizedTrainer:
    """``env_steps // cycles`` training episodes: these envs' episodes always last ``cycles`` steps."""
    episodes = max(num_envs, env_steps // cycles)
    return DecentralizedTrainer(env, num_train_envs=num_envs, num_test_envs=10, batch_size=batch_size,
                                update_freq=update_freq, test_freq=max(1, episodes // 4),
                                episodes_per_train=episodes, episodes_per_test=test_episodes, seed=seed)


def team(result: dict) -> float:
    return float(np.sum(result["rewards"], axis=1).mean())


def alike(trainer: DecentralizedTrainer) -> bool:
    """Every seat has the same observation and action spaces."""
    first = trainer.possible_agents[0]
    return all(trainer.observation_space(a) == trainer.observation_space(first)
               and trainer.action_space(a) == trainer.action_space(first) for a in trainer.possible_agents)


def run(algo: str, env_name: str, mod, env_steps: int, seed: int, test_episodes: int, periodic: int,
        max_cycles: int | None = None, mappo_recipe: str | None = None) -> dict:
    if env_name not in MAX_CYCLES:
        raise SystemExit(f"unknown env {env_name!r}; known: {', '.join(MAX_CYCLES)}")
    cycles = max_cycles or MAX_CYCLES[env_name]
    env = make_env(env_name, cycles)
    start, cpu = time.perf_counter(), time.process_time()
    if algo == "random":
        trainer = trainer_for(env, cycles, env_steps, seed, 400, periodic)
        seats = [RandomAgent(trainer.action_space(a), seed=seed + k) for k, a in enumerate(trainer.possible_agents)]
        out = {"greedy": team(trainer.test(seats, episodes=test_episodes)), "env_steps": 0}
    elif algo == "ppo":  # one PPO shared by every seat: the zoo recipe's settings (SHARED_PPO_RECIPE)
        r = recipe(SHARED_PPO_RECIPE[env_name])
        t = r.trainer
        trainer = trainer_for(WrappedEnv(env, tuple(r.wrappers)), cycles, env_steps, seed, t["update_freq"], periodic,
                              num_envs=t["num_envs"], batch_size=t["batch_size"])
        first = trainer.possible_agents[0]
        agent = mod.PPO(trainer.observation_space(first), trainer.action_space(first), seed=seed,
                        **{**r.agent_kwargs(), "deterministic_eval": True})
        seats = [agent] * len(trainer.possible_agents)
        stats = trainer.train(seats, learning_mask=[1] * len(seats), plot=False, progress=False)
        out = {"greedy": team(trainer.test(seats, episodes=test_episodes)), "env_steps": stats["num_collected_steps"],
               "recipe": r.label}
        agent.cfg = dataclasses.replace(agent.cfg, deterministic_eval=False)
        out["sampled"] = team(trainer.test(seats, episodes=test_episodes))
    else:
        t = recipe(mappo_recipe).trainer if mappo_recipe else {}
        trainer = trainer_for(env, cycles, env_steps, seed, t.get("update_freq", 400 if algo != "maddpg" else 200),
                              periodic, num_envs=t.get("num_envs", N_ENVS), batch_size=t.get("batch_size", 1024))
        if algo == "maddpg":
            learner = mod.MADDPG.from_trainer(trainer, seed=seed)
        else:  # one actor shared by alike seats, one per seat otherwise
            options = {"share_actor": alike(trainer)}
            if mappo_recipe:
                options.update(recipe(mappo_recipe).agent_kwargs())
            options["deterministic_eval"] = True
            cls = mod.MAPPO if algo == "mappo" else mod.IPPO
            learner = cls.from_trainer(trainer, seed=seed, **options)
        seats = learner.seat_agents()
        stats = trainer.train(seats, learning_mask=[1] * len(seats), plot=False, progress=False)
        out = {"greedy": team(trainer.test(seats, episodes=test_episodes)), "env_steps": stats["num_collected_steps"]}
        if algo != "maddpg":  # the stochastic policy PPO learned (sampled actions in test episodes)
            learner.cfg = dataclasses.replace(learner.cfg, deterministic_eval=False)
            out["sampled"] = team(trainer.test(seats, episodes=test_episodes))
        if mappo_recipe:
            out["recipe"] = mappo_recipe
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
    parser.add_argument("--periodic-test-episodes", type=int, default=None,
                        help="episodes of each periodic test during training (default: --test-episodes)")
    parser.add_argument("--max-cycles", type=int, default=None, help="episode length (default: MAX_CYCLES)")
    parser.add_argument("--recipe", default=None,
                        help="a zoo recipe whose agent and trainer settings MAPPO/IPPO train with")
    parser.add_argument("--json", default=None, help="append each row as a JSON line to this file")
    args = parser.parse_args()
    periodic = args.periodic_test_episodes or args.test_episodes
    mod = backend(args.backend)
    print(f"# {args.env}, {args.env_steps} env steps, seed {args.seed}, {args.backend}, {platform.machine()} "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for algo in args.only.split(","):
        row = {"env": args.env, "algo": algo, "seed": args.seed, "budget": args.env_steps,
               **run(algo, args.env, mod, args.env_steps, args.seed, args.test_episodes, periodic,
                       args.max_cycles, args.recipe)}
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
