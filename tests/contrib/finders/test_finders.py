"""LRFinder and OptFinder on CartPole in both backends: the learning-rate schedule the agent really
trains with, early stops, the agent put back exactly, the ranking of candidates, bad input refused
before any training, and the original library's LRFinder / OptFinder examples."""
import importlib
import math

import gymnasium as gym
import numpy as np
import pytest

from marl_note.contrib.finders.finders import LRFinder, OptFinder
from marl_note.contrib.finders.parts import LRSearch, SearchDone, start_from, weights_of
from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.collector import CollectStats
from tests.compat.rl_helpers import user_rl

CARTPOLE = gym.make("CartPole-v1")
OBS, ACT = CARTPOLE.observation_space, CARTPOLE.action_space
FAST = dict(update_freq=16, batch_size=16)


@pytest.fixture(params=["torch", "tf"])
def backend(request):
    pytest.importorskip("torch" if request.param == "torch" else "tensorflow")
    return importlib.import_module(f"marl_note.agents.{request.param}")


def dqn(module, **over):
    kw = dict(hidden_sizes=(32,), learning_starts=32, seed=0)
    return module.DQN(OBS, ACT, **{**kw, **over})


def trainer(episodes=4, seed=0):
    return DecentralizedTrainer("CartPole-v1", num_train_envs=1, num_test_envs=1, episodes_per_train=episodes,
                                test_freq=100, episodes_per_test=1, seed=seed, **FAST)


def record_lrs(agent):
    """Make ``agent.update`` record the learning rate in force at each call that takes a gradient step."""
    seen, update = [], agent.update

    def wrapped(batch_size):
        lr = agent.learning_rates()["optimizer"]
        metrics = update(batch_size)
        if metrics.get("gradient_steps"):
            seen.append(lr)
        return metrics
    agent.update = wrapped
    return seen


# ------------------------------------------------------------------ LRFinder

def test_lrs_grow_geometrically_and_the_agent_trains_at_them(backend, tmp_path):
    agent = dqn(backend)
    seen = record_lrs(agent)
    result = LRFinder(agent).find("CartPole-v1", start_lr=1e-4, end_lr=1e-1, num=7, diverge=1e9, **FAST)
    assert result.stop_reason == "done" and len(result) == 7
    np.testing.assert_allclose(result.lrs, np.geomspace(1e-4, 1e-1, 7), rtol=1e-12)
    np.testing.assert_allclose(np.diff(np.log(result.lrs)), math.log(10) / 2, rtol=1e-9)  # a constant factor
    np.testing.assert_allclose(seen, result.lrs, rtol=1e-6)  # the rate of each update round is the recorded one
    assert result.loss_key == "loss" and result.optimizers == ("optimizer",)
    assert np.isfinite(result.values).all() and result.values.shape == (7,)
    assert 1e-4 <= result.suggestion() <= 1e-1
    path = result.plot(tmp_path / "lr.png")
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def continue_training(agent):
    trainer(episodes=3, seed=5).train([agent], learning_mask=[1], plot=False, progress=False)
    return agent.state_dict()


@pytest.mark.parametrize("algo", ["DQN", "PPO", "RL"])
def test_the_agent_is_put_back_exactly(backend, algo):
    """After a search the agent's state, replay and held transitions are as before: it then trains
    exactly like a twin that never searched."""
    def build():
        if algo == "DQN":  # n-step windows and prioritized replay: state held outside the weights
            return dqn(backend, num_steps=3, PR=True)
        if algo == "PPO":  # a partly filled rollout
            return backend.PPO(OBS, ACT, hidden_sizes=(16,), n_steps=128, n_epochs=1, seed=0)
        return user_rl(backend, OBS, ACT, learning_starts=16)
    agent, twin = build(), build()
    for a in (agent, twin):  # some history: optimiser moments, counters, replay contents, exploration
        trainer(episodes=3).train([a], learning_mask=[1], plot=False, progress=False)
    if algo == "PPO":
        assert 0 < len(agent.rollout) < 128  # the search must put a partial rollout back
    before, lrs = agent.state_dict(), agent.learning_rates()
    replay = getattr(agent, "replay", None)
    replay_before = replay.state_dict() if replay is not None else {}
    result = LRFinder(agent).find("CartPole-v1", start_lr=1e-3, end_lr=1.0, num=3, diverge=1e9, seed=3,
                                  update_freq=128 if algo == "PPO" else 16, batch_size=16)
    assert len(result) >= 1
    after = agent.state_dict()
    assert sorted(after) == sorted(before)
    assert all(np.array_equal(after[k], before[k]) for k in before), [k for k in before
                                                                       if not np.array_equal(after[k], before[k])]
    assert agent.learning_rates() == lrs
    if replay is not None:
        replay_after = replay.state_dict()
        assert all(np.array_equal(replay_after[k], v) for k, v in replay_before.items())
    a, b = continue_training(agent), continue_training(twin)
    assert all(np.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in b)


