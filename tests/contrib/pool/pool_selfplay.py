"""One self-play run through the pool (an OpponentPool matchmaker on tic-tac-toe), shared by both backends."""
import numpy as np
from pettingzoo.classic import tictactoe_v3

from marl_note.agents.torch import DQN
from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.selfplay import OpponentPool


class Spy:
    """Records the episode tags the learner hears and the PFSP scores after every chunk."""

    def __init__(self, pool):
        self.pool, self.tags, self.scores = pool, [], []

    def on_episode_end(self, trainer, episode, logs):
        self.tags.append(logs["tag"])

    def on_collect_end(self, trainer, stats, episodes):
        self.scores.append(dict(self.pool.scores))


def league_run(pool_options=None):
    """Train 80 tic-tac-toe games with 2 actors against a prioritized opponent pool (a quarter self-play);
    tests run only at the end, so the scores before it come from the actors' games."""
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=1, update_freq=20,
                                   episodes_per_train=80, test_freq=1000, episodes_per_test=2, seed=0, actors=2,
                                   pool=pool_options)
    agent = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), hidden_sizes=(16,),
                learning_starts=32, seed=0)
    league = OpponentPool(agent, trainer.spec, snapshot_every=4, sampling="prioritized", self_play_fraction=0.25,
                          eval_episodes=2, seed=0)
    spy = Spy(league)
    stats = trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False, matchmaker=league,
                          callbacks=[spy, league])
    return agent, league, spy, stats


def check_league_run(agent, league, spy, stats):
    pool = stats["pool"]
    # every actor reported a league version, and republished leagues reached the actors. No actor can play the run
    # before the first republication (round grants wait for every actor's first report: the synchronisation point
    # tested in test_pool_league.py), but one actor, starved of CPU, may still play its last round with league 0
    assert min(pool["league_versions"]) >= 0 and max(pool["league_versions"]) >= 1
    names = {tag[0] for tag in spy.tags}
    assert {tag[1] for tag in spy.tags} == {0, 1}  # the learner's seat rotates
    assert league.learner_name in names  # self-play games
    late = {n for n in names if n.startswith("snapshot_") and n != "snapshot_0@0"}
    assert late, names  # snapshots taken during the run reached the actors and were played
    assert any(s != 0.5 for scores in spy.scores for s in scores.values())  # PFSP scores moved before any test
    assert agent.agent_steps == sum(pool["transitions_per_actor"]) > 0
    # only the learner's seats are stored: all of a self-play game's moves, about half of another game's
    ratio = agent.agent_steps / stats["num_collected_steps"]
    assert 0.4 < ratio < 0.85, ratio
    assert np.isfinite(pool["mean_policy_lag"]) and pool["actor_frameworks"] == []
