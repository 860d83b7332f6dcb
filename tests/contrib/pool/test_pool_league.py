"""Self-play in pool mode: an OpponentPool matchmaker run by 2 actor processes on tic-tac-toe."""
import multiprocessing

import pytest

torch = pytest.importorskip("torch")
from tests.contrib.pool.pool_selfplay import check_league_run, league_run  # noqa: E402

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


def test_an_actor_starting_late_does_not_let_the_others_run_ahead_of_the_learner(tmp_path):
    """The synchronisation point the league run relies on: until every actor has reported its first round,
    no actor gets more than ROUNDS_AHEAD rounds, so the first chunk cannot swallow the run (on the old code
    actor 0 played on while actor 1 started, and a whole league run could end inside its first chunk,
    before any snapshot was published: the flake of the test above on a loaded machine)."""
    import functools

    from marl_note.agents.torch import DQN
    from marl_note.contrib.pool.pool import ROUNDS_AHEAD
    from marl_note.trainers import DecentralizedTrainer
    from marl_note.trainers.callbacks import LambdaCallback
    from tests.contrib.pool.pool_envs import late_second_actor_tictactoe

    update_freq, actors = 20, 2
    round_steps = update_freq // actors
    env = functools.partial(late_second_actor_tictactoe, str(tmp_path), ROUNDS_AHEAD * round_steps)
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, update_freq=update_freq,
                                   episodes_per_train=30, test_freq=1000, episodes_per_test=1, seed=0, actors=actors)
    agent = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), hidden_sizes=(8,),
                learning_starts=32, seed=0)
    chunks = []
    trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False,
                  callbacks=[LambdaCallback(on_collect_end=lambda stats, episodes: chunks.append(stats.env_steps))])
    assert int((tmp_path / "steps").read_text()) >= ROUNDS_AHEAD * round_steps  # actor 0 did start first
    # actor 0's rounds before actor 1 reported, and actor 1's, all within the first chunk
    assert chunks[0] <= ROUNDS_AHEAD * round_steps * actors, chunks
    assert len(chunks) > 1
    assert not multiprocessing.active_children()
