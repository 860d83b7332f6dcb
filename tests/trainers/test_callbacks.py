"""Training callbacks: checked before any work (a typo or a hook-less object is refused), fired in order."""
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.trainers import DecentralizedTrainer
from marl_note.trainers.callbacks import HOOKS, CallbackList, EarlyStopping, EpisodeEvents, LambdaCallback
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


# ---------------------------------------------------------------------------- Keras-style events
class Recorder:
    """Every episode and batch event, as fired."""

    def __init__(self):
        self.begins, self.ends, self.batches = [], [], []

    def on_episode_begin(self, trainer, episode, logs):
        self.begins.append((episode, logs["env_index"]))

    def on_episode_end(self, trainer, episode, logs):
        self.ends.append((episode, logs))

    def on_batch_begin(self, trainer, batch, logs):
        self.batches.append(("begin", batch, logs))

    def on_batch_end(self, trainer, batch, logs):
        self.batches.append(("end", batch, logs))


def test_episode_events_report_every_training_episode_with_its_returns():
    trainer = cartpole_trainer()
    record = Recorder()
    try:
        out = train(trainer, [record])
    finally:
        trainer.close()
    n = out["num_collected_episodes"]
    assert [e for e, _ in record.ends] == list(range(n))  # every finished training episode, counted in order
    for _, logs in record.ends:
        # CartPole pays 1 per step: the return is the length
        assert logs["returns"].shape == (1,) and logs["returns"][0] == logs["length"] > 0
        assert logs["reward"] == logs["length"] and logs["env_index"] in (0, 1) and logs["tag"] is None
    assert sum(logs["length"] for _, logs in record.ends) <= out["num_collected_steps"]
    # both envs start an episode at reset, then a new one after each end
    assert [e for e, _ in record.begins] == list(range(len(record.begins)))
    assert len(record.begins) == n + 2 and sorted(i for _, i in record.begins[:2]) == [0, 1]
    for k, (_, logs) in enumerate(record.ends):  # each end's env started its next episode right after it
        assert record.begins[k + 2][1] == logs["env_index"]


def test_episode_events_on_a_turn_based_game_give_each_seat_its_return():
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=1, update_freq=30,
                                   test_freq=4, episodes_per_train=6, episodes_per_test=2, seed=0)
    record = Recorder()
    try:
        a = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
        b = CountingLearner(trainer.action_space("player_2"), trainer.observation_space("player_2"), seed=1)
        out = trainer.train([a, b], learning_mask=[1, 1], plot=False, progress=False, callbacks=[record])
    finally:
        trainer.close()
    assert len(record.ends) == out["num_collected_episodes"]
    for _, logs in record.ends:
        assert logs["returns"].shape == (2,) and logs["returns"].sum() == 0  # zero-sum: win/loss or draw
        assert 5 <= logs["length"] <= 9
    # two learners: each update round is learner 0 then learner 1, each wrapped in begin/end
    kinds = [(kind, logs.get("learner")) for kind, _, logs in record.batches]
    assert kinds == [("begin", 0), ("end", None), ("begin", 1), ("end", None)] * (a.update_calls)
    assert a.update_calls == b.update_calls > 0


def test_batch_events_wrap_each_update_with_its_metrics():
    trainer = cartpole_trainer()
    record = Recorder()
    try:
        learner = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
        out = trainer.train([learner], learning_mask=[1], plot=False, progress=False, callbacks=[record])
    finally:
        trainer.close()
    begins = [(b, logs) for kind, b, logs in record.batches if kind == "begin"]
    ends = [(b, logs) for kind, b, logs in record.batches if kind == "end"]
    assert [b for b, _ in begins] == [b for b, _ in ends] == list(range(learner.update_calls))
    assert all(logs == {"gradient_steps": 1} for _, logs in ends)  # the update's own metrics
    assert [logs["env_steps"] for _, logs in begins] == [40 * (k + 1) for k in range(len(begins))]
    assert begins[-1][1]["episodes"] == out["num_collected_episodes"]


