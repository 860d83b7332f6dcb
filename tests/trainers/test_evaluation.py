"""Periodic tests of a self-play learner against a fixed baseline in every seat, and test_against."""
import numpy as np
import pytest
from mpe2 import simple_spread_v3

from marl_note.agents import RandomAgent
from marl_note.envs import with_agent_id
from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.evaluation import is_constant_sum, seat_outcomes
from tests.trainers.test_trainer import CountingLearner, small_trainer


class FirstLegal:
    """Always plays the lowest legal square: weak, deterministic, so it plays itself to the same result."""

    def __init__(self, action_space):
        self.action_space = action_space

    def act(self, obs, mask=None, explore=False):
        return np.argmax(mask, axis=1)


class OnePly:
    """Wins when it can, else blocks the opponent's immediate win, else plays the lowest legal square."""

    LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]

    def __init__(self, action_space):
        self.action_space = action_space

    def act(self, obs, mask=None, explore=False):
        out = []
        for board, legal in zip(np.asarray(obs), mask):
            me, them = board[..., 0].reshape(-1), board[..., 1].reshape(-1)
            choice = None
            for mine in (me, them):  # first a winning square, then a blocking one
                for line in self.LINES:
                    free = [s for s in line if legal[s]]
                    if len(free) == 1 and sum(mine[s] for s in line) == 2:
                        choice = free[0]
                        break
                if choice is not None:
                    break
            out.append(int(np.flatnonzero(legal)[0]) if choice is None else choice)
        return np.asarray(out)


class Recorder:
    def __init__(self):
        self.results = []

    def on_test_end(self, trainer, result, episodes):
        self.results.append(result)


def test_self_play_is_tested_against_random_in_each_seat():
    trainer = small_trainer(episodes_per_test=6)
    learner = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    rec = Recorder()
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False, callbacks=[rec])
    assert stats["tested_against_baseline"] is True
    assert rec.results, "no periodic test ran"
    for result in rec.results:
        assert sorted(result["per_seat"]) == ["player_1", "player_2"]
        assert [r["episodes"] for r in result["per_seat"].values()] == [3, 3]
        own = result["rewards"][np.arange(6), result["learner_seat"]]
        assert result["reward"] == pytest.approx(own.mean())
    assert set(stats["last_test_per_seat"]) == {"player_1", "player_2"}


def test_self_play_metric_measures_strength_not_the_constant():
    """A deterministic player against itself always scores the same; against random it does not."""
    trainer = small_trainer(episodes_per_test=40, episodes_per_train=20)
    weak = FirstLegal(trainer.action_space("player_1"))
    # against itself FirstLegal plays the same game every time: a constant metric
    self_play = trainer.test([weak, weak], episodes=10)["rewards"]
    assert np.all(self_play == self_play[0])
    strong = trainer.test_against(OnePly(trainer.action_space("player_1")), episodes=200)
    weak_res = trainer.test_against(weak, episodes=200)
    assert strong["reward"] > weak_res["reward"] + 0.2
    for res in (strong, weak_res):
        for r in res["per_seat"].values():
            assert r["win"] + r["draw"] + r["loss"] == pytest.approx(1.0)
    assert strong["per_seat"]["player_1"]["win"] > 0.8 and strong["per_seat"]["player_2"]["win"] > 0.5


def test_cooperative_shared_policy_keeps_testing_the_team():
    trainer = DecentralizedTrainer(with_agent_id(lambda: simple_spread_v3.parallel_env(max_cycles=25)),
                                   num_train_envs=2, num_test_envs=1, update_freq=20, test_freq=2,
                                   episodes_per_train=2, episodes_per_test=1, seed=0)
    name = trainer.possible_agents[0]
    learner = CountingLearner(trainer.action_space(name), trainer.observation_space(name))
    stats = trainer.train([learner] * 3, learning_mask=[1, 1, 1], plot=False, progress=False)
    assert stats["tested_against_baseline"] is False


def test_explicit_baseline_and_opting_out():
    trainer = small_trainer()
    learner = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False, baseline=None)
    assert stats["tested_against_baseline"] is False
    rec = Recorder()
    trainer = small_trainer()
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False, callbacks=[rec],
                          baseline=FirstLegal(trainer.action_space("player_1")))
    assert stats["tested_against_baseline"] is True and "per_seat" in rec.results[-1]
    with pytest.raises(ValueError, match="baseline must be"):
        small_trainer().train([learner, learner], learning_mask=[1, 1], baseline="strong")
    with pytest.raises(TypeError, match="act"):
        small_trainer().train([learner, learner], learning_mask=[1, 1], baseline=object())
    with pytest.raises(ValueError, match="action space"):
        small_trainer().train([learner, learner], learning_mask=[1, 1],
                              baseline=RandomAgent(trainer.action_space("player_1").__class__(3)))


def test_seat_outcomes_and_constant_sum():
    r = np.array([[1.0, -1.0], [0.0, 0.0], [-1.0, 1.0], [1.0, -1.0]])
    assert seat_outcomes(r, 0) == {"mean_return": 0.25, "win": 0.5, "draw": 0.25, "loss": 0.25, "episodes": 4}
    assert is_constant_sum(r)
    assert not is_constant_sum(np.array([[-3.0, -3.0], [-5.0, -5.0]]))  # shared reward: cooperative
    assert not is_constant_sum(np.zeros((0, 2)))


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("blocks", [0, 1], ids=["no_game", "first_seat_only"])
def test_a_test_cut_short_by_the_budget_reports_only_the_games_it_finished(blocks):
    # a wall-time budget can end a periodic test before any game (or before the second seat's first game):
    # the metric is over the games that finished (nan if none), with no numpy warning on the terminal
    from marl_note.trainers.evaluation import baseline_opponents, evaluate_against

    trainer = small_trainer(num_test_envs=1, reward_metric=lambda rewards: rewards.max(axis=1).mean())
    started = []  # the seats' blocks of games begun: the budget runs out once `blocks` of them were played
    trainer.limit_collection(lambda kind, steps: len(started) > blocks)
    real_test = trainer.test

    def test(*args, **kwargs):
        started.append(1)
        return real_test(*args, **kwargs)

    trainer.test = test
    result = evaluate_against(trainer, FirstLegal(trainer.action_space("player_1")),
                              baseline_opponents(trainer.spec, "random", seed=0), episodes=4)
    assert [r["episodes"] for r in result["per_seat"].values()] == [2 * blocks, 0]
    assert result["num_collected_episodes"] == 2 * blocks
    if blocks:
        assert result["reward"] == pytest.approx(result["rewards"].max(axis=1).mean())
        assert result["mean_num_steps"] >= 5  # a tic-tac-toe game takes at least 5 moves
    else:
        assert np.isnan(result["reward"]) and np.isnan(result["mean_num_steps"])
