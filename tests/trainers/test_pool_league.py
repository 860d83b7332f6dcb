"""Self-play in pool mode: an OpponentPool matchmaker run by 2 actor processes on tic-tac-toe."""
import multiprocessing

import pytest

torch = pytest.importorskip("torch")
from tests.trainers.pool_selfplay import check_league_run, league_run  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_actors_play_the_opponent_pool_and_store_only_the_learners_seats(no_leftovers):
    check_league_run(*league_run())


def test_draw_table_matches_sample_opponent():
    import numpy as np
    from pettingzoo.classic import tictactoe_v3

    from marl_note.agents import RandomAgent
    from marl_note.envs import adapt, make_spec
    from marl_note.trainers.selfplay import OpponentPool

    spec = make_spec(adapt(tictactoe_v3.env()))
    space = spec.action_space("player_1")
    pool = OpponentPool(RandomAgent(space), spec, sampling="prioritized", self_play_fraction=0.2,
                        fixed_fraction=0.3, seed=0)
    for name in ("fixed_a", "fixed_b"):
        pool.add(RandomAgent(space), name=name)
    pool.add_snapshot(0)
    pool.add_snapshot(5)
    pool.scores.update(fixed_a=0.9, fixed_b=0.1, **{"snapshot_0@0": 0.3})
    table = pool.draw_table()
    draws = [pool.sample_opponent() for _ in range(20000)]
    assert sum(table.values()) == pytest.approx(1.0)
    for name, p in table.items():
        assert np.mean([d == name for d in draws]) == pytest.approx(p, abs=0.015)


def test_a_matchmaker_other_than_an_opponent_pool_is_refused_before_any_process_starts():
    from marl_note.agents.torch import DQN
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, seed=0, actors=2)
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(8,))
    with pytest.raises(ValueError, match="matchmaker must be an OpponentPool"):
        trainer.train([agent], learning_mask=[1], plot=False, progress=False, matchmaker=lambda i: None)
    assert not multiprocessing.active_children()