def test_a_fresh_agent_is_put_back_exactly(backend):
    """An agent that never trained before the search (a TF RL optimiser not even built) reads and
    trains afterwards as if the search had not happened."""
    agent, twin = user_rl(backend, OBS, ACT, learning_starts=16), user_rl(backend, OBS, ACT, learning_starts=16)
    before = agent.state_dict()
    LRFinder(agent).find("CartPole-v1", start_lr=1e-3, end_lr=1.0, num=3, diverge=1e9, **FAST)
    after = agent.state_dict()
    assert sorted(after) == sorted(before) and all(np.array_equal(after[k], before[k]) for k in before)
    assert agent.agent_steps == agent.updates == len(agent.replay) == 0
    a, b = continue_training(agent), continue_training(twin)
    assert sorted(a) == sorted(b) and all(np.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in b)


def test_the_agent_is_put_back_when_the_search_fails(backend):
    agent = dqn(backend)
    before = agent.state_dict()
    with pytest.raises(KeyError, match="no loss 'td'"):
        LRFinder(agent).find("CartPole-v1", start_lr=1e-3, end_lr=1.0, num=4, loss_key="td", **FAST)
    after = agent.state_dict()
    assert all(np.array_equal(after[k], v) for k, v in before.items())


def test_a_diverging_loss_stops_the_search(backend):
    agent = dqn(backend)
    result = LRFinder(agent).find("CartPole-v1", start_lr=1e-3, end_lr=1e6, num=40, **FAST)
    assert result.stop_reason == "diverged" and 3 <= len(result) < 40
    smoothed = result.smoothed
    assert smoothed[-1] > 4 * smoothed.min()  # the smoothed loss passed 4x its best ...
    assert all(smoothed[i] <= 4 * smoothed[:i + 1].min() for i in range(len(result) - 1))  # ... only just now
    assert result.lrs[-1] > 0.1 and result.suggestion() < result.lrs[-1]
    assert agent.learning_rates() == pytest.approx({"optimizer": 1e-3})


def test_a_refused_non_finite_step_stops_the_search(backend):
    agent = dqn(backend, max_grad_norm=None)
    before = agent.state_dict()
    result = LRFinder(agent).find("CartPole-v1", start_lr=1e-3, end_lr=1e36, num=14, diverge=1e300, **FAST)
    assert result.stop_reason == "non-finite" and 2 <= len(result) < 14
    assert math.isnan(result.values[-1]) and np.isfinite(result.values[:-1]).all()
    after = agent.state_dict()
    assert all(np.array_equal(after[k], v) for k, v in before.items())


def test_reward_metric_one_point_per_episode(backend):
    agent = dqn(backend)
    result = LRFinder(agent).find("CartPole-v1", 1e-5, 1e-2, num=5, metric="reward", update_freq=4)
    assert len(result) == 5 and result.loss_key is None
    assert result.lrs[0] == pytest.approx(1e-5)
    grid = np.geomspace(1e-5, 1e-2, 5)
    assert all(np.isclose(grid, lr).any() for lr in result.lrs) and (np.diff(result.lrs) >= 0).all()
    assert (result.values >= 8).all() and (result.values == np.round(result.values)).all()  # CartPole returns


