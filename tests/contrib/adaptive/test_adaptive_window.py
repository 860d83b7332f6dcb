"""The adaptive replay window (``adjust(window_params=...)``): the rule follows prioritized replay's ESS
(below target: a smaller window of the newest items), bounded by the replay's capacity and aligned; on
a real prioritized DQN on CartPole the callback narrows the sampling window, logs it every update,
keeps it in its checkpoint state, and the agent trains; a uniform replay is refused before any work."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.contrib.adaptive import KnobRule, adjust
from marl_note.trainers import DecentralizedTrainer

torch_agents = pytest.importorskip("marl_note.agents.torch")


def cartpole(**kw):
    return DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=64, test_freq=20,
                                episodes_per_test=1, seed=0, **kw)


def dqn(env, **kw):
    return torch_agents.DQN(env.observation_space, env.action_space, hidden_sizes=(32,), seed=0,
                            learning_starts=64, **kw)


def test_window_rule_shrinks_on_low_ess_grows_on_high_within_bounds_and_aligned():
    rule = KnobRule("window_size", {"rate": 1.0, "smooth": 0.0, "align": 256})
    low = rule.propose(8192, noise=None, target_noise=1.0, ess=0.25, target_ess=0.5)
    assert low == 4096 and rule.params["min"] == 1024  # ESS half the target: half the window
    high = KnobRule("window_size", {"rate": 1.0, "smooth": 0.0, "max": 10_000, "align": 256})
    assert high.propose(8192, noise=None, target_noise=1.0, ess=1.0, target_ess=0.5) == 9984  # capped, aligned
    assert rule.propose(8192, noise=0.1, target_noise=1.0, ess=None, target_ess=0.5) == 8192  # no PER signal


class Seen:
    def __init__(self):
        self.logs = []

    def on_batch_end(self, trainer, batch, logs):
        self.logs.append(dict(logs))


def test_window_knob_narrows_a_real_prioritized_dqns_sampling_window_and_it_trains():
    env = gym.make("CartPole-v1")
    agent = dqn(env, PR=True, buffer_size=3000)
    assert agent.hyperparameters()["window_size"] == 3000 and agent.replay.window is None
    trainer = cartpole(batch_size=64, episodes_per_train=8)
    cb = adjust(window_params={"rate": 1.0, "smooth": 0.0, "scale": 4.0, "min": 64, "align": 8}, target_ess=0.999,
                num_samples=128, every=1)
    seen = Seen()
    trainer.train([agent], [True], callbacks=[cb, seen], progress=False, plot=False)
    replay, window = agent.replay, agent.replay.window
    assert cb.last["ess"] < 0.999  # priorities spread, so the ESS fraction is under this target:
    assert window is not None and 64 <= window < len(replay) and window % 8 == 0  # the window narrowed
    assert np.count_nonzero(replay.priorities()) == replay.window_count() == window  # sampling: the window only
    sizes = [v for _, v in cb.history["window_size"].values()]
    assert sizes[0] == 3000 and sizes[-1] == window  # open until a narrower window drops some items
    assert all("adaptive/window_size" in logs for logs in seen.logs) and any("loss" in logs for logs in seen.logs)
    assert np.all(np.isfinite([logs["loss"] for logs in seen.logs if "loss" in logs]))  # it trained
    assert float(cb.state_dict()["value.window_size"]) == window  # travels in run checkpoints


def test_window_knob_refuses_a_uniform_replay_before_any_env_step():
    env = gym.make("CartPole-v1")
    agent = dqn(env)
    agent.set_hyperparameter("window_size", 500)  # settable by hand on a uniform replay
    assert agent.replay.window == 500
    with pytest.raises(ValueError, match="window_size must be a whole number"):
        agent.set_hyperparameter("window_size", 2.5)
    with pytest.raises(ValueError, match="samples uniformly"):
        cartpole(episodes_per_train=5).train([agent], [True], callbacks=[adjust(window_params={})], progress=False,
                                             plot=False)
    assert agent.agent_steps == 0


def test_a_her_replay_has_no_window_and_says_so():
    from marl_note.envs.goal_envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=3)
    agent = torch_agents.DQN(env.observation_space, env.action_space, hidden_sizes=(4,), seed=0,
                             her=dict(strategy="future", k=2), compute_reward=env.compute_reward)
    assert "window_size" not in agent.hyperparameters()
    with pytest.raises(KeyError, match=r"replay \(HERReplayBuffer\) has no sampling window"):
        agent.set_hyperparameter("window_size", 100)
