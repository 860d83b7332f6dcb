"""Agents without a numpy acting copy (a user RL subclass, numpy_acting=False) act in torch inside the actors."""
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.trainers import DecentralizedTrainer

torch = pytest.importorskip("torch")
from marl_note.agents.torch import DQN  # noqa: E402
from tests.contrib.pool.pool_agents import TinyDQN  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def test_an_rl_subclass_and_a_framework_dqn_act_in_torch_inside_the_actors(no_leftovers):
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=1, num_test_envs=1, update_freq=20,
                                   episodes_per_train=12, test_freq=1000, episodes_per_test=2, seed=0, actors=1)
    mine = TinyDQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0)
    theirs = DQN(trainer.observation_space("player_2"), trainer.action_space("player_2"), hidden_sizes=(16,),
                 learning_starts=32, numpy_acting=False, seed=0)
    stats = trainer.train([mine, theirs], learning_mask=[1, 1], plot=False, progress=False)
    pool = stats["pool"]
    assert pool["actor_frameworks"] == ["torch"]  # the fallback imported torch in the actors
    assert mine.updates > 0 and theirs.updates > 0
    assert pool["published_versions"] == [mine.updates, theirs.updates] or max(
        u - v for u, v in zip((mine.updates, theirs.updates), pool["published_versions"])) < 1
    assert mine.agent_steps + theirs.agent_steps == sum(pool["transitions_per_actor"]) > 0
    assert mine.agent_steps > 0 and theirs.agent_steps > 0
