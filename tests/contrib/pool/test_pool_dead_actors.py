"""A dead or stuck actor is never silent: the run raises ActorError, the other actors stop, nothing is left.

One of two actors is killed (SIGKILL), exits from inside its env (``os._exit(3)``) or hangs in its
env, well after the first chunk, while the other actor keeps reporting rounds.
"""
import functools
import multiprocessing
import os
import signal
import time

import pytest

from marl_note.contrib.pool.pool import ActorError
from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.callbacks import LambdaCallback
from tests.contrib.pool.pool_envs import failing_cartpole

torch = pytest.importorskip("torch")
from marl_note.agents.torch import DQN  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def no_leftovers(no_leftovers):
    """No child process and no shared-memory block or semaphore of the run is left after its error
    (tests/conftest.py: only the names this process created are checked), and the run did create them."""
    yield no_leftovers
    assert no_leftovers.names


def within(seconds):
    """A callback that ends a run still going ``seconds`` after it started (on the unfixed code the run goes
    on without the failed actor; the budget below is out of reach)."""
    deadline = time.monotonic() + seconds

    def check(stats, episodes):
        if time.monotonic() > deadline:
            raise AssertionError(f"the run went on for {seconds} s after an actor failed")

    return LambdaCallback(on_collect_end=check)


def train(env, actor_timeout=30.0, callbacks=(), episodes=10**6):
    """CartPole over 2 envs, one per actor; the default budget is out of reach: only an error ends the run."""
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, update_freq=64, episodes_per_train=episodes,
                                   test_freq=10**6, episodes_per_test=1, seed=0, actors=2,
                                   pool=dict(actor_timeout=actor_timeout))
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
                learning_starts=32, seed=0)
    return trainer.train([agent], learning_mask=[1], plot=False, progress=False,
                         callbacks=[*callbacks, within(100)])  # (pytest-timeout: 120 s; room for a loaded machine)


def failing_env(tmp_path, failure):
    """An env factory whose one env in one actor fails on its 300th step (after the first chunk), and
    a function returning that actor's pid."""
    marker = tmp_path / "victim"
    env = functools.partial(failing_cartpole, os.getpid(), str(marker), failure, 300)
    return env, lambda: int(marker.read_text())


def test_a_killed_actor_raises_its_exit_code(no_leftovers):
    killed = []

    def kill_one(stats, episodes):
        if episodes >= 20 and not killed:  # after the first chunks: both actors have reported
            killed.append(multiprocessing.active_children()[0].pid)
            os.kill(killed[0], signal.SIGKILL)

    with pytest.raises(ActorError, match=r"actor [01] \(pid \d+\) died with exit code -9 \(SIGKILL\)") as err:
        train("CartPole-v1", callbacks=[LambdaCallback(on_collect_end=kill_one)])
    assert f"(pid {killed[0]})" in str(err.value)


def test_an_env_exiting_its_actor_raises_the_exit_code_and_stderr_tail(tmp_path, no_leftovers):
    env, victim = failing_env(tmp_path, "exit")
    with pytest.raises(ActorError, match=r"(?s)actor [01] \(pid \d+\) died with exit code 3\b.*"
                                         r"the env of this actor calls os\._exit\(3\)") as err:
        train(env)
    assert f"(pid {victim()})" in str(err.value)


def test_an_env_hanging_in_one_actor_raises_after_actor_timeout(tmp_path, no_leftovers):
    env, victim = failing_env(tmp_path, "hang")
    with pytest.raises(ActorError, match=r"actor [01] \(pid \d+\) has been silent for 3 s \(actor_timeout\)") as err:
        train(env, actor_timeout=3)
    assert f"(pid {victim()})" in str(err.value)
    assert not os.path.exists(f"/proc/{victim()}")  # the stuck actor was ended, not left sleeping


def test_a_learner_slower_than_actor_timeout_is_no_actor_failure(no_leftovers):
    # the actors wait for the learner (their rounds ahead are done) while it spends 3 s in one update:
    # waiting is not being stuck, so actor_timeout=2 does not fire
    slept = []

    def slow_update(*args):
        if not slept:
            slept.append(time.sleep(3))

    stats = train("CartPole-v1", actor_timeout=2, episodes=30,
                  callbacks=[LambdaCallback(on_update_end=slow_update)])
    assert slept and stats["num_collected_episodes"] >= 30 and min(stats["pool"]["transitions_per_actor"]) > 0
