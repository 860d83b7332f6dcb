"""The original library's RL options on user-defined agents: IRL, TRL, PR (td_error), num_steps, update_param."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.compat.triplet import TripletReplayBuffer
from marl_note.replay import PrioritizedReplayBuffer
from marl_note.types import Transitions
from tests.user_agents import loss_only_rl

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def torch_agent_class():
    torch = pytest.importorskip("torch")
    from marl_note.compat.torch import RL

    class Linear(RL):
        """Q = W s, an auxiliary output 2 * s[:, :1] when aux=True; records what the loss received."""

        def __init__(self, observation_space, action_space, aux=False, seed=None, **options):
            super().__init__(observation_space, action_space, learning_starts=4, seed=seed, **options)
            self.q = torch.nn.Linear(self.obs_dim, self.n_actions)
            self.optimizer = torch.optim.SGD(self.q.parameters(), lr=0.01)
            self.use_aux, self.seen, self.param_calls = aux, [], 0

        def action(self, s):
            return (self.q(s), 2 * s[:, :1]) if self.use_aux else self.q(s)

        def __call__(self, s, a, next_s, r, d):
            self.seen.append(tuple(x.shape for x in (s, a, next_s, r, d)))
            q = self.q(s).gather(-1, a[..., None]).squeeze(-1)
            return (q - r).pow(2).mean()

        def td_error(self, s, a, next_s, r, d):
            return (self.q(s).gather(-1, a[:, None]).squeeze(-1) - r).abs() + 10.0

        def update_param(self):
            self.param_calls += 1

    return Linear


def tf_agent_class():
    tf = pytest.importorskip("tensorflow")
    keras = importlib.import_module("keras")
    from marl_note.compat.tf import RL

    class Linear(RL):
        def __init__(self, observation_space, action_space, aux=False, seed=None, **options):
            super().__init__(observation_space, action_space, learning_starts=4, seed=seed, tf_function=False,
                             **options)
            self.q = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(self.n_actions)])
            self.optimizer = keras.optimizers.SGD(0.01)
            self.use_aux, self.seen, self.param_calls = aux, [], 0

        def action(self, s):
            return (self.q(s), 2 * s[:, :1]) if self.use_aux else self.q(s)

        def __call__(self, s, a, next_s, r, d):
            self.seen.append(tuple(tuple(x.shape) for x in (s, a, next_s, r, d)))
            flat = tf.reshape(s, (-1, self.obs_dim))
            q = tf.reduce_sum(tf.reshape(self.q(flat), (*a.shape, self.n_actions)) * tf.one_hot(a, self.n_actions), -1)
            return tf.reduce_mean(tf.square(q - r))

        def td_error(self, s, a, next_s, r, d):
            q = tf.reduce_sum(self.q(s) * tf.one_hot(a, self.n_actions), -1)
            return tf.abs(q - r) + 10.0

        def update_param(self):
            self.param_calls += 1

    return Linear


BACKENDS = {"torch": torch_agent_class, "tf": tf_agent_class}


def episodes(n_episodes=3, length=5, seed=0):
    rng = np.random.default_rng(seed)
    n = n_episodes * length
    done = (np.arange(n) % length) == length - 1
    return Transitions(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), act=rng.integers(0, 2, n),
                       rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       terminated=done, truncated=np.zeros(n, bool), stream=np.zeros(n, np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_irl_acts_on_the_output_and_keeps_the_aux(backend):
    agent = BACKENDS[backend]()(OBS, ACT, aux=True, seed=0, IRL=True)
    obs = np.array([[0.5, 0, 0], [-0.25, 0, 0]], np.float32)
    actions = agent.act(obs)
    assert actions.shape == (2,)
    np.testing.assert_allclose(agent.aux, [[1.0], [-0.5]])
    plain = BACKENDS[backend]()(OBS, ACT, aux=True, seed=0)
    with pytest.raises(ValueError, match="IRL=True"):
        plain.act(obs)
    agent.set(IRL=False)
    with pytest.raises(ValueError, match="IRL=True"):
        agent.act(obs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_trl_gives_the_loss_step_pairs_of_one_episode(backend):
    agent = BACKENDS[backend]()(OBS, ACT, seed=0)
    agent.set(TRL=True, num_updates=2)
    assert isinstance(agent.replay, TripletReplayBuffer) and agent.cfg.update_steps == 2
    agent.observe(episodes())
    assert agent.update(batch_size=4)["gradient_steps"] == 2
    assert agent.seen[-1] == ((4, 2, 3), (4, 2), (4, 2, 3), (4, 2), (4, 2))
    np.testing.assert_array_equal(agent.batch.next_obs[:, 0], agent.batch.obs[:, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_pr_feeds_td_error_back_as_priorities(backend):
    agent = BACKENDS[backend]()(OBS, ACT, seed=0).set(PR=True, alpha=1.0, initial_TD=0.5)
    assert isinstance(agent.replay, PrioritizedReplayBuffer) and agent.replay.alpha == 1.0
    agent.observe(episodes())
    agent.update(batch_size=4)
    assert agent.batch.weights is not None
    sampled = np.unique(agent.batch.indices)
    untouched = np.setdiff1d(np.arange(len(agent.replay)), sampled)
    p = agent.replay.priorities()  # proportional to priority ** alpha: |TD| + 10 against initial_TD = 0.5
    assert len(untouched) and p[sampled].min() > 19 * p[untouched].max()

def test_pr_needs_td_error():
    agent = loss_only_rl(3)(OBS, ACT)
    with pytest.raises(TypeError, match="must define td_error"):
        agent.set(PR=True)
    assert not agent.cfg.PR and type(agent.replay).__name__ == "ReplayBuffer"


def test_num_steps_stores_n_step_rows_with_their_discount():
    agent = torch_agent_class()(OBS, ACT, seed=0).set(num_steps=3)
    agent.observe(episodes(n_episodes=1, length=5))
    assert len(agent.replay) == 5
    agent.update(batch_size=8)
    assert set(np.round(agent.batch.discount.astype(float), 5)) <= {round(0.99**k, 5) for k in (1, 2, 3)}
    assert np.any(agent.batch.discount < 0.98)


def test_update_param_periods():
    cls = torch_agent_class()
    every_step = cls(OBS, ACT, seed=0).set(num_updates=3)
    every_step.observe(episodes())
    every_step.update(batch_size=4)
    assert every_step.param_calls == 3  # default: after every gradient step
    batches = cls(OBS, ACT, seed=0).set(num_updates=3, update_batches=2)
    batches.observe(episodes())
    batches.update(batch_size=4), batches.update(batch_size=4)
    assert batches.updates == 6 and batches.param_calls == 3
    steps = cls(OBS, ACT, seed=0).set(update_steps=10)  # the original meaning: every 10 env steps
    assert steps.cfg.update_param_steps == 10 and steps.cfg.update_param_batches is None
    data = episodes(n_episodes=5, length=5)
    calls = []
    for chunk in range(5):
        steps.observe(data[chunk * 5:(chunk + 1) * 5])
        steps.update(batch_size=4)
        calls.append(steps.param_calls)
    assert calls == [0, 1, 1, 2, 2]


def test_set_on_rl_maps_or_refuses():
    agent = torch_agent_class()(OBS, ACT, seed=0)
    agent.set(pool_size=50, batch=8, trial_count=3, criterion=1.0)
    assert agent.replay.capacity == 50 and agent.run_options == {"batch": 8, "trial_count": 3, "criterion": 1.0}
    for kwargs, match in [(dict(HER=True), "DDPG, SAC and DQN"), (dict(PPO=True), "PPO is built in"),
                          (dict(MARL=True), "MADDPG"), (dict(lambda_=0.3), "PPO"), (dict(initial_ratio=2.0), "PPO"),
                          (dict(alpha=0.5), "pass PR=True"), (dict(update_steps=3, update_batches=2), "once"),
                          (dict(noise=object()), "noise= is for Box"), (dict(TRL=True, PR=True), "TRL")]:
        with pytest.raises((ValueError, TypeError), match=match):
            agent.set(**kwargs)
    assert agent.replay.capacity == 50 and not agent.cfg.TRL and not agent.cfg.PR  # nothing changed
    agent.observe(episodes())
    with pytest.raises(ValueError, match="would discard the 15 transitions"):
        agent.set(pool_size=60)
