"""MADDPG on MPE simple_spread, compared with one shared-parameter PPO in every seat and random play.

Three agents must cover three landmarks without colliding. MADDPG gives each seat its own actor
and trains one centralised critic per agent on the joint observations and actions; the trainer
hands it one joint row per env step. The comparison puts a single PPO in all three seats (the
observation gets a one-hot agent id so the shared policy can tell the seats apart).

Run:  python examples/mpe_spread.py [--episodes 800] [--backend torch|tf]
"""
from __future__ import annotations

import argparse
import importlib

from mpe2 import simple_spread_v3

from marl_note.agents import RandomAgent
from marl_note.agents.threads import DEFAULT_THREADS, use_threads
from marl_note.envs import with_agent_id
from marl_note.trainers import DecentralizedTrainer


def spread():
    return simple_spread_v3.parallel_env(max_cycles=25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=800)
    parser.add_argument("--backend", default="torch", choices=["torch", "tf"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    agents = importlib.import_module(f"marl_note.agents.{args.backend}")
    use_threads(DEFAULT_THREADS, backend=args.backend)  # TF fixes its thread pools before the agents exist
    common = dict(num_train_envs=8, num_test_envs=10, batch_size=1024, test_freq=max(1, args.episodes // 4),
                  episodes_per_train=args.episodes, episodes_per_test=20, seed=args.seed)

    # MADDPG: one object, one actor per seat; train() gets the seats, learning goes to the object
    trainer = DecentralizedTrainer(spread, update_freq=200, **common)
    maddpg = agents.MADDPG.from_trainer(trainer, seed=args.seed)
    trainer.train(maddpg.seat_agents(), learning_mask=[1, 1, 1], plot=False)
    maddpg_return = trainer.test(maddpg.seat_agents(), episodes=50)["reward"]
    random_seats = [RandomAgent(trainer.action_space(a), seed=k) for k, a in enumerate(trainer.possible_agents)]
    random_return = trainer.test(random_seats, episodes=50)["reward"]
    trainer.close()

    # one shared PPO in all seats, on observations with a one-hot agent id
    trainer = DecentralizedTrainer(with_agent_id(spread), update_freq=400, **common)
    ppo = agents.PPO(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), n_steps=2400,
                     seed=args.seed)
    trainer.train([ppo] * 3, learning_mask=[1, 1, 1], plot=False)
    ppo_return = trainer.test([ppo] * 3, episodes=50)["reward"]
    trainer.close()

    print(f"mean episode return per agent over 50 greedy episodes (higher is better):\n"
          f"  random      {random_return:8.2f}\n  MADDPG      {maddpg_return:8.2f}\n  shared PPO  {ppo_return:8.2f}")


if __name__ == "__main__":
    main()
