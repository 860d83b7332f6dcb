"""ParallelFinder: candidates trained in spawned worker processes on a real env, ranked with best
reward, final loss and time; bad candidates refused before any process starts; no worker left."""
import multiprocessing
import subprocess
import sys
import time

import pytest

from marl_note.contrib.finders.parallel import ParallelFinder

pytest.importorskip("torch")


def dqn_factory(trainer, lr=1e-3):
    from marl_note.agents.torch import DQN

    return DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
               learning_starts=32, lr=lr, seed=0)


def test_two_candidates_train_in_parallel_workers_and_are_ranked():
    finder = ParallelFinder(dqn_factory, [{"lr": 1e-3}, {"lr": 1e-2}], processes=2, timeout=300)
    result = finder.find("CartPole-v1", metric="loss", episodes_per_train=6, update_freq=16, episodes_per_test=2)
    assert sorted(row["index"] for row in result.rows) == [0, 1]
    for row in result.rows:
        assert row["time_s"] > 0 and row["episodes"] >= 6 and row["best_reward"] > 0
        assert row["final_loss"] == row["score"]  # metric="loss": the score is the final loss
    assert result.rows[0]["score"] <= result.rows[1]["score"]  # lower loss first
    assert not multiprocessing.active_children()


def test_bad_candidates_and_arguments_are_refused_in_the_parent():
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['learning_rate'\]"):
        ParallelFinder(dqn_factory, [{"learning_rate": 1e-3}])
    with pytest.raises(TypeError, match="takes a factory"):
        ParallelFinder("CartPole-v1", [{}])
    with pytest.raises(ValueError, match="metric"):
        ParallelFinder(dqn_factory, [{}]).find("CartPole-v1", metric="accuracy")
    assert not multiprocessing.active_children()


def dying_factory(trainer, lr=1e-3):
    import os

    os._exit(3)  # the worker dies as if killed: no exception reaches the parent by the normal path


def test_a_dying_worker_fails_the_search_at_once_instead_of_hanging():
    finder = ParallelFinder(dying_factory, [{"lr": 1e-3}], processes=1, timeout=600)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker of candidate 0 .* died"):
        finder.find("CartPole-v1", episodes_per_train=2, update_freq=16, episodes_per_test=1)
    assert time.monotonic() - start < 120  # not the 600 s timeout (a multiprocessing.Pool respawned it forever)
    assert not multiprocessing.active_children()


SCRIPT_WITHOUT_MAIN_GUARD = '''
from marl_note.agents import RandomAgent
from marl_note.contrib.finders.parallel import ParallelFinder

def factory(trainer, seed=0):  # defined in the user's script, which has no main guard
    class Learner(RandomAgent):
        def observe(self, transitions):
            pass

        def update(self, batch_size):
            return {"loss": 0.5}

    return Learner(trainer.action_space("agent_0"), seed=seed)

result = ParallelFinder(factory, [{"seed": 0}, {"seed": 1}], processes=2, timeout=200).find(
    "CartPole-v1", metric="loss", episodes_per_train=2, update_freq=16, episodes_per_test=1)
print("ranked", len(result.rows))
'''


def test_a_script_without_a_main_guard_is_not_rerun_by_the_workers(tmp_path):
    script = tmp_path / "finder_script.py"
    script.write_text(SCRIPT_WITHOUT_MAIN_GUARD)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ranked") == 1 and "MissingMainGuardError" not in proc.stderr
