"""Tic-tac-toe self-play with one DQN in both seats, then evaluation against a random player.

Run:  python examples/tictactoe_selfplay.py  [--episodes N] [--seed S]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.agents.torch import DQN
from marl_note.trainers import DecentralizedTrainer


def outcome_rates(rewards: np.ndarray, seat: int) -> dict[str, float]:
    r = rewards[:, seat]
    return {"win": float((r > 0).mean()), "draw": float((r == 0).mean()), "loss": float((r < 0).mean())}


def train(episodes: int = 6000, seed: int = 0, plot: str | None = "runs/tictactoe_selfplay.png",
          progress: bool = True):
    """Train the self-play DQN; returns ``(learner, random_opponent, trainer, stats)``, the random player
    the periodic tests used (the caller closes the trainer)."""
    torch.set_num_threads(1)  # these small MLPs train fastest on one thread of a 2-core machine
    random_opponent = RandomAgent(tictactoe_v3.env().action_space("player_2"), seed=seed)
    trainer = DecentralizedTrainer(
        tictactoe_v3.env, num_train_envs=16, num_test_envs=16, batch_size=64, update_freq=100,
        test_freq=500, episodes_per_train=episodes, episodes_per_test=100, seed=seed,
        # periodic tests play the learner (player_1) against the random agent: metric = its mean return
        reward_metric=lambda r: float(r[:, 0].mean()), plot_path=plot)

    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=seed,
                  hidden_sizes=(128, 128), lr=1e-3, gamma=0.99, buffer_size=50_000, learning_starts=1000,
                  target_update=250)

    # self-play: one network in both seats, both seats learn
    stats = trainer.train([learner, learner], learning_mask=[1, 1], test_agents=[learner, random_opponent],
                          plot=plot is not None, progress=progress)
    return learner, random_opponent, trainer, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=6000, help="training episodes (self-play games)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="runs/tictactoe_selfplay.png")
    args = parser.parse_args()
    learner, random_opponent, trainer, stats = train(args.episodes, args.seed, args.plot)
    print(f"trained {stats['num_collected_episodes']} self-play games, {stats['num_collected_steps']} env steps, "
          f"{stats['num_gradient_steps']} gradient steps in {stats['training_time']:.0f} s")

    first = trainer.test([learner, random_opponent], episodes=500)
    second = trainer.test([random_opponent, learner], episodes=500)
    for label, res, seat in (("DQN as player_1 (moves first)", first, 0), ("DQN as player_2", second, 1)):
        rates = outcome_rates(res["rewards"], seat)
        print(f"{label:32s} vs random: win {rates['win']:.1%}  draw {rates['draw']:.1%}  loss {rates['loss']:.1%}")
    if "plot_path" in stats:
        print(f"plot: {stats['plot_path']}")
    trainer.close()


if __name__ == "__main__":
    main()
