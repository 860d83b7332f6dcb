"""DecentralizedTrainer(actors=N, pool={"backend": "ray"}): 2 Ray actors on a local Ray (one start per module)."""
import functools
import os
import sys
import time

import numpy as np
import pytest

from marl_note.contrib.pool.pool import ActorError
from marl_note.contrib.pool.ray_backend import NICENESS_VARIABLE, start_ray
from marl_note.trainers import DecentralizedTrainer
from tests.contrib.pool.pool_envs import crashing_cartpole, failing_cartpole

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")
from marl_note.agents.torch import DQN  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _children() -> set[int]:
    """Live processes whose parent is this one (Ray's local GCS, raylet and workers)."""
    me, out = os.getpid(), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(pid))
    return out


@pytest.fixture(scope="module")
def local_ray():
    before = _children()
    start_ray(num_cpus=2)  # as the pool starts Ray
    yield before
    ray.shutdown()


def cartpole_trainer(env="CartPole-v1", **kwargs):
    settings = dict(num_train_envs=4, num_test_envs=2, update_freq=64, episodes_per_train=12, test_freq=6,
                    episodes_per_test=2, seed=0, actors=2, sync_every=2, pool={"backend": "ray"})
    return DecentralizedTrainer(env, **{**settings, **kwargs})


def dqn(trainer, **kwargs):
    return DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
               learning_starts=32, seed=0, **kwargs)


def test_ray_actors_feed_the_learner_and_act_with_refreshed_weights(local_ray):
    trainer = cartpole_trainer()
    agent = dqn(trainer, num_steps=3)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    pool = stats["pool"]
    assert pool["actors"] == 2 and min(pool["transitions_per_actor"]) > 0  # every actor's rows arrived
    assert agent.agent_steps == sum(pool["transitions_per_actor"])  # and every one reached observe
    assert stats["num_collected_episodes"] >= 12 and agent.updates > 0
    assert pool["published_versions"][0] > 0 and agent.updates - pool["published_versions"][0] < 2
    assert pool["actor_frameworks"] == []  # the Ray actors acted in numpy
    lag = [v for _, v in trainer.run_state.series["policy_lag"].values()]
    assert lag and all(np.isfinite(lag)) and min(lag) >= 0
    assert lag[-1] < agent.updates  # the actors act with refreshed weights, not the first version
    assert ray.is_initialized()  # a Ray the caller started is left running


def test_ray_workers_run_at_the_learners_priority(local_ray):
    # Ray's default niceness (15) starves the actors on a shared machine; the variable is set only
    # while Ray starts
    @ray.remote(num_cpus=1)
    def niceness():
        return os.nice(0)

    assert ray.get(niceness.remote(), timeout=60) == os.nice(0)
    assert NICENESS_VARIABLE not in os.environ


def test_a_ray_actor_crash_raises_its_traceback(local_ray):
    trainer = cartpole_trainer(functools.partial(crashing_cartpole, os.getpid()), num_train_envs=2,
                               num_test_envs=1, update_freq=400, episodes_per_train=50,
                               pool={"backend": "ray", "actor_timeout": 30})
    with pytest.raises(ActorError, match="(?s)actor [01] failed:.*Traceback.*boom in the actor's env"):
        trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False)


def test_ray_options_are_checked_before_any_work():
    with pytest.raises(ValueError, match="act on shared-memory shards"):
        cartpole_trainer(pool={"backend": "ray", "random": True})
    with pytest.raises(ValueError, match="needs backend='ray'"):
        cartpole_trainer(pool={"address": "auto"})
    with pytest.raises(ValueError, match="backend must be one of"):
        cartpole_trainer(pool={"backend": "dask"})


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ImportError, match=r'pip install "marl_note\[ray\]"'):
        cartpole_trainer()
    from marl_note.contrib.pool.ray_backend import import_ray
    with pytest.raises(ImportError, match=r'pip install "marl_note\[ray\]"'):
        import_ray()


def test_ray_actors_play_the_opponent_pool(local_ray):
    from tests.contrib.pool.pool_selfplay import check_league_run, league_run

    check_league_run(*league_run({"backend": "ray"}))


def test_ray_actors_collect_ppo_rounds_synchronously(local_ray):
    from tests.contrib.pool.test_pool_ppo import ppo_chunks

    trainer, agent, seen, stats = ppo_chunks(actors=2, chunks=4, pool={"backend": "ray"})
    assert [rows for rows, *_ in seen] == [64, 128, 64, 128]  # as the in-process collector's (test_pool_ppo)
    assert stats["pool"]["published_versions"] == [agent.updates] and agent.updates > 0
    assert max(v for _, v in trainer.run_state.series["policy_lag"].values()) == 0


def test_a_ray_actor_stuck_in_its_env_raises_after_actor_timeout(local_ray, tmp_path, monkeypatch):
    # one actor's env sleeps forever on its 300th step, after the first chunk, while the other actor
    # keeps returning rounds (the budget is out of reach): the stuck one raises after actor_timeout, and
    # its worker is killed
    import dataclasses

    from marl_note.contrib.pool.ray_backend import RayPool
    from tests.contrib.pool.test_pool_dead_actors import within

    wait_started = RayPool._wait_started

    def patiently(pool):  # starting a Ray worker takes seconds on a busy machine: not what this test times
        options, pool.options = pool.options, dataclasses.replace(pool.options, actor_timeout=60)
        try:
            wait_started(pool)
        finally:
            pool.options = options

    monkeypatch.setattr(RayPool, "_wait_started", patiently)
    marker = tmp_path / "victim"
    trainer = cartpole_trainer(functools.partial(failing_cartpole, os.getpid(), str(marker), "hang", 300),
                               num_train_envs=2, num_test_envs=1, episodes_per_train=10**6, test_freq=10**6,
                               pool={"backend": "ray", "actor_timeout": 3})
    with pytest.raises(ActorError, match=r"actor [01] has been in one round for more than 3 s \(actor_timeout\)"):
        trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False, callbacks=[within(60)])
    victim = int(marker.read_text())
    deadline = time.monotonic() + 15
    while os.path.exists(f"/proc/{victim}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{victim}")  # the stuck actor's worker was killed, not left sleeping


def test_shutdown_leaves_no_process_behind(local_ray):
    ray.shutdown()
    deadline = time.monotonic() + 15
    while _children() - local_ray and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _children() - local_ray == set()

