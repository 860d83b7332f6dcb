"""numpy's BLAS threads: a run sets them (one by default), reports them and puts them back.

threadpoolctl reads the count from the loaded OpenBLAS itself, so these checks see what numpy's
products will use, not a variable of ours.
"""
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from marl_note.agents.blas import blas_threads, set_blas_threads
from marl_note.agents.threads import limit_framework_threads, use_threads
from marl_note.trainers import DecentralizedTrainer

pytestmark = pytest.mark.skipif(not any(p["user_api"] == "blas" for p in threadpool_info()),
                                reason="numpy was built without a BLAS that threadpoolctl controls")


def test_set_blas_threads_changes_the_count_and_restores_it():
    with threadpool_limits(limits=3, user_api="blas"):
        assert blas_threads() == 3
        restore = set_blas_threads(1)
        assert blas_threads() == 1
        restore()
        assert blas_threads() == 3


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "1"])
def test_a_bad_count_is_refused(bad):
    with pytest.raises(ValueError, match="BLAS threads must be a positive integer"):
        set_blas_threads(bad)


def test_use_threads_reports_numpy_and_limit_framework_threads_caps_it():
    with threadpool_limits(limits=2, user_api="blas"):
        effect, restore = use_threads(1)
        assert effect["numpy"] == 1 and blas_threads() == 1
        restore()
        assert blas_threads() == 2
        effect, _ = use_threads(None)  # reported, not changed
        assert effect["numpy"] == 2
        restore = limit_framework_threads(1)
        assert blas_threads() == 1
        restore()
        assert blas_threads() == 2


def test_a_trainer_runs_numpy_on_one_thread_and_restores_the_count():
    from marl_note.agents.numpy import DQN

    seen = []

    class BlasSeen:
        def on_collect_end(self, trainer, stats, episodes):
            seen.append(blas_threads())

    with threadpool_limits(limits=2, user_api="blas"):
        trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=20,
                                       episodes_per_train=2, test_freq=2, episodes_per_test=1, seed=0)
        dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=[8], seed=0)
        try:
            trainer.train([dqn], learning_mask=[1], plot=False, progress=False, callbacks=[BlasSeen()])
        finally:
            trainer.close()
        assert seen and set(seen) == {1} and trainer.threads_in_effect["numpy"] == 1
        assert blas_threads() == 2

