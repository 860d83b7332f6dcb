"""The rank context and the launcher without any framework: lockstep checks, seeds, time bounds."""
import multiprocessing
import os
import time

import numpy as np
import pytest

from marl_note.contrib.distributed.ranks import RankFailedError, launch
from marl_note.distributed import RANK_SEED_STRIDE, DistributedContext, env_rank_info


class Chief:
    """Stands in for rank 0 on the other end of a broadcast."""

    def __init__(self, said):
        self.said, self.prepared = said, []

    def broadcast(self, obj, src=0):
        return self.said

    def barrier(self):
        pass

    def prepare(self, agent):
        self.prepared.append(agent)


def test_rank_0_decides_and_a_rank_with_other_gradient_steps_is_named():
    ctx = DistributedContext(rank=1, world_size=2, collective=Chief((False, 3)))
    assert ctx.lockstep(True, 3) is False  # rank 0's decision, not this rank's
    with pytest.raises(RuntimeError, match="rank 1 took 4 gradient steps in the last update round, rank 0 took 3"):
        ctx.lockstep(True, 4)


def test_prepare_hands_the_agent_to_the_backend_and_decorrelates_exploration_on_other_ranks():
    class Agent:
        rng = np.random.default_rng(0)

    chief, agent = Chief(None), Agent()
    DistributedContext(rank=1, world_size=2, collective=chief).prepare(agent)
    assert chief.prepared == [agent]
    assert agent.rng.random() != np.random.default_rng(0).random()
    one = Agent()
    DistributedContext().prepare(one)  # one process: nothing happens
    assert one.rng is Agent.rng
    assert DistributedContext(rank=1, world_size=3, collective=chief).rank_seed(5) == 5 + RANK_SEED_STRIDE


def test_bad_contexts_and_environments_are_refused():
    with pytest.raises(TypeError, match="world_size=2 needs a collective"):
        DistributedContext(rank=0, world_size=2)
    with pytest.raises(ValueError, match="need 0 <= rank < world_size"):
        DistributedContext(rank=2, world_size=2, collective=Chief(None))
    with pytest.raises(TypeError, match="rank must be an int"):
        DistributedContext(rank=True)
    env = dict(os.environ)
    try:
        os.environ.update(RANK="3", WORLD_SIZE="2")
        with pytest.raises(ValueError, match="RANK=3, WORLD_SIZE=2"):
            env_rank_info()
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_the_launcher_bounds_a_run_in_time_and_leaves_no_process():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[0\] were still running"):
        launch(time.sleep, 1, 600, timeout=1)
    # stopped at its timeout, not after the rank's 600 s (room for a slow start on a loaded machine)
    assert time.monotonic() - start < 60 and multiprocessing.active_children() == []
    with pytest.raises(ValueError, match="timeout"):
        launch(print, 1, timeout=-1)
    with pytest.raises(TypeError, match="fn must be callable"):
        launch(3, 1)


def test_a_crash_is_reported_before_the_errors_it_causes():
    err = RankFailedError(1, -9, "", {0: "RankLostError: rank 0: averaging the gradients ... failed"})
    assert str(err).startswith("rank 1 exited with code -9; the other ranks were stopped\n  rank 0 then: RankLost")


def test_a_trainer_refuses_an_actor_pool_in_a_multi_rank_run_before_any_process_starts():
    from marl_note.trainers import DecentralizedTrainer

    ranks = DistributedContext(rank=0, world_size=2, collective=Chief((True, 0)))
    with pytest.raises(ValueError, match="the actor pool and distributed= cannot be combined"):
        DecentralizedTrainer("CartPole-v1", num_train_envs=4, batch_size=16, actors=2, distributed=ranks)
    assert multiprocessing.active_children() == []
    one = DecentralizedTrainer("CartPole-v1", num_train_envs=4, batch_size=16, actors=2,
                               distributed=DistributedContext())  # one process: the pool is fine
    one.close()