def test_a_collapsing_return_stops_the_search():
    """The stop rule on real trainer statistics: returns fall below half the smoothed best."""
    class Trainer:  # the search asks the trainer for each next rate (its run loop applies it)
        requests = []

        def request(self, **changes):
            self.requests.append(changes)
    agent, trainer, lrs = object(), Trainer(), np.geomspace(1e-4, 1e-1, 10)
    search = LRSearch(agent, ["optimizer"], lrs, "reward", None, 4.0, 0.5, 0.0)
    search.on_collect_end(trainer, CollectStats(returns=[np.array([100.0]), np.array([120.0])]), 2)
    assert trainer.requests == [{"learning_rate": {"optimizer": lrs[2]}, "agent": agent}]
    with pytest.raises(SearchDone, match="collapsed"):
        search.on_collect_end(trainer, CollectStats(returns=[np.array([50.0])]), 3)
    assert search.stop_reason == "collapsed" and [v for _, v in search.points] == [100.0, 120.0, 50.0]


def test_factory_and_one_optimizer_of_several(backend):
    calls = []

    def factory(trainer):
        calls.append(trainer)
        return backend.DDPG(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                            hidden_sizes=(16,), learning_starts=32, seed=0)
    result = LRFinder(factory).find("Pendulum-v1", 1e-4, 1e-2, num=3, optimizer=["critic_optimizer"], **FAST)
    assert len(calls) == 1 and isinstance(calls[0], DecentralizedTrainer)
    assert result.optimizers == ("critic_optimizer",) and result.loss_key == "critic_loss" and len(result) == 3


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(start_lr=1e-2, end_lr=1e-3), ValueError, r"start_lr \(0.01\) must be below end_lr"),
    (dict(start_lr=1e-3, end_lr=1e-3), ValueError, "must be below end_lr"),
    (dict(num=1), ValueError, "num must be an integer >= 2"),
    (dict(num=True), ValueError, "num must be an integer >= 2"),
    (dict(start_lr=0.0), ValueError, "start_lr must be a positive finite number"),
    (dict(end_lr=math.inf), ValueError, "end_lr must be a positive finite number"),
    (dict(metric="accuracy"), ValueError, "metric must be 'loss'"),
    (dict(diverge=1.0), ValueError, "diverge must be > 1"),
    (dict(collapse=1.5), ValueError, r"collapse must be in \(0, 1\)"),
    (dict(smoothing=1.0), ValueError, r"smoothing must be a number in \[0, 1\)"),
    (dict(loss_key=3), TypeError, "loss_key must be"),
])
def test_lr_finder_bad_input_raises_before_anything_is_built(kwargs, error, message):
    built = []
    args = {"start_lr": 1e-4, "end_lr": 1e-1, **kwargs}
    with pytest.raises(error, match=message):
        LRFinder(lambda trainer: built.append(trainer)).find("CartPole-v1", **args)
    assert not built


def test_unknown_optimizer_raises_before_training(backend):
    agent = dqn(backend)
    with pytest.raises(KeyError, match=r"DQN has no optimizer 'critic_optimizer'; its optimizers are \['optimizer'\]"):
        LRFinder(agent).find("CartPole-v1", 1e-4, 1e-1, num=3, optimizer="critic_optimizer")
    assert agent.agent_steps == 0 and agent.updates == 0 and len(agent.replay) == 0
    with pytest.raises(TypeError, match="got a DecentralizedTrainer and trainer arguments"):
        LRFinder(agent).find(trainer(), 1e-4, 1e-1, update_freq=8)


# ------------------------------------------------------------------ OptFinder

def test_opt_finder_ranks_a_sane_rate_above_an_absurd_one(backend):
    """1e-3 against 1e-8 on 30 CartPole episodes, ranked by the final TD loss: the tiny rate leaves the
    loss where it started (~0.55), the sane one roughly halves it (a factor >= 1.9 for seeds 0-7)."""
    agent = dqn(backend, learning_starts=64)
    result = OptFinder(agent, [{"lr": 1e-8}, {"lr": 1e-3}]).find("CartPole-v1", "loss", episodes_per_train=30,
                                                                 update_freq=32, batch_size=32)
    assert result.best == {"lr": 1e-3} and [row["index"] for row in result.rows] == [1, 0]
    assert result.rows[0]["score"] * 1.5 < result.rows[1]["score"]
    assert all(row["same_init"] and not row["diverged"] for row in result.rows)
    assert result.best_agent.learning_rates() == pytest.approx({"optimizer": 1e-3})
    assert agent.updates == 0 and agent.agent_steps == 0  # the template agent was not trained


