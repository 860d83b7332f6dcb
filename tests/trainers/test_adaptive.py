"""Adaptive batch size and hyperparameters (marl_note/trainers/adaptive): each rule moves its knob in
the documented direction for its signal, within bounds and aligned; the callback on a real DQN on
CartPole moves the batch size towards the measured noise scale, logs and plots every round, keeps
its state in run checkpoints, and refuses a knob the agent cannot adjust before any work."""
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.adaptive import KNOBS, BatchRule, KnobRule, adabatch, adjust

torch_agents = pytest.importorskip("marl_note.agents.torch")


def propose(name, value, signal, **params):
    rule = KnobRule(name, {"rate": 1.0, "smooth": 0.0, **params})
    kind = KNOBS[name].signal
    return rule.propose(value, noise=signal if kind == "noise" else None, target_noise=1.0,
                        ess=signal if kind == "ess" else None, target_ess=0.5)


# (knob, value, documented move when its signal is high: "noise" 4x the target, "ess" 1.0 vs 0.5)
@pytest.mark.parametrize("name,value,high_moves", [
    ("eps", 0.1, "up"),  # noisy gradients: explore for new data
    ("tau", 0.01, "down"),  # noisy online weights: targets follow slower
    ("gamma", 0.99, "down"),  # noisy: shorter horizon
    ("clip_range", 0.2, "down"),  # noisy policy gradient: smaller trust region
    ("update_freq", 100, "up"),  # noisy: more env steps per update round
    ("alpha", 0.6, "up"),  # high ESS: room to prioritize more
    ("beta", 0.5, "down"),  # high ESS: close to uniform, less correction
    ("window_size", 5000, "up"),  # high ESS: widen the sampling window (low: keep only the newest items)
])
def test_each_knob_moves_in_the_documented_direction(name, value, high_moves):
    high = 4.0 if KNOBS[name].signal == "noise" else 1.0
    low = 0.25 if KNOBS[name].signal == "noise" else 0.125
    up, down = propose(name, value, high), propose(name, value, low)
    if high_moves == "up":
        assert down < value < up
    else:
        assert up < value < down
    assert propose(name, value, 0.5 if KNOBS[name].signal == "ess" else 1.0) == pytest.approx(value)  # on target


def test_knob_rules_respect_bounds_alignment_smoothing_and_missing_signals():
    assert propose("eps", 0.5, 1000.0, max=0.6) == 0.6
    assert propose("tau", 0.01, 1000.0, min=0.005) == 0.005
    assert propose("update_freq", 100, 1.5, align=16) % 16 == 0
    assert propose("gamma", 0.99, 4.0) == pytest.approx(1 - 1 / (100 / 4))  # horizon 100 -> 25
    assert propose("beta", 0.5, 0.25) == pytest.approx(0.75)  # 1 - beta halves with the ESS ratio
    rule = KnobRule("tau", {"rate": 1.0})
    assert rule.propose(0.01, noise=None, target_noise=1.0, ess=None, target_ess=0.5) == 0.01
    assert rule.propose(0.01, noise=math.nan, target_noise=1.0, ess=None, target_ess=0.5) == 0.01
    assert propose("tau", 0.01, 0.0, max=0.5) == 0.5 and propose("tau", 0.01, math.inf) == 1e-4  # to the bounds
    rule.propose(0.01, noise=1.0, target_noise=1.0, ess=None, target_ess=0.5)
    smoothed = rule.propose(0.01, noise=100.0, target_noise=1.0, ess=None, target_ess=0.5)
    assert 0.01 / 100 < smoothed < 0.01  # one outlier after an on-target round moves it part of the way
    with pytest.raises(ValueError, match="clip_range_params\\['smooth'\\]"):
        KnobRule("clip_range", {"smooth": 1.0})
    with pytest.raises(ValueError, match="unknown knob 'lr_decay'"):
        KnobRule("lr_decay")


def test_batch_rule_moves_towards_the_noise_scale_bounded_and_aligned():
    rule = BatchRule({"rate": 0.5, "smooth": 0.0, "min": 16, "max": 512, "align": 8})
    sizes = [64]
    for _ in range(20):
        sizes.append(rule.propose(sizes[-1], b_simple=400.0, target_noise=1.0))
    assert sizes[1] > 64 and all(s % 8 == 0 for s in sizes) and abs(sizes[-1] - 400) <= 8
    assert BatchRule({"smooth": 0.0, "rate": 1.0, "max": 256}).propose(64, b_simple=1e6, target_noise=1.0) == 256
    assert BatchRule({"smooth": 0.0, "rate": 1.0, "scale": 0.5}).propose(64, b_simple=400, target_noise=2.0) == 100
    assert rule.propose(64, b_simple=math.nan, target_noise=1.0) == 64  # no measurement yet
    assert BatchRule({"rate": 1.0, "min": 16, "max": 512}).propose(64, b_simple=0.0, target_noise=1.0) == 16
    assert BatchRule({"rate": 1.0, "min": 16, "max": 512}).propose(64, b_simple=math.inf, target_noise=1.0) == 512
    assert BatchRule(lr_rule="none").lr_factor(32, 128) == 1.0
    with pytest.raises(ValueError, match="lr_rule"):
        BatchRule(lr_rule="cubic")


def cartpole(**kw):
    return DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=64, test_freq=20,
                                episodes_per_test=1, seed=0, **kw)


def dqn(env, **kw):
    kw.setdefault("learning_starts", 256)
    return torch_agents.DQN(env.observation_space, env.action_space, hidden_sizes=(32,), seed=0, **kw)