def test_stop_training_set_by_a_callback_ends_after_the_current_chunk_and_resets_each_train():
    seen = []

    class Watch:
        def on_train_begin(self, trainer):
            seen.append(trainer.stop_training)

    class StopAfterFirstChunk(Watch):
        def on_collect_end(self, trainer, stats, episodes):
            trainer.stop_training = True

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=100,
                                   test_freq=1000, episodes_per_train=1000, episodes_per_test=1, seed=0)
    try:
        out = train(trainer, [StopAfterFirstChunk()])
        assert out["stopped_by_stop_training"] and not out["stopped_by_stop_fn"]
        assert out["num_collected_steps"] == 100  # one chunk
        # the chunk that stopped had no test due (test_freq=1000): one ran, so the run ends measured
        assert [e for e, _ in out["test_history"]] == [out["num_collected_episodes"]]
        assert trainer.stop_training
        # the next train() starts with it reset; a hook may set it too (train_fn runs before each chunk)
        trainer.train_fn = lambda episodes, steps: setattr(trainer, "stop_training", steps >= 100)
        again = train(trainer, [Watch()])
    finally:
        trainer.close()
    assert seen == [False, False]
    assert again["stopped_by_stop_training"] and again["num_collected_steps"] == 200
    # nobody sets it: the run spends its budget and says so
    trainer = cartpole_trainer()
    try:
        out = train(trainer, [])
    finally:
        trainer.close()
    assert not out["stopped_by_stop_training"] and out["num_collected_episodes"] >= 4


# ---------------------------------------------------------------------------- LambdaCallback
def test_lambda_callback_calls_keras_style_functions_without_the_trainer():
    ends, tests, trained = [], [], []
    cb = LambdaCallback(on_episode_end=lambda episode, logs: ends.append(episode),
                        on_test_end=lambda result, episodes: tests.append(result["reward"]),
                        on_train_begin=lambda: trained.append("begin"),
                        on_train_end=lambda stats: stats.update(lambda_saw=len(ends)))
    trainer = cartpole_trainer()
    try:
        out = train(trainer, [cb])
    finally:
        trainer.close()
    assert cb.trainer is trainer and trained == ["begin"]
    assert ends == list(range(out["num_collected_episodes"])) and out["lambda_saw"] == len(ends)
    assert tests == [m for _, m in out["test_history"]]


def test_lambda_callback_can_stop_training_through_its_trainer():
    cb = LambdaCallback(on_episode_end=lambda episode, logs: setattr(cb.trainer, "stop_training", True))
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=100,
                                   test_freq=1000, episodes_per_train=1000, episodes_per_test=1, seed=0)
    try:
        out = train(trainer, [cb])
    finally:
        trainer.close()
    assert out["stopped_by_stop_training"] and out["num_collected_steps"] == 100


@pytest.mark.parametrize("kwargs, error, match", [
    ({}, TypeError, "needs at least one function"),
    ({"on_epoch_end": lambda epoch, logs: None}, TypeError,
     "on_epoch_end, which is no trainer hook \\(the trainer has no epochs: on_episode_end"),
    ({"on_episode_end": lambda logs: None}, TypeError,
     "on_episode_end is called with \\(episode, logs\\); the function takes \\(logs\\)"),
    ({"on_train_begin": lambda logs: None}, TypeError, "on_train_begin is called with \\(\\)"),
    ({"on_test_end": 3}, TypeError, "on_test_end must be a function, got int"),
])
def test_lambda_callback_refuses_what_would_fail_later(kwargs, error, match):
    with pytest.raises(error, match=match):
        LambdaCallback(**kwargs)


def test_only_callbacks_with_episode_events_turn_on_the_collectors_episode_calls():
    quiet = CallbackList([LambdaCallback(on_test_end=lambda result, episodes: None), EarlyStopping(patience=3)])
    assert EpisodeEvents(quiet, None, 0, float).hooks() == {"episode_begin": None, "episode_end": None}
    listening = CallbackList([EarlyStopping(trial_count=2, criterion=1.0)])
    hooks = EpisodeEvents(listening, None, 0, float).hooks()
    assert hooks["episode_begin"] is None and hooks["episode_end"] is not None