def test_opt_finder_same_start_and_ranking_follows_the_scores(backend, tmp_path):
    calls = []

    def factory(trainer, lr=1e-3, hidden=(16,)):
        calls.append(lr)
        return backend.DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                           hidden_sizes=hidden, lr=lr, learning_starts=16, seed=len(calls))
    result = OptFinder(factory, [{"lr": 1e-4}, {"lr": 1e-2}, {"hidden": (8,)}]).find(
        "CartPole-v1", episodes_per_train=2, **FAST)
    assert calls == [1e-4, 1e-2, 1e-3]  # every candidate built before any training
    scores = result.scores()
    assert scores == sorted(scores, reverse=True) and result.best == result.rows[0]["candidate"]
    assert {row["index"]: row["same_init"] for row in result.rows} == {0: True, 1: True, 2: False}
    assert "rank  score  candidate" in result.table() and len(result.table().splitlines()) == 4
    assert result.plot(tmp_path / "opt.png").endswith("opt.png")


def test_candidates_start_from_the_same_weights_where_they_fit(backend):
    reference, other = dqn(backend, seed=1), dqn(backend, seed=2)
    ref = weights_of(reference)
    assert not all(np.array_equal(v, weights_of(other)[k]) for k, v in ref.items())
    assert start_from(other, ref)
    assert all(np.array_equal(v, weights_of(other)[k]) for k, v in ref.items())
    wider = dqn(backend, hidden_sizes=(8,))
    own = weights_of(wider)
    assert not start_from(wider, ref) and all(np.array_equal(v, weights_of(wider)[k]) for k, v in own.items())


def test_opt_finder_ranks_a_diverged_candidate_last(backend):
    """lr=1e30 makes the loss infinite: the agent refuses that step, the candidate ranks last with
    score NaN and the search goes on with the next candidate."""
    agent = dqn(backend)
    result = OptFinder(agent, [{"lr": 1e30, "max_grad_norm": None}, {"lr": 1e-3}]).find(
        "CartPole-v1", "loss", episodes_per_train=6, **FAST)
    assert [row["index"] for row in result.rows] == [1, 0]
    first, last = result.rows
    assert not first["diverged"] and math.isfinite(first["score"]) and first["episodes"] >= 6
    assert last["diverged"] and math.isnan(last["score"]) and "loss is inf" in last["error"]
    assert "(diverged)" in result.table().splitlines()[-1]


@pytest.mark.parametrize("candidates, error, message", [
    ([], ValueError, "candidates is empty"),
    ({"lr": 1e-3}, TypeError, "candidates must be a list of dicts"),
    ("lr", TypeError, "candidates must be a list of dicts"),
    ([{"lr": 1e-3}, ("lr", 1e-2)], TypeError, "candidate 1 must be a dict"),
    ([{"lr": 1e-3}, {"learning_rate": 1e-2}], TypeError,
     r"candidate 1 \{'learning_rate': 0.01\} has unknown argument\(s\) \['learning_rate'\]: DQN takes \["),
])
def test_opt_finder_bad_candidates_raise_at_once(backend, candidates, error, message):
    with pytest.raises(error, match=message):
        OptFinder(dqn(backend), candidates)


def test_opt_finder_bad_candidate_values_raise_before_any_training(backend):
    built = []

    def factory(trainer, lr=1e-3):
        built.append(backend.DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                                 hidden_sizes=(8,), lr=lr, seed=0))
        return built[-1]
    with pytest.raises(TypeError, match="unknown argument"):
        OptFinder(factory, [{"lr": 1e-3, "gamma": 0.9}])
    with pytest.raises(ValueError, match=r"OptFinder candidate 1 \{'lr': -1.0\}: lr must be a positive"):
        OptFinder(factory, [{"lr": 1e-3}, {"lr": -1.0}]).find("CartPole-v1", episodes_per_train=2)
    assert len(built) == 1 and built[0].agent_steps == 0
    with pytest.raises(ValueError, match="metric must be"):
        OptFinder(factory, [{"lr": 1e-3}]).find("CartPole-v1", metric="return")


# ------------------------------------------------------------------ the original README examples

