"""Training callbacks: checked before any work (a typo or a hook-less object is refused), fired in order."""
import pytest

from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.callbacks import HOOKS, CallbackList
from tests.trainers.test_trainer import CountingLearner


def cartpole_trainer():
    return DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=40, test_freq=2,
                                episodes_per_train=4, episodes_per_test=1, seed=0)


def train(trainer, callbacks):
    learner = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    return trainer.train([learner], learning_mask=[1], plot=False, progress=False, callbacks=callbacks)


class Misspelt:
    def on_test_end(self, trainer, result, episodes):
        pass

    def on_epoch_end(self, trainer):  # Keras' name; the trainer has no epochs
        pass


class NoHooks:
    def on_train_start(self):  # not one of the hooks either
        pass


class Quiet:
    on_policy = True  # a plain attribute named on_...: not a hook, not a typo


def test_a_misspelt_hook_is_refused_before_training_starts():
    trainer = cartpole_trainer()
    try:
        with pytest.raises(TypeError, match="Misspelt has on_epoch_end, which is no trainer hook") as info:
            train(trainer, [Misspelt()])
        assert all(hook in str(info.value) for hook in HOOKS)
        assert trainer._train_venv is None  # refused before any env was built
    finally:
        trainer.close()


def test_a_callback_without_hooks_or_with_a_non_callable_hook_is_refused():
    with pytest.raises(TypeError, match="NoHooks has on_train_start, which is no trainer hook"):
        CallbackList([NoHooks()])
    with pytest.raises(TypeError, match="callback Quiet has none of the trainer hooks"):
        CallbackList([Quiet()])
    with pytest.raises(TypeError, match="callback object has none of the trainer hooks"):
        CallbackList([object()])

    class NotAMethod:
        on_test_end = 3

    with pytest.raises(TypeError, match="on_test_end must be a method, got int"):
        CallbackList([NotAMethod()])
    with pytest.raises(TypeError, match="callbacks must be a list"):
        CallbackList(Misspelt())


def test_hooks_fire_in_order_with_the_trainer_and_may_extend_the_result():
    events = []

    class Record:
        def on_train_begin(self, trainer):
            events.append(("begin", trainer))

        def on_collect_end(self, trainer, stats, episodes):
            events.append(("collect", episodes))

        def on_update_end(self, trainer, metrics, episodes):
            events.append(("update", metrics["gradient_steps"]))

        def on_test_end(self, trainer, result, episodes):
            events.append(("test", episodes))

        def on_train_end(self, trainer, out):
            out["seen"] = len(events)

    trainer = cartpole_trainer()
    try:
        out = train(trainer, [Record()])
    finally:
        trainer.close()
    assert events[0] == ("begin", trainer)
    kinds = [e[0] for e in events[1:]]
    assert kinds[:2] == ["collect", "update"] and "test" in kinds
    # every chunk is one collect then one update; a test (when due) follows the update
    chunks = [k for k in kinds if k != "test"]
    assert chunks == ["collect", "update"] * (len(chunks) // 2)
    assert [e for e in events if e[0] == "test"][-1][1] == out["num_collected_episodes"]
    assert out["seen"] == len(events)