class Seen:
    """Records the metrics the logging callbacks after the adaptive one see."""

    def __init__(self):
        self.logs = []

    def on_batch_end(self, trainer, batch, logs):
        self.logs.append(dict(logs))


def test_adaptive_batch_on_cartpole_follows_the_noise_scale_and_logs_every_round(tmp_path):
    env = gym.make("CartPole-v1")
    agent = dqn(env)
    trainer = cartpole(batch_size=256, episodes_per_train=25)
    cb = adabatch({"min": 8, "max": 1024, "align": 4, "rate": 0.5}, num_samples=128, lr_rule="linear", every=1)
    seen = Seen()
    lr0 = agent.learning_rates()["optimizer"]
    stats = trainer.train([agent], [True], callbacks=[cb, seen], progress=False, plot=False,
                          checkpoint_path=str(tmp_path / "run"))
    b_simple, sizes = cb.history["b_simple"].values(), cb.history["batch_size"].values()
    assert len(b_simple) > 5 and all(v >= 0 for _, v in b_simple)
    last_b = max(b_simple[-1][1], 8)
    # the batch moved from 256 towards the measured B_simple, within the bounds, on multiples of 4
    assert trainer.batch_size != 256 and 8 <= trainer.batch_size <= 1024 and trainer.batch_size % 4 == 0
    assert abs(math.log(trainer.batch_size / last_b)) < abs(math.log(256 / last_b))
    assert agent.learning_rates()["optimizer"] == pytest.approx(lr0 * trainer.batch_size / 256)  # linear rule
    assert all("adaptive/b_simple" in logs for logs in seen.logs)  # every update's metrics
    assert "adaptive/batch_size" in trainer.run_state.series and sizes[-1][1] == trainer.batch_size
    assert stats["num_collected_episodes"] >= 25 and agent.noise_scale is cb.estimator

    # resume: a fresh callback gets the saved state, and sets the saved batch size and rate again
    again, fresh_trainer = adabatch({"min": 8, "max": 1024, "align": 4, "rate": 0.5}, num_samples=128,
                                    lr_rule="linear", every=1), cartpole(batch_size=256, episodes_per_train=28)
    resumed = dqn(env)
    fresh_trainer.train([resumed], [True], callbacks=[again], progress=False, plot=False,
                        resume_from=str(tmp_path / "run"))
    assert again.rounds > cb.rounds and again.estimator.count > cb.estimator.count
    assert again.history["batch_size"].values()[len(sizes)][1] != 256  # the saved size was set again first
    np.testing.assert_allclose(again.history["b_simple"].values()[:len(b_simple)], b_simple)


def test_a_knob_the_agent_cannot_adjust_is_refused_before_any_env_step():
    env = gym.make("CartPole-v1")
    agent = dqn(env)  # hard target copies: no tau; no prioritized replay: no alpha
    trainer = cartpole(episodes_per_train=5)
    with pytest.raises(ValueError, match=r"cannot adjust \['alpha', 'tau'\]"):
        trainer.train([agent], [True], callbacks=[adjust(tau_params={}, alpha_params={})],
                      progress=False, plot=False)
    assert agent.agent_steps == 0
    with pytest.raises(ValueError, match="no <knob>_params"):
        adjust()


def test_eps_and_per_knobs_move_on_a_real_prioritized_dqn():
    env = gym.make("CartPole-v1")
    agent = dqn(env, PR=True, tau=0.01, learning_starts=64)
    trainer = cartpole(batch_size=64, episodes_per_train=20)
    cb = adjust(eps_params={"rate": 0.5}, alpha_params={"rate": 0.5}, beta_params={"rate": 0.5},
                tau_params={"rate": 0.5}, gamma_params={"rate": 0.5}, num_samples=128, target_ess=0.999, every=1)
    agent.set_hyperparameter("eps", 0.5)
    before = agent.hyperparameters()
    trainer.train([agent], [True], callbacks=[cb], progress=False, plot=False)
    after = agent.hyperparameters()
    assert cb.last["ess"] < 0.999  # priorities spread, so the ESS fraction is under this target:
    assert after["alpha"] < before["alpha"] and after["beta"] > before["beta"]
    noisy = cb.last["noise"] > 1.0  # and the noise rules follow the measured noise
    assert (after["eps"] > before["eps"]) == noisy and (after["tau"] < before["tau"]) == noisy
    assert (after["gamma"] < before["gamma"]) == noisy


def test_ppo_batch_and_clip_follow_the_rollouts_noise_on_cartpole():
    env = gym.make("CartPole-v1")
    agent = torch_agents.PPO(env.observation_space, env.action_space, hidden_sizes=(16,), n_steps=256, n_epochs=2,
                             seed=0)
    trainer = cartpole(batch_size=128, episodes_per_train=40)
    trainer.update_freq = 128  # two chunks (2 envs x 128 steps... ) per rollout: one is measured, one is not
    cb = adjust(batch_params={"min": 8, "max": 256, "rate": 1.0, "smooth": 0.0}, clip_params={"rate": 0.5},
                num_samples=128, every=1)
    trainer.train([agent], [True], callbacks=[cb], progress=False, plot=False)
    b_simple = [v for _, v in cb.history["b_simple"].values()]
    assert b_simple and all(np.isfinite(b_simple))  # measured only when an update followed
    assert cb.estimator.count < cb.rounds
    noisy = cb.last["noise"] > 1.0
    assert (agent.cfg.clip_range < 0.2) == noisy and agent.nets.cfg.clip_range == agent.cfg.clip_range
    assert trainer.batch_size == cb.values["batch_size"] != 128
