"""Run settings have one owner: callbacks request changes, the run loop applies and logs them once."""
import gymnasium as gym
import pytest

from marl_note.agents.torch import DQN
from marl_note.trainers import DecentralizedTrainer


def _trainer(**kw):
    args = {"num_train_envs": 2, "num_test_envs": 1, "batch_size": 16, "update_freq": 40, "test_freq": 1000,
            "episodes_per_train": 12, "episodes_per_test": 1, "seed": 0, **kw}
    return DecentralizedTrainer("CartPole-v1", **args)


def _dqn():
    env = gym.make("CartPole-v1")
    return DQN(env.observation_space, env.action_space, hidden_sizes=(16,), learning_starts=16, seed=0)


class Watch:
    """Requests changes after the second update round and records what each round ran with."""

    def __init__(self):
        self.rounds = []  # (batch_size, update_freq, lr, eps) seen when each update starts
        self.chunks = []  # env steps of each collection chunk
        self.announced = []  # the settings/... metrics each update's callbacks saw

    def on_collect_end(self, trainer, stats, episodes):
        self.chunks.append(stats.env_steps)

    def on_batch_begin(self, trainer, batch, logs):
        agent = trainer.learners[0]
        self.rounds.append((trainer.batch_size, trainer.update_freq, agent.learning_rates()["optimizer"],
                            agent.hyperparameters()["eps"]))

    def on_batch_end(self, trainer, batch, metrics):
        self.announced.append({k: v for k, v in metrics.items() if k.startswith("settings/")})
        if batch == 1:
            trainer.request(batch_size=32, update_freq=60)
            trainer.request(learning_rate=5e-4, hyperparameters={"eps": 0.25})
            trainer.request(batch_size=48)  # the last request of a setting wins


def test_a_request_is_applied_at_the_next_round_and_logged_once():
    trainer, agent, watch = _trainer(), _dqn(), Watch()
    stats = trainer.train([agent], learning_mask=[1], callbacks=[watch], plot=False, progress=False)
    assert len(watch.rounds) >= 4
    assert watch.rounds[0][:2] == watch.rounds[1][:2] == (16, 40)  # requested during round 1 ...
    assert watch.rounds[2] == (48, 60, 5e-4, 0.25)  # ... in force from round 2 on
    assert watch.rounds[-1] == (48, 60, 5e-4, 0.25)
    assert watch.chunks[2] == 40 and watch.chunks[3] == 60  # the third chunk was collected before the change
    assert trainer.batch_size == 48 and agent.learning_rates() == {"optimizer": 5e-4}
    changes = {c["setting"]: c for c in stats["setting_changes"]}
    assert list(changes) == ["batch_size", "update_freq", "lr.optimizer", "eps"]  # each change once
    assert (changes["batch_size"]["old"], changes["batch_size"]["new"]) == (16, 48)
    assert changes["eps"]["new"] == 0.25 and changes["batch_size"]["learner"] is None
    assert changes["lr.optimizer"]["learner"] == 0
    # the callbacks saw the changes with the next update, once
    assert [a for a in watch.announced if a] == [{"settings/batch_size": 48.0, "settings/update_freq": 60.0,
                                                  "settings/lr.optimizer": 5e-4, "settings/eps": 0.25}]
    assert watch.announced[2] and not any(watch.announced[:2] + watch.announced[3:])
    series = trainer.run_state.series
    assert series["settings/batch_size"].values() == [(changes["batch_size"]["episodes"], 48.0)]


def test_writing_batch_size_during_a_run_is_a_request_and_outside_a_run_is_immediate():
    trainer, agent = _trainer(episodes_per_train=6), _dqn()
    seen = []

    class Write:
        def on_batch_begin(self, trainer, batch, logs):
            seen.append(trainer.batch_size)
            if batch == 0:
                trainer.batch_size = 24
                assert trainer.batch_size == 16  # pending until the next round

    stats = trainer.train([agent], learning_mask=[1], callbacks=[Write()], plot=False, progress=False)
    assert seen[:2] == [16, 24] and stats["setting_changes"][0]["setting"] == "batch_size"
    trainer.batch_size = 8
    assert trainer.batch_size == 8
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        trainer.batch_size = 0
    with pytest.raises(RuntimeError, match="run in progress"):
        trainer.request(batch_size=32)


def test_a_request_of_on_train_begin_sets_the_first_chunk():
    trainer, agent = _trainer(episodes_per_train=4), _dqn()
    chunks = []

    class Begin:
        def on_train_begin(self, trainer):
            trainer.request(update_freq=10)

        def on_collect_end(self, trainer, stats, episodes):
            chunks.append(stats.env_steps)

    trainer.train([agent], learning_mask=[1], callbacks=[Begin()], plot=False, progress=False)
    assert chunks and all(steps < 40 for steps in chunks) and trainer.update_freq == 10


@pytest.mark.parametrize("request_, error, match", [
    ({"hyperparameters": {"epsilon": 0.1}}, KeyError, "hyperparameter 'epsilon' of DQN.*'eps'"),
    ({"learning_rate": {"critic": 1e-3}}, KeyError, "optimizer 'critic'"),
    ({"learning_rate": -1.0}, ValueError, "learning_rate of optimizer must be a positive"),
    ({"hyperparameters": {"eps": "high"}}, TypeError, "hyperparameter eps must be a number"),
    ({"hyperparameters": {"eps": float("nan")}}, ValueError, "hyperparameter eps must be finite"),
    ({"batch_size": 0}, ValueError, "batch_size must be a positive integer"),
    ({"update_freq": 2.5}, ValueError, "update_freq must be a positive integer"),
    ({"batch_size": 32, "agent": "not a learner"}, ValueError, "agent= must be one of this run's learners"),
])
def test_a_bad_request_is_refused_naming_the_setting_and_nothing_is_queued(request_, error, match):
    trainer, agent = _trainer(episodes_per_train=2), _dqn()
    caught = []

    class Ask:
        def on_train_begin(self, trainer):
            with pytest.raises(error, match=match) as info:
                trainer.request(**request_)
            caught.append(info.value)

    stats = trainer.train([agent], learning_mask=[1], callbacks=[Ask()], plot=False, progress=False)
    assert caught and stats["setting_changes"] == []  # the good part of a bad request was not queued either
    assert trainer.batch_size == 16 and agent.learning_rates() == {"optimizer": 1e-3}


def test_a_batch_that_does_not_split_over_the_ranks_is_refused_at_request_time():
    from marl_note.distributed import DistributedContext

    class Loopback:
        def broadcast(self, obj, src=0):
            return obj

        def barrier(self):
            pass

        def prepare(self, agent):
            pass

    trainer = _trainer(distributed=DistributedContext(rank=0, world_size=2, collective=Loopback()))
    trainer.settings.start([_dqn()], [""])
    with pytest.raises(ValueError, match="batch_size=33 .* must be a multiple of world_size=2"):
        trainer.request(batch_size=33)
    trainer.request(batch_size=34)
    assert trainer.settings.pending() == [(None, "batch_size", 34.0)]
