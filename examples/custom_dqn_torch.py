"""A DQN written by hand on top of ``marl_note.agents.torch.RL``, trained on CartPole-v1.

The user code is the class below: the network, ``action`` (Q-values), the loss ``__call__`` and
``update_param`` (target network sync). Acting, replay, the update loop and saving come from RL.

Run:  python examples/custom_dqn_torch.py  [--episodes N] [--seed S] [--save PATH] [--quiet]
"""
from __future__ import annotations

import argparse
import copy
import os
import tempfile

import torch
from torch import nn

from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.compat.torch import RL
from marl_note.trainers import DecentralizedTrainer


class MyDQN(RL):
    """Double DQN with a hard-copied target network and the Huber loss."""

    def __init__(self, observation_space, action_space, hidden=128, lr=1e-3, target_every=250, seed=None):
        super().__init__(observation_space, action_space, buffer_size=50_000, learning_starts=1_000,
                         update_steps=4, gamma=0.99, max_grad_norm=10.0, seed=seed,
                         policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000))
        self.target_every = target_every
        self.q = nn.Sequential(nn.Linear(self.obs_dim, hidden), nn.ReLU(),
                               nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, action_space.n))
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)

    def action(self, s):
        return self.q(s)

    def __call__(self, s, a, next_s, r, d):
        with torch.no_grad():  # the online net picks a*, the target net values it
            best = self.q(next_s).argmax(1, keepdim=True)
            y = r + self.gamma * (1 - d) * self.target(next_s).gather(1, best).squeeze(1)
        q = self.q(s).gather(1, a[:, None]).squeeze(1)
        return nn.functional.smooth_l1_loss(q, y)

    def update_param(self):
        if self.updates % self.target_every == 0:
            self.hard_update(self.target, self.q)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=400, help="training episodes (at most)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=os.path.join(tempfile.gettempdir(), "custom_dqn_torch.zip"))
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    torch.manual_seed(args.seed)  # network initialisation
    torch.set_num_threads(1)      # small networks: one thread is fastest on a few cores

    best_path = args.save.replace(".zip", "_best.zip")
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=8, num_test_envs=10, batch_size=64,
                                   update_freq=16, test_freq=20, episodes_per_train=args.episodes,
                                   episodes_per_test=10, seed=args.seed,
                                   save_best_fn=lambda episodes: agent.save_param(best_path),
                                   stop_fn=lambda mean_return, episodes: mean_return >= 475)
    agent = MyDQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), lr=5e-4, seed=args.seed)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=not args.quiet)
    print(f"{stats['num_collected_episodes']} episodes, {stats['num_collected_steps']} env steps, "
          f"{stats['num_gradient_steps']} gradient steps in {stats['training_time']:.0f} s; "
          f"best test return {stats['best_reward']:.1f} after {stats['best_episode']} episodes")

    print(f"last weights, greedy over 20 episodes: mean return {trainer.test([agent], episodes=20)['reward']:.1f}")
    agent.restore_param(best_path)  # the weights of the best periodic test
    print(f"best weights, greedy over 20 episodes: mean return {trainer.test([agent], episodes=20)['reward']:.1f}")
    restored = MyDQN.restore(agent.save(args.save))
    print(f"saved to {args.save}; the restored agent's mean return: "
          f"{trainer.test([restored], episodes=20)['reward']:.1f}")
    trainer.close()


if __name__ == "__main__":
    main()
