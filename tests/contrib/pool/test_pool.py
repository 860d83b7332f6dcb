"""DecentralizedTrainer(actors=N): real envs, 2 actor processes, bounded runs, nothing left behind."""
import functools
import os
import shutil
import tempfile

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.contrib.pool.pool import ActorError
from marl_note.trainers import DecentralizedTrainer
from tests.contrib.pool.pool_envs import crashing_cartpole

torch = pytest.importorskip("torch")
from marl_note.agents.torch import DQN  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def cartpole_trainer(**kwargs):
    settings = dict(num_train_envs=4, num_test_envs=2, update_freq=64, episodes_per_train=12, test_freq=6,
                    episodes_per_test=2, seed=0, actors=2, sync_every=2)
    return DecentralizedTrainer("CartPole-v1", **{**settings, **kwargs})


def dqn(trainer, agent="agent_0", **kwargs):
    return DQN(trainer.observation_space(agent), trainer.action_space(agent), hidden_sizes=(16,),
               learning_starts=32, seed=0, **kwargs)


def test_every_actor_feeds_the_learner_and_acts_with_refreshed_weights(no_leftovers):
    trainer = cartpole_trainer()
    agent = dqn(trainer, num_steps=3)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    pool = stats["pool"]
    assert pool["actors"] == 2 and min(pool["transitions_per_actor"]) > 0
    assert agent.agent_steps == sum(pool["transitions_per_actor"])  # every drained row reached observe
    assert stats["num_collected_episodes"] >= 12 and agent.updates > 0
    assert pool["published_versions"] == [agent.updates] or agent.updates - pool["published_versions"][0] < 2
    assert pool["actor_frameworks"] == []  # the actors acted in numpy: no torch imported there
    lag = [v for _, v in trainer.run_state.series["policy_lag"].values()]  # recorded with every update
    assert lag and all(np.isfinite(lag)) and min(lag) >= 0 and np.isfinite(pool["mean_policy_lag"])
    assert len(trainer.history) >= 1  # periodic tests ran in the learner


def test_self_play_with_shard_options_evicts_and_balances(no_leftovers):
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, update_freq=20,
                                   episodes_per_train=16, test_freq=8, episodes_per_test=2, seed=0, actors=2,
                                   pool=dict(window_size=lambda n: n, random=True, num_store=2, clearing_freq=2,
                                             window_size_=5, shard_capacity=64))
    agent = dqn(trainer, "player_1")
    stats = trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False)
    pool = stats["pool"]
    assert pool["evicted"] > 0  # clearing_freq evicted undrained rows
    assert sum(pool["transitions_per_actor"]) == agent.agent_steps > 0
    assert stats["num_collected_episodes"] >= 16


def test_an_actor_crash_raises_its_traceback_and_cleans_up(no_leftovers):
    trainer = DecentralizedTrainer(functools.partial(crashing_cartpole, os.getpid()), num_train_envs=2,
                                   num_test_envs=1, update_freq=400, episodes_per_train=50, seed=0, actors=2,
                                   pool=dict(actor_timeout=30))
    with pytest.raises(ActorError, match="(?s)actor [01] failed:.*Traceback.*boom in the actor's env"):
        trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False)


def test_keyboard_interrupt_stops_the_actors_and_frees_the_shards(no_leftovers):
    from marl_note.trainers.callbacks import LambdaCallback

    def interrupt(*args):
        raise KeyboardInterrupt

    trainer = cartpole_trainer(episodes_per_train=1000)
    with pytest.raises(KeyboardInterrupt):
        trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False,
                      callbacks=[LambdaCallback(on_update_end=interrupt)])


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(processes=2), ValueError, "leave processes=None"),
    (dict(actors=None, pool=dict(window_size=3)), ValueError, "are options of the actor pool: pass source="),
    (dict(actors=8), ValueError, "exceeds num_train_envs=4"),
    (dict(pool=dict(clearing_freq=2)), ValueError, "clearing_freq needs window_size_"),
    (dict(pool=dict(learner_threads=0)), ValueError, "learner_threads must be 'auto', None or a positive"),
    (dict(pool=dict(learner_threads="all")), ValueError, "learner_threads must be 'auto', None or a positive"),
])
def test_refused_settings(kwargs, error, match, no_leftovers):
    with pytest.raises(error, match=match):
        trainer = cartpole_trainer(**kwargs)
        trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False)


def test_the_learner_leaves_the_actors_their_cores_and_gets_its_threads_back(no_leftovers):
    from marl_note.trainers.callbacks import LambdaCallback

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # as on a 2-core machine, where torch starts with 2 intra-op threads
    try:
        seen = []
        trainer = cartpole_trainer(episodes_per_train=6, pool=dict(learner_threads=1))
        stats = trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False,
                              callbacks=[LambdaCallback(on_update_end=lambda *a: seen.append(torch.get_num_threads()))])
        assert seen and set(seen) == {1} and stats["pool"]["learner_threads"] == 1
        assert torch.get_num_threads() == 2  # restored when the actors stopped
        trainer = cartpole_trainer(episodes_per_train=6, pool=dict(learner_threads=None))
        stats = trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False)
        assert stats["pool"]["learner_threads"] is None and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_auto_learner_threads_leave_one_core_per_local_actor(monkeypatch):
    from marl_note.contrib.pool import options

    monkeypatch.setattr(options, "usable_cores", lambda: 16)
    assert options.PoolOptions(actors=2).learner_thread_cap() == 14
    assert options.PoolOptions(actors=20).learner_thread_cap() == 1
    assert options.PoolOptions(actors=2, learner_threads=3).learner_thread_cap() == 3
    assert options.PoolOptions(actors=2, learner_threads=None).learner_thread_cap() is None
    if options.importlib.util.find_spec("ray") is not None:  # actors on a cluster use its cores, not ours
        remote = options.PoolOptions(actors=2, backend="ray", address="ray://head:10001")
        assert remote.learner_thread_cap() is None


