"""Adaptive batch size and hyperparameters (marl_note/trainers/adaptive): each rule moves its knob in
the documented direction for its signal, within bounds and aligned; the callback on a real DQN on
CartPole moves the batch size towards the measured noise scale, logs and plots every round, keeps
its state in run checkpoints, and refuses a knob the agent cannot adjust before any work."""
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.contrib.adaptive import KNOBS, BatchRule, KnobRule, adabatch, adjust
from marl_note.contrib.adaptive.cost import StepCost
from marl_note.trainers import DecentralizedTrainer

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


def steps_rule(params):
    return BatchRule(params, objective="steps")


def test_batch_rule_moves_towards_the_noise_scale_bounded_and_aligned():
    rule = steps_rule({"rate": 0.5, "smooth": 0.0, "min": 16, "max": 512, "align": 8})
    sizes = [64]
    for _ in range(20):
        sizes.append(rule.propose(sizes[-1], b_simple=400.0, target_noise=1.0))
    assert sizes[1] > 64 and all(s % 8 == 0 for s in sizes) and abs(sizes[-1] - 400) <= 8
    assert steps_rule({"smooth": 0.0, "rate": 1.0, "max": 256}).propose(64, b_simple=1e6, target_noise=1.0) == 256
    assert steps_rule({"smooth": 0.0, "rate": 1.0, "scale": 0.5}).propose(64, b_simple=400, target_noise=2.0) == 100
    assert rule.propose(64, b_simple=math.nan, target_noise=1.0) == 64  # no measurement yet
    assert steps_rule({"rate": 1.0, "min": 16, "max": 512}).propose(64, b_simple=0.0, target_noise=1.0) == 16
    assert steps_rule({"rate": 1.0, "min": 16, "max": 512}).propose(64, b_simple=math.inf, target_noise=1.0) == 512
    assert BatchRule(lr_rule="none").lr_factor(32, 128) == 1.0
    with pytest.raises(ValueError, match="lr_rule"):
        BatchRule(lr_rule="cubic")
    with pytest.raises(ValueError, match="objective must be one of"):
        BatchRule(objective="samples")


def timed(fixed, per_row, env_s, on_policy=False, batch=64):
    """A StepCost that has seen one probe and one round of gradient steps costing fixed + per_row * B seconds,
    with env_s env seconds per step (off-policy) or per row (on-policy)."""
    cost = StepCost(smooth=0.0)
    cost.add_probe(32, fixed + 32 * per_row, 256, fixed + 256 * per_row)
    cost.add_round(batch=batch, update_s=100 * (fixed + per_row * batch), gradient_steps=100,
                   collect_s=100 * env_s * (batch if on_policy else 1), env_steps=1000, on_policy=on_policy)
    return cost


def test_time_objective_aims_at_the_batch_of_least_wall_time():
    """B* = sqrt(B_noise a / c): the wall time (1 + B_noise / B) (a + c B) of McCandlish's model is least there,
    and the env time joins a (off-policy: per step) or c (on-policy: per row)."""
    b_noise, a, c = 50.0, 1e-3, 4e-6
    cost = timed(a, c, 0.0)
    assert cost.coefficients() == pytest.approx((a, c))
    best = cost.best_batch(b_noise)
    assert best == pytest.approx(math.sqrt(b_noise * a / c))

    def wall(b):
        return (1 + b_noise / b) * (a + c * b)
    assert wall(best) < min(wall(best * 0.8), wall(best * 1.25))
    assert timed(a, c, 1e-3).coefficients() == pytest.approx((2e-3, c))  # env time per step: fixed cost
    assert timed(a, c, 4e-6, on_policy=True).coefficients() == pytest.approx((a, 8e-6))  # per row
    # the probe's split is rescaled to the real step's seconds (sampling, optimiser: 2x the pass here)
    cost = timed(a, c, 0.0)
    cost.add_round(batch=64, update_s=200 * (a + 64 * c), gradient_steps=100, collect_s=0.0, env_steps=0,
                   on_policy=False)
    assert cost.coefficients() == pytest.approx((2 * a, 2 * c))
    rule = BatchRule({"rate": 1.0, "smooth": 0.0, "min": 16, "max": 1024})
    assert rule.propose(64, b_simple=b_noise, target_noise=1.0, cost=cost) == round(best)
    assert rule.propose(64, b_simple=b_noise, target_noise=1.0, cost=StepCost()) == 64  # no timing yet
    assert rule.propose(64, b_simple=b_noise, target_noise=1.0) == 64
    assert StepCost().best_batch(10.0) != StepCost().best_batch(10.0)  # nan before any timing


