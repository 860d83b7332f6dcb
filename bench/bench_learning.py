"""Learning benchmarks (not part of the test suite).

- CartPole-v1 with DQN and with PPO until a mean test return of 475 (10 test episodes), printing
  wall time, env steps and gradient steps.
- Tic-tac-toe self-play DQN for a fixed budget, then win/draw/loss against a random legal-move
  player in both seats (500 games each).
- SAC: CartPole-v1 (discrete) until a mean test return of 475, and Pendulum-v1 (continuous) until
  a mean test return of -200 (10 test episodes each), or ``--max-minutes`` of wall time.

Run:  python bench/bench_learning.py [--backend torch] [--only cartpole-dqn,cartpole-ppo,tictactoe]
      python bench/bench_learning.py --only cartpole-sac,pendulum-sac [--seed 1] [--max-minutes 15]
"""
from __future__ import annotations

import argparse
import importlib
import platform
import time

import numpy as np
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.trainers import DecentralizedTrainer


def backend(name: str):
    if name == "torch":
        import torch

        torch.set_num_threads(1)
    return importlib.import_module(f"marl_note.agents.{name}")


def cartpole(algo: str, agents_mod, seed: int, max_episodes: int) -> dict:
    on_policy = algo == "PPO"
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=16, num_test_envs=10,
                                   update_freq=2048 if on_policy else 100, test_freq=50,
                                   episodes_per_train=max_episodes, episodes_per_test=10, seed=seed,
                                   stop_fn=lambda metric, episodes: metric >= 475)
    agent = getattr(agents_mod, algo)(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    return {"solved": stats["stopped_by_stop_fn"], "wall_s": stats["training_time"],
            "env_steps": stats["num_collected_steps"], "gradient_steps": stats["num_gradient_steps"],
            "best": stats["best_reward"]}


# SAC recipes: env id, the mean test return that counts as solved, trainer and agent settings
SAC_RECIPES = {
    "cartpole-sac": ("CartPole-v1", 475.0, dict(num_train_envs=4, update_freq=100, test_freq=20),
                     dict(hidden_sizes=(256, 256), learning_starts=1000)),
    "pendulum-sac": ("Pendulum-v1", -200.0, dict(num_train_envs=4, update_freq=200, test_freq=8),
                     dict(hidden_sizes=(256, 256), learning_starts=1000)),
}


def sac(task: str, agents_mod, seed: int, max_episodes: int, max_minutes: float, verbose: bool) -> dict:
    """SAC until the recipe's test return (or the wall-time budget); the test metric is checked every test."""
    env_id, threshold, trainer_kw, agent_kw = SAC_RECIPES[task]
    start = time.perf_counter()

    def stop(metric: float, episodes: int) -> bool:
        if verbose:
            print(f"  {task} episode {episodes}: test return {metric:.1f} at {time.perf_counter() - start:.0f} s",
                  flush=True)
        return metric >= threshold or time.perf_counter() - start > 60 * max_minutes

    trainer = DecentralizedTrainer(env_id, num_test_envs=10, batch_size=256, episodes_per_train=max_episodes,
                                   episodes_per_test=10, seed=seed, stop_fn=stop, **trainer_kw)
    agent = agents_mod.SAC(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed,
                           **agent_kw)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    final = trainer.history[-1][1] if trainer.history else float("nan")
    return {"solved": stats["best_reward"] >= threshold, "wall_s": round(stats["training_time"], 1),
            "env_steps": stats["num_collected_steps"], "gradient_steps": stats["num_gradient_steps"],
            "best": stats["best_reward"], "last_test": final, "temperature": round(agent.temperature, 4)}


def tictactoe(agents_mod, seed: int, episodes: int) -> dict:
    random_player = RandomAgent(tictactoe_v3.env().action_space("player_1"), seed=seed)
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=16, num_test_envs=16, update_freq=100,
                                   test_freq=episodes, episodes_per_train=episodes, episodes_per_test=100, seed=seed)
    learner = agents_mod.DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=seed)
    start = time.perf_counter()
    trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                  test_agents=[learner, random_player])
    wall = time.perf_counter() - start
    out = {"wall_s": wall, "episodes": episodes}
    for seat, agents in ((0, [learner, random_player]), (1, [random_player, learner])):
        r = trainer.test(agents, episodes=500)["rewards"][:, seat]
        out[f"seat{seat + 1}"] = f"win {np.mean(r > 0):.2f} draw {np.mean(r == 0):.2f} loss {np.mean(r < 0):.2f}"
    trainer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--only", default="cartpole-dqn,cartpole-ppo,tictactoe")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tictactoe-episodes", type=int, default=6000)
    parser.add_argument("--max-minutes", type=float, default=15.0, help="wall-time budget of each SAC run")
    parser.add_argument("--verbose", action="store_true", help="print every test of the SAC runs")
    args = parser.parse_args()
    mod = backend(args.backend)
    print(f"machine: {platform.machine()}, {platform.python_version()}, backend {args.backend}, seed {args.seed}")
    for task in args.only.split(","):
        if task == "cartpole-dqn":
            print("CartPole-v1 DQN:", cartpole("DQN", mod, args.seed, 3000))
        elif task == "cartpole-ppo":
            print("CartPole-v1 PPO:", cartpole("PPO", mod, args.seed, 3000))
        elif task == "tictactoe":
            print(f"tic-tac-toe self-play DQN, {args.tictactoe_episodes} games:", tictactoe(mod, args.seed,
                                                                                         args.tictactoe_episodes))
        elif task in SAC_RECIPES:
            print(f"{SAC_RECIPES[task][0]} SAC:", sac(task, mod, args.seed, 3000, args.max_minutes, args.verbose),
                  flush=True)
        else:
            raise SystemExit(f"unknown task {task!r}; choose from cartpole-dqn, cartpole-ppo, tictactoe, "
                             f"{', '.join(SAC_RECIPES)}")


if __name__ == "__main__":
    main()
