import threading

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.trainers import DecentralizedTrainer, Elo, OpponentPool, snapshot
from tests.trainers.test_trainer import CountingLearner

torch = pytest.importorskip("torch")
from marl_note.agents.torch import DQN  # noqa: E402


def test_elo_matches_hand_computed_values():
    elo = Elo(k=32)
    assert elo.update("a", "b", 1.0) == (1216.0, 1184.0)
    elo = Elo(k=20)
    elo.ratings.update(a=1400.0, b=1200.0)
    expected = 1 / (1 + 10 ** (-200 / 400))  # 0.7597
    assert elo.expected("a", "b") == pytest.approx(expected)
    a, b = elo.update("a", "b", 0.5)  # a draw against a weaker player costs a points
    assert a == pytest.approx(1400 + 20 * (0.5 - expected)) and b == pytest.approx(1200 - 20 * (0.5 - expected))
    assert a + b == pytest.approx(2600.0)  # zero-sum
    with pytest.raises(ValueError, match="score"):
        elo.update("a", "b", 2.0)


def _trainer(**kw):
    args = dict(num_train_envs=4, num_test_envs=2, update_freq=40, test_freq=20, episodes_per_train=40,
                episodes_per_test=4, seed=0)
    args.update(kw)
    return DecentralizedTrainer(tictactoe_v3.env, **args)


def test_snapshots_are_frozen_copies():
    trainer = _trainer()
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0,
                  learning_starts=10, update_steps=20)
    frozen = snapshot(learner, "s0")
    obs = np.random.default_rng(0).integers(0, 2, (64, 3, 3, 2)).astype(np.int8)
    before = frozen.act(obs)
    trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False)
    assert learner.updates > 0
    assert np.array_equal(frozen.act(obs), before)  # training the learner did not move the snapshot
    assert not np.array_equal(learner.q_values(obs), frozen.agent.q_values(obs))
    assert not hasattr(frozen, "observe") and not hasattr(frozen, "update")


def test_unsnapshottable_agent_and_mismatched_opponent_fail_clearly():
    trainer = _trainer()

    class Locked(CountingLearner):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.lock = threading.Lock()  # cannot be deep-copied

    with pytest.raises(TypeError, match="cannot snapshot agent Locked"):
        snapshot(Locked(trainer.action_space("player_1"), trainer.observation_space("player_1")))
    learner = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    pool = OpponentPool(learner, trainer.spec)
    c4 = DecentralizedTrainer(connect_four_v3.env, num_train_envs=1, num_test_envs=1)
    with pytest.raises(ValueError, match="pool opponent 'c4' has action space Discrete\\(7\\)"):
        pool.add(RandomAgent(c4.action_space("player_0")), name="c4")
    with pytest.raises(ValueError, match="sampling"):
        OpponentPool(learner, trainer.spec, sampling="best")


def test_pool_training_rotates_seats_freezes_opponents_and_rates_them():
    trainer = _trainer(episodes_per_train=60)
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0,
                  learning_starts=50)
    pool = OpponentPool(learner, trainer.spec, snapshot_every=20, eval_episodes=4, seed=0)
    pool.add(RandomAgent(trainer.action_space("player_1"), seed=1), name="random")
    tags = []
    pool_call = pool.__call__

    def matchmaker(i):
        seating = pool_call(i)
        tags.append(seating[3])
        agents, explore, learn, _ = seating
        assert sum(learn) == 1 and agents[learn.index(True)] is learner
        assert all(not e for e, ln in zip(explore, learn) if not ln)  # frozen seats act greedily
        return seating

    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                          matchmaker=matchmaker, callbacks=[pool])
    assert {seat for _, seat in tags} == {0, 1}  # the learner played both seats
    assert {opp for opp, _ in tags} >= {"random", "snapshot_0@0"}
    snaps = [n for n in pool.names if n.startswith("snapshot_")]
    assert len(snaps) >= 3  # at start, then every 20 episodes
    assert set(stats["elo"]) == {"learner", "random", *snaps} and stats["elo_history"]
    # each game the learner plays only its own seat: stored transitions ~ half the env steps
    assert learner.agent_steps < 0.7 * stats["num_collected_steps"]


