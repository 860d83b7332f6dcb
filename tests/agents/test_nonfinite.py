"""A non-finite loss or gradient norm raises naming the agent and update count, before any weight is written.

Every algorithm in both backends: one clean update, then a stored batch with a NaN reward (or a
NaN observation) poisons the next update, which must raise NonFiniteError and leave every
weight, optimiser slot and counter of ``state_dict()`` bit-identical (and finite).
"""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import JointTransitions, NonFiniteError, Transitions

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
DISCRETE = gym.spaces.Discrete(2)
BOX = gym.spaces.Box(-1, 1, (2,), np.float32)
N = 8  # batch size, replay size and rollout length: the poisoned batch replaces the clean one


def backend(name):
    pytest.importorskip("torch" if name == "torch" else "tensorflow")
    return importlib.import_module(f"marl_note.agents.{name}")


def custom_rl(name):
    """A tiny user-defined DQN on the backend's RL base class."""
    backend(name)
    if name == "torch":
        import torch

        class Mine(importlib.import_module(f"marl_note.compat.{name}").RL):
            def __init__(self):
                super().__init__(OBS, DISCRETE, learning_starts=N, buffer_size=N, max_grad_norm=1.0, seed=0)
                self.q = torch.nn.Linear(self.obs_dim, 2)
                self.optimizer = torch.optim.Adam(self.q.parameters(), lr=1e-2)

            def action(self, s):
                return self.q(s)

            def __call__(self, s, a, next_s, r, d):
                y = r + self.gamma * (1 - d) * self.q(next_s).max(1).values.detach()
                return (self.q(s).gather(1, a[:, None]).squeeze(1) - y).pow(2).mean()
        return Mine()
    import keras
    import tensorflow as tf

    class Mine(importlib.import_module(f"marl_note.compat.{name}").RL):
        def __init__(self):
            super().__init__(OBS, DISCRETE, learning_starts=N, buffer_size=N, seed=0)
            self.q = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(2)])
            self.optimizer = keras.optimizers.Adam(1e-2)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            y = tf.stop_gradient(r + self.gamma * (1 - d) * tf.reduce_max(self.q(next_s), 1))
            return tf.reduce_mean(tf.square(tf.gather(self.q(s), a, axis=1, batch_dims=1) - y))
    return Mine()


def two_optimizer_rl(name):
    """A torch RL agent with two optimisers (the autograd.grad path): both must be held back."""
    import torch
    backend(name)

    class Two(importlib.import_module(f"marl_note.compat.{name}").RL):
        def __init__(self):
            super().__init__(OBS, DISCRETE, learning_starts=N, buffer_size=N, seed=0)
            self.a, self.b = torch.nn.Linear(self.obs_dim, 2), torch.nn.Linear(self.obs_dim, 2)
            self.optimizers = [torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.Adam(self.b.parameters())]

        def action(self, s):
            return self.a(s) + self.b(s)

        def __call__(self, s, a, next_s, r, d):
            return [self.b(s).pow(2).mean(), ((self.a(s) + self.b(s)).sum(1) - r).pow(2).mean()]
    return Two()


FACTORIES = {
    "DQN": lambda m: m.DQN(OBS, DISCRETE, hidden_sizes=(8,), learning_starts=N, buffer_size=N, update_steps=1, seed=0),
    "DQN-XLA": lambda m: m.DQN(OBS, DISCRETE, hidden_sizes=(8,), learning_starts=N, buffer_size=N, update_steps=1,
                               seed=0, compile=True),  # TF: the step under XLA (jit_compile)
    "PPO": lambda m: m.PPO(OBS, DISCRETE, hidden_sizes=(8,), n_steps=N, n_epochs=1, seed=0),
    "DDPG": lambda m: m.DDPG(OBS, BOX, hidden_sizes=(8,), learning_starts=N, buffer_size=N, update_steps=1, seed=0),
    "MADDPG": lambda m: m.MADDPG({"a": OBS, "b": OBS}, {"a": DISCRETE, "b": BOX}, hidden_sizes=(8,),
                                 learning_starts=N, buffer_size=N, update_steps=1, seed=0),
}


def make(algo, name):
    if algo == "RL":
        return custom_rl(name)
    if algo == "RL2":
        return two_optimizer_rl(name)
    return FACTORIES[algo](backend(name))


def batch(agent, poison=None):
    """N transitions for ``agent``; ``poison`` ("reward" or "obs") puts a NaN into every row, so
    that any batch sampled from the replay holds one."""
    rng = np.random.default_rng(1)
    obs = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    rew = rng.normal(size=N).astype(np.float32)
    if poison == "reward":
        rew[:] = np.nan
    elif poison == "obs":
        obs[:, 0] = np.nan
    term, trunc = np.zeros(N, bool), np.zeros(N, bool)
    if hasattr(agent, "observe_joint"):
        return JointTransitions(("a", "b"), obs={"a": obs, "b": obs}, act={"a": rng.integers(0, 2, N),
                                "b": rng.uniform(-1, 1, (N, 2)).astype(np.float32)},
                                rew=np.stack([rew, rew], 1), next_obs={"a": obs, "b": obs},
                                terminated=np.stack([term, term], 1), truncated=np.stack([trunc, trunc], 1),
                                alive=np.ones((N, 2), bool))
    act = rng.integers(0, 2, N) if isinstance(agent.action_space, gym.spaces.Discrete) else \
        rng.uniform(-1, 1, (N, 2)).astype(np.float32)
    return Transitions(obs=obs, act=act, rew=rew, next_obs=obs, terminated=term, truncated=trunc,
                       stream=np.zeros(N, np.int64))


def store(agent, t):
    (agent.observe_joint if isinstance(t, JointTransitions) else agent.observe)(t)


def weights(agent):
    """state_dict without the random generators' states (sampling a batch moves them) and the count of
    transitions stored since the last update (an update call starts by taking it)."""
    return {k: np.array(v) for k, v in agent.state_dict().items() if "rng" not in k and not k.startswith("new_")}


CASES = [(algo, name, poison) for name in ("torch", "tf") for algo in ("DQN", "PPO", "DDPG", "MADDPG", "RL")
         for poison in ("reward", "obs")]
CASES = [c for c in CASES if c[1] == "torch" or c[2] == "reward" or c[0] == "DQN"]  # TF graphs trace slowly
CASES += [("RL2", "torch", "reward"), ("RL2", "torch", "obs"), ("DQN-XLA", "tf", "reward")]


@pytest.mark.parametrize("algo,name,poison", CASES, ids=["-".join((n, a, p)) for a, n, p in CASES])
def test_nonfinite_update_raises_before_writing_weights(algo, name, poison):
    agent = make(algo, name)
    store(agent, batch(agent))
    assert agent.update(N)["gradient_steps"] == 1  # a clean update: the update count is now 1
    store(agent, batch(agent, poison))
    before = weights(agent)
    who = type(agent).__name__
    with pytest.raises(NonFiniteError, match=rf"^{who} update 2: .*(loss|norm).* is (nan|inf)") as err:
        agent.update(N)
    assert "no weight holds a non-finite value" in str(err.value)
    after = weights(agent)
    assert sorted(after) == sorted(before)
    changed = [key for key, value in before.items() if value.tobytes() != after[key].tobytes()]
    assert not changed, f"{changed} changed in the refused update"
    for key, value in before.items():
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), key
