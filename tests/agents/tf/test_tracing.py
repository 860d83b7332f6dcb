"""TF training steps are traced once: batches of other sizes (a short last minibatch, a changed
batch size) and changed run-time knobs reuse the same graph (issue 14: no retracing)."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import Transitions

pytest.importorskip("tensorflow")

from marl_note.agents.tf import DDPG, DQN, PPO, SAC  # noqa: E402

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DISCRETE = gym.spaces.Discrete(2)
ACT_BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def transitions(n, rng, act):
    a = rng.integers(0, act.n, n) if isinstance(act, gym.spaces.Discrete) else rng.uniform(-1, 1, (n, 2))
    return Transitions(obs=rng.normal(size=(n, 3)).astype(np.float32), act=a, rew=rng.normal(size=n),
                       next_obs=rng.normal(size=(n, 3)).astype(np.float32), terminated=rng.random(n) < 0.2,
                       truncated=np.zeros(n, bool), stream=np.zeros(n, np.int64))


def traces(fn) -> int:
    return int(fn.experimental_get_tracing_count())


@pytest.mark.parametrize("cls, act, step", [(DQN, DISCRETE, "_step_fn"), (DDPG, ACT_BOX, "_train"),
                                            (SAC, ACT_BOX, "_step_fn")])
def test_off_policy_steps_are_traced_once_for_every_batch_size(cls, act, step):
    agent = cls(BOX, act, hidden_sizes=(8,), seed=0)
    rng = np.random.default_rng(0)
    for n in (16, 7, 33, 16):
        agent.learn(transitions(n, rng, act))
    agent.set_hyperparameter("gamma", 0.9)
    agent.learn(transitions(5, rng, act))
    assert traces(getattr(agent.nets, step)) == 1


def test_ppo_update_is_traced_once_with_a_short_last_minibatch_and_a_new_clip():
    agent = PPO(BOX, DISCRETE, hidden_sizes=(8,), n_steps=40, n_epochs=2, seed=0)
    rng = np.random.default_rng(0)
    for clip in (None, 0.1):
        if clip is not None:
            agent.set_hyperparameter("clip_range", clip)
        agent.observe(transitions(40, rng, DISCRETE))
        agent.update(batch_size=16)  # minibatches of 16, 16 and 8 rows
    assert agent.updates > 0
    assert traces(agent.nets._train_fn) == 1