def test_facade_maps_the_original_shard_options(no_leftovers):
    from marl_note.compat.torch import DQN

    agent = DQN(gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2), hidden_sizes=(16,),
                learning_starts=32, seed=0)
    stats = agent.train(6, env="CartPole-v1", pool_network=True, processes=2, window_size=100, num_store=1,
                        p=0, seed=0)
    assert stats["pool"]["actors"] == 2 and sum(stats["pool"]["transitions_per_actor"]) == agent.agent_steps > 0


@pytest.mark.parametrize("name", ["DDPG", "SAC"])
def test_box_action_agents_train_through_the_pool(name, no_leftovers):
    import marl_note.agents.torch as backend

    trainer = DecentralizedTrainer("Pendulum-v1", num_train_envs=2, num_test_envs=1, update_freq=100,
                                   episodes_per_train=2, test_freq=2, episodes_per_test=1, seed=0, actors=2)
    agent = getattr(backend, name)(trainer.observation_space("agent_0"), trainer.action_space("agent_0"),
                                   hidden_sizes=(16,), learning_starts=100, update_steps=4, seed=0)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert min(stats["pool"]["transitions_per_actor"]) > 0 and agent.updates > 0
    assert stats["pool"]["actor_frameworks"] == []


KILLED_LEARNER = """
import multiprocessing, sys
from marl_note.agents.torch import DQN
from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.callbacks import LambdaCallback
from tests.leftovers import Created

created = Created().start()  # the shared blocks this learner creates (not another job's)

def report(*args):
    print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
    print(" ".join(created.blocks()), flush=True)
    sys.stdin.readline()  # wait to be killed

trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=32,
                               episodes_per_train=1000, seed=0, actors=2)
agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(8,), seed=0)
trainer.train([agent], learning_mask=[1], plot=False, progress=False, callbacks=[LambdaCallback(on_collect_end=report)])
"""


def test_actors_exit_and_shards_are_freed_when_the_learner_is_killed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.leftovers import Created

    script = tmp_path / "learner.py"
    script.write_text(KILLED_LEARNER)
    # the killed learner cannot remove its multiprocessing folder (the forkserver's socket): give it one of
    # ours, short enough for a socket path, removed below
    own_tmp = tempfile.mkdtemp(prefix="mn-")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": own_tmp})
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        blocks = proc.stdout.readline().split()  # the learner's own blocks: another job's may come and go
        left = Created().left
        assert len(pids) == 2 and len(blocks) >= 3 and left(blocks) == blocks  # 2 actors, boards and shards
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 60  # a bounded wait (they stop within a second): room for a loaded machine
        while time.monotonic() < deadline and (any(os.path.exists(f"/proc/{p}") for p in pids) or left(blocks)):
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{p}") for p in pids)  # orphaned actors stop by themselves
        assert left(blocks) == []  # the resource tracker unlinked the boards and shards
    finally:
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(own_tmp, ignore_errors=True)


def test_the_learner_drains_a_full_shard_while_it_waits_for_reports(no_leftovers):
    # one actor fills its 500-row shard long before it has reported the 1500 env steps of a chunk:
    # the learner must drain while it waits, or both wait on each other until actor_timeout
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=1, num_test_envs=1, update_freq=1500,
                                   episodes_per_train=5, test_freq=5, episodes_per_test=1, seed=0, actors=1,
                                   pool=dict(num_store=1, shard_capacity=500, actor_timeout=15))
    agent = dqn(trainer)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert stats["num_collected_steps"] >= 1500 and stats["pool"]["evicted"] == 0


def test_the_actor_pool_plugs_in_as_the_trainers_experience_source(no_leftovers):
    from marl_note.contrib.pool import ActorPool
    from marl_note.trainers.source import ExperienceSource

    source = ActorPool(actors=2, sync_every=2)
    assert isinstance(source, ExperienceSource)
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=4, num_test_envs=2, update_freq=64,
                                   episodes_per_train=12, test_freq=6, episodes_per_test=2, seed=0, source=source)
    stats = trainer.train([dqn(trainer)], learning_mask=[1], plot=False, progress=False)
    assert stats["pool"]["actors"] == 2 and sum(stats["pool"]["transitions_per_actor"]) > 0
    assert stats["num_collected_episodes"] >= 12 and source.pool is None  # closed at the end of the run
    with pytest.raises(ValueError, match="leave processes=None"):
        DecentralizedTrainer("CartPole-v1", processes=2, source=ActorPool(actors=2))


def test_release_0_1_pool_arguments_build_the_same_source_and_warn():
    from marl_note.contrib.pool import ActorPool

    with pytest.warns(DeprecationWarning, match=r"source=marl_note.contrib.pool.ActorPool\(actors=N"):
        trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=4, actors=2, sync_every=3,
                                       pool=dict(window_size=10))
    assert isinstance(trainer.source, ActorPool)
    assert (trainer.source.options.actors, trainer.source.options.sync_every,
            trainer.source.options.window_size) == (2, 3, 10)
    with pytest.raises(ValueError, match="not both"):
        DecentralizedTrainer("CartPole-v1", actors=2, source=ActorPool(actors=2))
