"""Connect four self-play with an opponent pool of frozen snapshots and Elo ratings.

The learner (a PyTorch DQN) plays both seats against snapshots of itself and a random player,
a new snapshot joins the pool every ``--snapshot-every`` episodes, and every test rates the
learner against the pool (Elo). At the end it plays a random legal-move player in both seats.

Run:  python examples/connect_four_selfplay.py [--episodes N] [--seed S]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from pettingzoo.classic import connect_four_v3

from marl_note.agents import RandomAgent
from marl_note.agents.torch import DQN
from marl_note.trainers import DecentralizedTrainer, OpponentPool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=6000)
    parser.add_argument("--snapshot-every", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="runs/connect_four_selfplay.png")
    args = parser.parse_args()
    torch.set_num_threads(1)  # these small MLPs train fastest on one thread of a 2-core machine

    trainer = DecentralizedTrainer(connect_four_v3.env, num_train_envs=16, num_test_envs=16, batch_size=128,
                                   update_freq=128, test_freq=1000, episodes_per_train=args.episodes,
                                   episodes_per_test=64, seed=args.seed, plot_path=args.plot,
                                   reward_metric=lambda r: float(r[:, 0].mean()))
    obs_space, act_space = trainer.observation_space("player_0"), trainer.action_space("player_0")
    learner = DQN(obs_space, act_space, seed=args.seed, hidden_sizes=(256, 256), lr=5e-4, gamma=0.99,
                  buffer_size=200_000, learning_starts=2000, target_update=250)
    random_player = RandomAgent(act_space, seed=args.seed)
    pool = OpponentPool(learner, trainer.spec, snapshot_every=args.snapshot_every, eval_episodes=32,
                        sampling="prioritized", seed=args.seed)
    pool.add(random_player, name="random")

    stats = trainer.train([learner, learner], learning_mask=[1, 1], matchmaker=pool, callbacks=[pool],
                          test_agents=[learner, random_player])
    print(f"{stats['num_collected_episodes']} games, {stats['num_collected_steps']} env steps, "
          f"{stats['num_gradient_steps']} gradient steps, {stats['training_time']:.0f} s")
    first = min((n for n in stats["elo"] if n.startswith("snapshot_0")), default=None)
    print("Elo:", {k: round(v) for k, v in sorted(stats["elo"].items(), key=lambda kv: -kv[1])})
    if first:
        print(f"final learner Elo {stats['elo']['learner']:.0f} vs first snapshot {stats['elo'][first]:.0f}")
    for seat, agents in ((0, [learner, random_player]), (1, [random_player, learner])):
        r = trainer.test(agents, episodes=500)["rewards"][:, seat]
        print(f"learner as {trainer.possible_agents[seat]} vs random: win {np.mean(r > 0):.1%} "
              f"draw {np.mean(r == 0):.1%} loss {np.mean(r < 0):.1%}")
    trainer.close()


if __name__ == "__main__":
    main()