def test_prioritized_sampling_prefers_opponents_the_learner_scores_badly_against():
    trainer = _trainer()
    learner = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    pool = OpponentPool(learner, trainer.spec, sampling="prioritized", seed=0)
    for name in ("easy", "hard"):
        pool.add(RandomAgent(trainer.action_space("player_1")), name=name)
    pool.scores.update(easy=1.0, hard=0.0)
    draws = [pool.sample_opponent() for _ in range(2000)]
    assert draws.count("hard") > 0.9 * len(draws)


def test_fixed_fraction_sets_the_share_of_games_against_fixed_opponents():
    trainer = _trainer()
    learner = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    pool = OpponentPool(learner, trainer.spec, fixed_fraction=0.3, sampling="prioritized", seed=0)
    pool.add(RandomAgent(trainer.action_space("player_1")), name="random")
    for i in range(3):
        pool.opponents[f"snapshot_{i}"] = RandomAgent(trainer.action_space("player_1"))
    pool.scores.update(random=1.0)  # prioritized sampling alone would almost never draw it
    draws = [pool.sample_opponent() for _ in range(4000)]
    assert draws.count("random") / len(draws) == pytest.approx(0.3, abs=0.03)
    assert {d for d in draws if d != "random"} == {"snapshot_0", "snapshot_1", "snapshot_2"}
    pool.fixed_fraction = 1.0
    assert {pool.sample_opponent() for _ in range(100)} == {"random"}


def test_fixed_fraction_needs_a_fixed_opponent_and_a_valid_share():
    trainer = _trainer()
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0)
    with pytest.raises(ValueError, match="fixed_fraction must be in"):
        OpponentPool(learner, trainer.spec, fixed_fraction=1.5)
    pool = OpponentPool(learner, trainer.spec, fixed_fraction=0.5)
    with pytest.raises(ValueError, match="no fixed opponents"):
        trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                      matchmaker=pool, callbacks=[pool])
    assert learner.agent_steps == 0  # refused before any game was played


def _pool_of(names, **kw):
    trainer = _trainer()
    space = trainer.action_space("player_1")
    pool = OpponentPool(CountingLearner(space, trainer.observation_space("player_1")), trainer.spec,
                        sampling="prioritized", seed=0, **kw)
    for name in names:
        pool.add(RandomAgent(space), name=name)
    return pool


def test_pfsp_weights_move_towards_the_opponents_the_learner_loses_to():
    pool = _pool_of(["a", "b", "c"], score_rate=0.5, priority_floor=0.05)
    assert pool.weights().tolist() == pytest.approx([1 / 3] * 3)  # no games yet: p = 0.5 for all
    for _ in range(2):  # the learner loses twice to a, draws c, beats b twice
        pool.record("a", 0.0)
        pool.record("b", 1.0)
    pool.record("c", 0.5)
    assert pool.scores == {"a": 0.125, "b": 0.875, "c": 0.5}  # 0.5 -> 0.25 -> 0.125, 0.5 -> 0.75 -> 0.875
    raw = np.array([0.875 ** 2, 0.125 ** 2, 0.5 ** 2]) + 0.05  # (1 - p) ** 2 + floor
    assert pool.weights() == pytest.approx(raw / raw.sum())
    pool.record("b", 0.0)  # a loss to b moves weight back towards b
    before = raw[1] / raw.sum()
    assert pool.weights()[1] > before
    # training games reach the pool through on_episode_end with the matchmaker's tag (opponent, seat)
    pool.on_episode_end(None, 1, {"tag": ("c", 1), "returns": np.array([1.0, -1.0])})  # learner (seat 1) lost
    assert pool.scores["c"] == 0.25
    pool.on_episode_end(None, 2, {"tag": ("learner", 0), "returns": np.array([1.0, -1.0])})  # self-play: no score
    assert "learner" not in pool.scores
    frozen = _pool_of(["a"], score_rate=None)
    frozen.record("a", 0.0)
    assert frozen.scores == {}  # score_rate=None: only evaluations at tests set the scores