# ---------------------------------------------------------------------------- EarlyStopping
def test_early_stopping_on_the_mean_training_reward_of_the_last_trial_count_episodes():
    rewards = []
    recorder = LambdaCallback(on_episode_end=lambda episode, logs: rewards.append(logs["reward"]))
    stop = EarlyStopping(trial_count=3, criterion=30.0)
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, update_freq=40, test_freq=1000,
                                   episodes_per_train=400, episodes_per_test=1, seed=0)
    try:
        out = train(trainer, [recorder, stop])
    finally:
        trainer.close()
    means = np.convolve(rewards, np.ones(3) / 3, mode="valid")  # means[k]: episodes k .. k+2
    first = int(np.flatnonzero(means >= 30.0)[0]) + 3  # episodes finished when the mean first reached 30
    assert out["early_stopping"]["stopped"] and out["early_stopping"]["episode"] == first
    assert "mean reward of the last 3 training episodes" in out["early_stopping"]["reason"]
    assert out["stopped_by_stop_training"] and first <= out["num_collected_episodes"] < 400
    assert out["num_collected_episodes"] - first < 40  # ended with the chunk it fired in
    assert len(out["test_history"]) == 1  # the stopping chunk was tested


def test_early_stopping_patience_counts_tests_without_improvement_beside_stop_fn():
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=1, update_freq=20, test_freq=2,
                                   episodes_per_train=200, episodes_per_test=2, seed=0,
                                   reward_metric=lambda rewards: 1.0)  # flat: only the first test improves
    try:
        a = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
        stats = trainer.train([a, a], learning_mask=[1, 1], plot=False, progress=False,
                              callbacks=[EarlyStopping(patience=2)])
        assert stats["early_stopping"]["stopped"] and len(stats["test_history"]) == 3  # best, then 2 without
        assert "in 2 tests (patience 2)" in stats["early_stopping"]["reason"]
        assert stats["early_stopping"]["episode"] == stats["test_history"][-1][0]
        # the trainer's own stop_fn still works beside it, and stops first here
        trainer.stop_fn = lambda metric, episodes: True
        stats = trainer.train([a, a], learning_mask=[1, 1], plot=False, progress=False,
                              callbacks=[EarlyStopping(patience=2)])
    finally:
        trainer.close()
    assert stats["stopped_by_stop_fn"] and not stats["early_stopping"]["stopped"]
    assert len(stats["test_history"]) == 1 and not stats["stopped_by_stop_training"]


@pytest.mark.parametrize("kwargs, error, match", [
    ({}, ValueError, "EarlyStopping needs trial_count \\+ criterion"),
    ({"trial_count": 10}, ValueError, "trial_count=10 without criterion stops nothing"),
    ({"trial_count": 10, "patience": 3}, ValueError, "trial_count=10 without criterion stops nothing"),
    ({"criterion": 200}, ValueError, "criterion needs trial_count"),
    ({"trial_count": 0, "criterion": 1}, ValueError, "trial_count must be a positive integer"),
    ({"trial_count": 2.5, "criterion": 1}, ValueError, "trial_count must be a positive integer"),
    ({"trial_count": True, "criterion": 1}, ValueError, "trial_count must be a positive integer"),
    ({"trial_count": 3, "criterion": float("nan")}, ValueError, "criterion must be a finite number"),
    ({"trial_count": 3, "criterion": "200"}, ValueError, "criterion must be a finite number"),
    ({"patience": 0}, ValueError, "patience must be a positive integer"),
    ({"patience": 2, "min_delta": -0.1}, ValueError, "min_delta must be a finite number >= 0"),
])
def test_early_stopping_refuses_bad_values_before_training(kwargs, error, match):
    with pytest.raises(error, match=match):
        EarlyStopping(**kwargs)
