"""Value decomposition benchmark (not part of the test suite): VDN and QMIX against independent DQN and a
random player on simple_spread_v3 (3 agents, discrete actions) or on a small Hanabi (``--env hanabi``),
the same env-step budget for each.

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

``--env hanabi``: OpenSpiel's Hanabi with 2 players, 2 colours, ranks 1-3, hands of 2 cards, 3
information tokens and 1 life token (:data:`HANABI`; a misplay ends the game and scores 0; the best
score is 6), fully cooperative with legal-action masks, played through
:func:`marl_note.envs.openspiel.cooperative_parallel_env`: every seat acts at every step, the seat
not on turn with ``wait`` as its one legal action, so VDN/QMIX get rows in which every agent
acted. The budget is ``--steps`` env steps (a Budget callback; episodes end by themselves, from 1
to 31 steps); the score is the mean game score over the greedy test episodes (every seat's return
is the score). The learners are as on simple_spread (eps falls over the first 40% of the steps).

Run:  python bench/bench_qmix.py [--episodes 2000] [--seed 0] [--only qmix,vdn,dqn,random] [--backend torch]
      python bench/bench_qmix.py --env hanabi [--steps 100000] [--seed 0] [--only qmix,vdn,dqn,random]
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
from marl_note.envs.openspiel import cooperative_parallel_env
from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.budget import Budget

MAX_CYCLES = 25
SHARED = dict(lr=5e-4, replay_ratio=0.25, learning_starts=1000, hidden_sizes=(64, 64), gamma=0.99)
#: The small Hanabi of ``--env hanabi`` (OpenSpiel's game parameters).
HANABI = dict(players=2, colors=2, ranks=3, hand_size=2, max_information_tokens=3, max_life_tokens=1)
#: The run being measured: the env factory, and the env-step budget (None: ``--episodes`` of MAX_CYCLES steps).
RUN: dict = {}


def spread():
    return simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES)


def hanabi():
    return cooperative_parallel_env("hanabi", **HANABI)


def budget_steps(episodes: int) -> int:
    return RUN["steps"] if RUN.get("steps") else episodes * MAX_CYCLES


def train_kwargs(learn: int) -> dict:
    out: dict = dict(learning_mask=[1] * learn, plot=False, progress=False)
    if RUN.get("steps"):  # (baseline=None: Hanabi is cooperative, never played against a random seat)
        out.update(callbacks=[Budget(env_steps=RUN["steps"])], baseline=None)
    return out


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def make_trainer(episodes: int, seed: int, test_episodes: int) -> DecentralizedTrainer:
    # two short tests during training (20 episodes, for the history), the score from the final test
    if RUN.get("steps"):  # a budget of env steps: the episodes run until the Budget callback stops them
        episodes = 10**7
        test_freq = max(1, RUN["steps"] // 20)  # about two tests during training (episodes of ~10 steps)
    else:
        test_freq = max(1, episodes // 2)
    return DecentralizedTrainer(RUN.get("env", spread), num_train_envs=8, num_test_envs=10, batch_size=128,
                                update_freq=200, test_freq=test_freq, episodes_per_train=episodes,
                                episodes_per_test=20, seed=seed)


def timed(run):
    wall, cpu = time.perf_counter(), time.process_time()
    out = run()
    out.update(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu, load=os.getloadavg()[0])
    return out


def run_joint(agents_mod, name: str, episodes: int, seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(episodes, seed, test_episodes)
    anneal = max(1, int(0.4 * budget_steps(episodes)))
    learner = getattr(agents_mod, name).from_trainer(trainer, seed=seed, eps_anneal_steps=anneal, target_update=200,
                                                     **SHARED)

    def run():
        stats = trainer.train(learner.seat_agents(), **train_kwargs(len(trainer.possible_agents)))
        result = trainer.test(learner.seat_agents(), episodes=test_episodes)
        trainer.close()
        return {"return": result["reward"], "history": [round(m, 2) for _, m in stats["test_history"]],
                "grad_steps": stats["num_gradient_steps"], "env_steps": stats["num_collected_steps"]}
    return timed(run)


def run_dqn(agents_mod, episodes: int, seed: int, test_episodes: int) -> dict:
    trainer = make_trainer(episodes, seed, test_episodes)
    anneal = max(1, int(0.4 * budget_steps(episodes)))
    dqns = [agents_mod.DQN(trainer.observation_space(a), trainer.action_space(a), seed=seed + k, target_update=200,
                           policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=anneal), **SHARED)
            for k, a in enumerate(trainer.possible_agents)]

    def run():
        stats = trainer.train(dqns, **train_kwargs(len(dqns)))
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
    parser.add_argument("--env", default="spread", choices=["spread", "hanabi"])
    parser.add_argument("--episodes", type=int, default=2000,
                        help="simple_spread: training episodes per learner (25 steps each)")
    parser.add_argument("--steps", type=int, default=100_000, help="hanabi: training env steps per learner")
    parser.add_argument("--test-episodes", type=int, default=100)
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="qmix,vdn,dqn,random")
    args = parser.parse_args()
    agents_mod = backend(args.backend)
    if args.env == "hanabi":
        RUN.update(env=hanabi, steps=args.steps)
        print(f"# hanabi {HANABI} (cooperative_parallel_env), {args.steps} training env steps, "
              f"{args.test_episodes} greedy test episodes, backend={args.backend}, seed={args.seed}, "
              f"python {platform.python_version()}, {os.cpu_count()} CPUs")
        print("# mean game score (every seat's return; 0 to 6, higher is better); wall and process CPU seconds; "
              "load average at the end")
    else:
        print(f"# simple_spread_v3 (max_cycles={MAX_CYCLES}), {args.episodes} training episodes "
              f"({args.episodes * MAX_CYCLES} env steps), {args.test_episodes} greedy test episodes, "
              f"backend={args.backend}, seed={args.seed}, python {platform.python_version()}, {os.cpu_count()} CPUs")
        print("# mean episode return per agent (higher is better); wall and process CPU seconds; "
              "load average at the end")
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