def test_self_play_fraction_seats_the_learner_everywhere_in_that_share_of_games():
    pool = _pool_of(["fixed"], self_play_fraction=0.6, fixed_fraction=0.1)
    pool.opponents["snapshot_0"] = RandomAgent(pool.spec.action_space("player_1"))
    seatings = [pool(i % 4) for i in range(3000)]
    opponents = [tag[0] for *_, tag in seatings]
    assert opponents.count("learner") / 3000 == pytest.approx(0.6, abs=0.03)
    assert opponents.count("fixed") / 3000 == pytest.approx(0.1, abs=0.02)
    for agents, explore, learn, (opp, seat) in seatings[:50]:
        if opp == "learner":
            assert all(a is pool.learner for a in agents) and all(explore) and all(learn)
        else:
            assert learn == [k == seat for k in range(2)] and agents[seat] is pool.learner
    with pytest.raises(ValueError, match="add up to at most 1"):
        _pool_of([], self_play_fraction=0.8, fixed_fraction=0.3)
    with pytest.raises(ValueError, match="self_play_fraction must be in"):
        _pool_of([], self_play_fraction=-0.1)
    with pytest.raises(ValueError, match="score_rate"):
        _pool_of([], score_rate=0.0)


def test_pool_with_self_play_and_a_fixed_minority_trains_and_scores_its_opponents():
    from marl_note.contrib.board_games import WinOrBlockPlayer

    trainer = _trainer(episodes_per_train=80, test_freq=40)
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0,
                  learning_starts=50)
    pool = OpponentPool(learner, trainer.spec, snapshot_every=20, eval_episodes=2, sampling="prioritized",
                        self_play_fraction=0.5, fixed_fraction=0.2, seed=0)
    pool.add(WinOrBlockPlayer("tictactoe", seed=1), name="win-or-block")
    tags = []
    pool_call = pool.__call__

    def matchmaker(i):
        seating = pool_call(i)
        tags.append(seating[3][0])
        return seating

    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                          matchmaker=matchmaker, callbacks=[pool])
    assert {"learner", "win-or-block"} <= set(tags) and any(t.startswith("snapshot_") for t in tags)
    assert learner.updates > 0 and "elo" in stats
    assert set(pool.scores) == set(pool.names)  # every opponent was scored


def test_ppo_self_play_against_its_frozen_snapshots_and_a_fixed_minority():
    """PPO learns in the same pool as DQN: its snapshots are frozen copies that the pool seats and scores."""
    from marl_note.agents.torch import PPO
    from marl_note.contrib.board_games import WinOrBlockPlayer

    trainer = _trainer(episodes_per_train=120, test_freq=60)
    learner = PPO(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0, n_steps=128,
                  n_epochs=2, hidden_sizes=(32,))
    pool = OpponentPool(learner, trainer.spec, snapshot_every=30, eval_episodes=2, sampling="prioritized",
                        self_play_fraction=0.3, fixed_fraction=0.2, seed=0)
    pool.add(WinOrBlockPlayer("tictactoe", seed=1), name="win-or-block")
    first = snapshot(learner, "before")
    obs = np.random.default_rng(0).integers(0, 2, (64, 3, 3, 2)).astype(np.int8)
    before = first.act(obs)
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                          matchmaker=pool, callbacks=[pool])
    assert learner.updates > 0 and "elo" in stats and any(n.startswith("snapshot_") for n in pool.names)
    assert set(pool.scores) == set(pool.names)
    assert np.array_equal(first.act(obs), before)  # training moved the learner, not its snapshot
    moved = [k for k, v in learner.state_dict().items()
             if k.startswith("net.pi.") and not np.array_equal(v, first.agent.state_dict()[k])]
    assert moved