def test_step_cost_state_round_trips_and_bad_state_is_refused():
    cost = timed(1e-3, 4e-6, 1e-4)
    again = StepCost(smooth=0.0)
    again.load_state_dict(cost.state_dict())
    assert again.coefficients() == cost.coefficients() and again.on_policy is False
    with pytest.raises(ValueError, match="step-cost state"):
        again.load_state_dict({"cost.step": np.asarray(-1.0)})
    with pytest.raises(ValueError, match="step-cost state"):
        again.load_state_dict({"cost.per_row": np.asarray(np.nan)})
    noisy = StepCost(smooth=0.0)  # a probe that timed the big pass faster: no per-row cost, not a negative one
    noisy.add_probe(32, 2e-3, 256, 1e-3)
    noisy.add_round(batch=64, update_s=0.1, gradient_steps=100, collect_s=0.0, env_steps=0, on_policy=False)
    assert noisy.coefficients()[1] == 0.0 and noisy.best_batch(50.0) == math.inf
    with pytest.raises(ValueError, match="b_small < b_big"):
        cost.add_probe(64, 1e-3, 64, 2e-3)


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
    cb = adabatch({"min": 8, "max": 1024, "align": 4, "rate": 0.5}, num_samples=128, lr_rule="linear", every=1,
                  objective="steps")
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
    assert stats["num_collected_episodes"] >= 25 and agent.noise_scale.estimator is cb.estimator

    # resume: a fresh callback gets the saved state, and sets the saved batch size and rate again
    again, fresh_trainer = adabatch({"min": 8, "max": 1024, "align": 4, "rate": 0.5}, num_samples=128,
                                    lr_rule="linear", every=1, objective="steps"), cartpole(batch_size=256,
                                                                                            episodes_per_train=28)
    resumed = dqn(env)
    fresh_trainer.train([resumed], [True], callbacks=[again], progress=False, plot=False,
                        resume_from=str(tmp_path / "run"))
    assert again.rounds > cb.rounds and again.estimator.count > cb.estimator.count
    assert again.history["batch_size"].values()[len(sizes)][1] != 256  # the saved size was set again first
    np.testing.assert_allclose(again.history["b_simple"].values()[:len(b_simple)], b_simple)


def test_time_objective_on_cartpole_times_real_steps_and_aims_at_sqrt_of_noise_times_cost():
    env = gym.make("CartPole-v1")
    agent = torch_agents.DQN(env.observation_space, env.action_space, hidden_sizes=(256, 256), seed=0,
                             learning_starts=256)  # wide enough that a row's cost is measurable
    trainer = cartpole(batch_size=64, episodes_per_train=25)
    cb = adabatch({"min": 8, "max": 1024, "rate": 0.5}, num_samples=512, every=1)
    stats = trainer.train([agent], [True], callbacks=[cb], progress=False, plot=False)
    a, c = cb.cost.coefficients()
    assert a > 0 and c > 0 and cb.cost.on_policy is False and "env_per_step" in cb.cost.values
    per_step = stats["time_split"]["update_s"] / stats["num_gradient_steps"]  # the run's own average
    assert per_step / 3 < cb.cost.values["step"] < per_step * 3
    b_noise = max(cb.estimator.b_simple, 1e-6)
    assert cb.last["batch_target"] == cb.cost.best_batch(b_noise) > 0
    assert [v for _, v in cb.history["batch_target"].values()] and trainer.batch_size != 64
    again = adabatch({"min": 8, "max": 1024, "rate": 0.5}, num_samples=512, every=1)
    again.load_state_dict(cb.state_dict())  # the cost estimates travel in run checkpoints
    assert again.cost.coefficients() == (a, c) and again.cost.on_policy is False


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
    # objective="steps": the batch follows the measured noise alone, not wall-time costs that move with the load
    cb = adjust(batch_params={"min": 8, "max": 256, "rate": 1.0, "smooth": 0.0}, clip_params={"rate": 0.5},
                num_samples=128, every=1, objective="steps")
    trainer.train([agent], [True], callbacks=[cb], progress=False, plot=False)
    b_simple = [v for _, v in cb.history["b_simple"].values()]
    assert b_simple and all(np.isfinite(b_simple))  # measured only when an update followed
    assert cb.estimator.count < cb.rounds
    noisy = cb.last["noise"] > 1.0
    assert (agent.cfg.clip_range < 0.2) == noisy and agent.nets.cfg.clip_range == agent.cfg.clip_range
    assert trainer.batch_size == cb.values["batch_size"] != 128
    assert cb.cost.on_policy is True and "env_per_row" in cb.cost.values  # PPO's env time grows with the batch
