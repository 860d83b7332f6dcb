"""A user-defined DQN-like agent on either backend's RL base class (tests of the RL base and the finders)."""


def user_rl(module, observation_space, action_space, lr=1e-3, learning_starts=4):
    """A user-defined DQN on the backend's RL base class (marl_note.compat), with its own Adam."""
    import importlib

    base = importlib.import_module("marl_note.compat." + module.__name__.rpartition(".")[2]).RL
    if module.__name__.endswith("torch"):
        import torch

        class Mine(base):
            def __init__(self, observation_space, action_space, lr=1e-3, seed=None):
                super().__init__(observation_space, action_space, learning_starts=learning_starts, seed=seed)
                torch_gen = torch.Generator().manual_seed(0)
                self.q = torch.nn.Linear(self.obs_dim, self.n_actions)
                with torch.no_grad():
                    for p in self.q.parameters():
                        p.uniform_(-0.3, 0.3, generator=torch_gen)
                self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)

            def action(self, s):
                return self.q(s)

            def __call__(self, s, a, next_s, r, d):
                return (self.q(s).gather(1, a[:, None]).squeeze(1) - r).pow(2).mean()
    else:
        import keras
        import tensorflow as tf

        class Mine(base):
            def __init__(self, observation_space, action_space, lr=1e-3, seed=None):
                super().__init__(observation_space, action_space, learning_starts=learning_starts, seed=seed)
                init = keras.initializers.RandomUniform(-0.3, 0.3, seed=0)
                self.q = keras.Sequential([keras.Input((self.obs_dim,)),
                                           keras.layers.Dense(self.n_actions, kernel_initializer=init,
                                                              bias_initializer=init)])
                self.optimizer = keras.optimizers.Adam(lr)

            def action(self, s):
                return self.q(s)

            def __call__(self, s, a, next_s, r, d):
                q = tf.reduce_sum(self.q(s) * tf.one_hot(a, self.n_actions), 1)
                return tf.reduce_mean(tf.square(q - r))
    return Mine(observation_space, action_space, lr=lr, seed=0)
