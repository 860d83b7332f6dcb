"""A DQN written by hand on top of ``marl_note.agents.tf.RL`` (TensorFlow/Keras), trained on CartPole-v1.

The user code is the class below: the networks, ``action`` (Q-values), the loss ``__call__`` and
``update_param`` (target network sync). Acting, replay, the update loop (a ``tf.function``) and
saving come from RL.

Run:  python examples/custom_dqn_tf.py  [--episodes N] [--seed S] [--save PATH] [--quiet]
"""
from __future__ import annotations

import argparse
import os
import tempfile

import keras
import tensorflow as tf

from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.threads import DEFAULT_THREADS, use_threads
from marl_note.compat.tf import RL
from marl_note.trainers import DecentralizedTrainer


class MyDQN(RL):
    """Double DQN with a hard-copied target network and the Huber loss."""

    def __init__(self, observation_space, action_space, hidden=128, lr=1e-3, target_every=250, seed=None):
        super().__init__(observation_space, action_space, buffer_size=50_000, learning_starts=1_000,
                         update_steps=4, gamma=0.99, max_grad_norm=10.0, seed=seed,
                         policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000))
        self.target_every = target_every
        self.q, self.target = self.q_network(hidden), self.q_network(hidden)
        self.hard_update(self.target, self.q)
        self.optimizer = keras.optimizers.Adam(lr)
        self.huber = keras.losses.Huber()

    def q_network(self, hidden):
        return keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(hidden, "relu"),
                                 keras.layers.Dense(hidden, "relu"), keras.layers.Dense(self.n_actions)])

    def action(self, s):
        return self.q(s)

    def __call__(self, s, a, next_s, r, d):
        best = tf.argmax(self.q(next_s), axis=1)  # the online net picks a*, the target net values it
        next_q = tf.gather(self.target(next_s), best, axis=1, batch_dims=1)
        y = tf.stop_gradient(r + self.gamma * (1.0 - d) * next_q)
        q = tf.gather(self.q(s), a, axis=1, batch_dims=1)
        return self.huber(y, q)

    def update_param(self):
        if self.updates % self.target_every == 0:
            self.hard_update(self.target, self.q)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=400, help="training episodes (at most)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=os.path.join(tempfile.gettempdir(), "custom_dqn_tf.zip"))
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    use_threads(DEFAULT_THREADS, backend="tf")  # TF fixes its thread pools at its first op: set them first
    keras.utils.set_random_seed(args.seed)  # network initialisation

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
