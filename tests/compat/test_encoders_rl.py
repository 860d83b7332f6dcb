"""A user's ``RL`` subclass reads Dict and Tuple observations as the encoder's flat float vector.

CartPole with its time step as a Dict entry (Gymnasium's own ``TimeAwareObservation(flatten=False)``)
and Blackjack (a Tuple of Discretes): the subclass's networks take ``self.obs_dim`` inputs, the
replay stores the flat vector, a few updates run through the trainer in both backends and a
checkpoint round-trips.
"""
import importlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeAwareObservation

from marl_note.trainers import DecentralizedTrainer


def cartpole_with_time():
    return TimeAwareObservation(gym.make("CartPole-v1"), flatten=False)


def torch_linear():
    torch = pytest.importorskip("torch")
    from marl_note.compat.torch import RL

    class Linear(RL):
        def __init__(self, observation_space, action_space, seed=None):
            super().__init__(observation_space, action_space, learning_starts=16, update_steps=2, seed=seed)
            self.q = torch.nn.Linear(self.obs_dim, self.n_actions)
            self.optimizer = torch.optim.SGD(self.q.parameters(), lr=1e-4)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            y = r + self.gamma * (1 - d) * self.q(next_s).max(1).values.detach()
            return (self.q(s).gather(1, a[:, None]).squeeze(1) - y).pow(2).mean()

    return Linear


def tf_linear():
    tf = pytest.importorskip("tensorflow")
    keras = importlib.import_module("keras")
    from marl_note.compat.tf import RL

    class Linear(RL):
        def __init__(self, observation_space, action_space, seed=None):
            super().__init__(observation_space, action_space, learning_starts=16, update_steps=2, seed=seed)
            self.q = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(self.n_actions)])
            self.optimizer = keras.optimizers.SGD(1e-4)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            y = tf.stop_gradient(r + self.gamma * (1 - d) * tf.reduce_max(self.q(next_s), 1))
            return tf.reduce_mean(tf.square(tf.gather(self.q(s), a, axis=1, batch_dims=1) - y))

    return Linear


def q_weights(agent):
    """The Q network's weights as one flat copy."""
    state = agent.state_dict()
    return np.concatenate([np.ravel(state[k]) for k in sorted(state) if k.startswith("q.")])


@pytest.mark.parametrize(("backend", "make_env", "width"), [
    ("torch", cartpole_with_time, 5), ("torch", lambda: gym.make("Blackjack-v1"), 32 + 11 + 2),
    ("tf", cartpole_with_time, 5)], ids=["torch-dict", "torch-tuple", "tf-dict"])
def test_rl_subclass_trains_on_nested_observations_and_round_trips(backend, make_env, width, tmp_path):
    Linear = {"torch": torch_linear, "tf": tf_linear}[backend]()
    trainer = DecentralizedTrainer(make_env, num_train_envs=2, num_test_envs=1, batch_size=8, update_freq=8,
                                   test_freq=100, episodes_per_train=30, episodes_per_test=1, seed=0)
    seat = trainer.possible_agents[0]
    agent = Linear(trainer.observation_space(seat), trainer.action_space(seat), seed=0)
    assert agent.obs_dim == width
    before = q_weights(agent)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    assert stats["num_gradient_steps"] > 0 and agent.updates > 0
    assert agent.replay.sample(4).obs.shape == (4, width)  # stored as the flat vector
    assert not np.allclose(q_weights(agent), before)
    env = make_env()
    obs = [env.reset(seed=i)[0] for i in range(3)]
    env.close()
    from marl_note.types import stack_obs

    batch = stack_obs(obs)
    again = Linear.restore(agent.save(tmp_path / "linear.zip"))
    assert (again.act(batch) == agent.act(batch)).all()
    np.testing.assert_allclose(again.obs_array(batch), agent.obs_array(batch))