def original_example_lrfinder(name, tmp_path):
    """``lr_finder = LRFinder(model); lr_finder.find(..., start_lr=..., end_lr=..., metrics='reward')``
    then the reward plot and the best lr; here on DQN over CartPole."""
    module = pytest.importorskip(f"marl_note.agents.{name}")
    model = module.DQN(OBS, ACT, hidden_sizes=(32,), learning_starts=32, seed=0)
    lr_finder = LRFinder(model)
    result = lr_finder.find("CartPole-v1", start_lr=1e-5, end_lr=1e-1, num=6, metric="reward", update_freq=8)
    assert lr_finder.result is result and len(result) == 6
    assert 1e-5 <= result.get_best_lr() <= 1e-1
    assert result.plot(tmp_path / "reward_lr.png").endswith(".png")
    assert model.learning_rates() == pytest.approx({"optimizer": 1e-3})
    result = lr_finder.find("CartPole-v1", start_lr=1e-5, end_lr=1e-1, num=5, metric="loss", diverge=1e9, **FAST)
    assert result.stop_reason == "done" and len(result) == 5


def original_example_optfinder(name):
    """``opt_finder = OptFinder(model, optimizers); opt_finder.find(...)``: here the candidates are the
    agent's optimiser settings (learning rates of DDPG's actor and critic) on Pendulum."""
    module = pytest.importorskip(f"marl_note.agents.{name}")
    env = gym.make("Pendulum-v1")
    model = module.DDPG(env.observation_space, env.action_space, hidden_sizes=(16,), learning_starts=32, seed=0)
    opt_finder = OptFinder(model, [{"actor_lr": 1e-4, "critic_lr": 1e-3}, {"actor_lr": 1e-3, "critic_lr": 1e-2}])
    short = lambda: gym.make("Pendulum-v1", max_episode_steps=60)  # noqa: E731
    result = opt_finder.find(short, episodes_per_train=1, update_freq=20, episodes_per_test=1)
    assert opt_finder.result is result and len(result.rows) == 2
    assert result.best in opt_finder.candidates and result.rows[0]["score"] >= result.rows[1]["score"]
    assert result.best_agent.learning_rates() == pytest.approx(
        {"actor_optimizer": result.best["actor_lr"], "critic_optimizer": result.best["critic_lr"]})


def test_original_example_lrfinder_torch(tmp_path):
    original_example_lrfinder("torch", tmp_path)


def test_original_example_lrfinder_tf(tmp_path):
    original_example_lrfinder("tf", tmp_path)


def test_original_example_optfinder_torch():
    original_example_optfinder("torch")


def test_original_example_optfinder_tf():
    original_example_optfinder("tf")


# ------------------------------------------------------------------ reading a suggestion off the curve

def curve(values, metric="loss"):
    from marl_note.contrib.finders.results import LRFinderResult

    return LRFinderResult(metric, np.geomspace(1e-5, 1e-1, len(values)), np.asarray(values, float), smoothing=0.0,
                          stop_reason="done", optimizers=("optimizer",))


def test_the_suggestion_is_the_log_centre_of_the_valley_at_half_depth():
    # falls from 1.0 to 0.2 (depth 0.8, half depth at 0.6), flat, then climbs: the valley is points 3..7
    result = curve([1.0, 0.95, 0.8, 0.55, 0.3, 0.2, 0.25, 0.4, 0.9, 2.0])
    lo, hi = result.valley()
    assert (lo, hi) == (result.lrs[3], result.lrs[7])
    assert result.suggestion() == pytest.approx(math.sqrt(lo * hi))
    # the classic reading is the steepest fall (between points 3 and 4), at the valley's left edge
    assert result.suggestion(method="steepest") == result.lrs[3] < result.suggestion()
    # a return curve (higher is better) reads the same valley upside down
    returns = curve([-v for v in result.values], metric="return")
    assert returns.valley() == (lo, hi) and returns.suggestion() == pytest.approx(result.suggestion())


def test_a_curve_that_never_improved_falls_back_to_the_steepest_point_and_bad_methods_are_refused():
    rising = curve([0.1, 0.2, 0.4, 0.8, 1.6])
    assert rising.valley() is None and rising.suggestion() == rising.suggestion(method="steepest")
    with pytest.raises(ValueError, match="method must be 'valley' or 'steepest'"):
        rising.suggestion(method="middle")
    with pytest.raises(ValueError, match="at least 3 finite points"):
        curve([1.0, float("nan"), float("nan"), 0.5]).suggestion()
