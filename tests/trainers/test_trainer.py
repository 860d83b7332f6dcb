import time

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.trainers import DecentralizedTrainer
from tests.scripted_envs import NimEnv


class CountingLearner(RandomAgent):
    """A random player that implements the learning contract and records what it is given."""

    def __init__(self, action_space, observation_space, seed=0):
        super().__init__(action_space, observation_space, seed=seed)
        self.stored = 0
        self.update_calls = 0
        self.batch_sizes = set()

    def observe(self, transitions):
        self.stored += len(transitions)

    def update(self, batch_size):
        self.update_calls += 1
        self.batch_sizes.add(batch_size)
        return {"gradient_steps": 1}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def small_trainer(env=tictactoe_v3.env, **kw):
    args = dict(num_train_envs=4, num_test_envs=2, update_freq=20, test_freq=10, episodes_per_train=30,
                episodes_per_test=4, seed=0)
    args.update(kw)
    return DecentralizedTrainer(env, **args)


def learner(trainer, seat="player_1"):
    return CountingLearner(trainer.action_space(seat), trainer.observation_space(seat))


def test_hooks_fire_in_order_with_the_documented_arguments():
    calls = []
    trainer = small_trainer(
        train_fn=lambda eps, steps: calls.append(("train", eps, steps)),
        test_fn=lambda eps, steps: calls.append(("test", eps, steps)),
        save_best_fn=lambda eps: calls.append(("best", eps)),
        save_last_fn=lambda: calls.append(("last",)),
        reward_metric=lambda r: float(r.shape[0] + r.shape[1]),  # 4 episodes x 2 seats -> 6.0, constant
    )
    agent = learner(trainer)
    # baseline=None: the tests play the learner against itself, so reward_metric sees 4 x 2 returns
    stats = trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False, baseline=None)
    kinds = [c[0] for c in calls]
    assert kinds[0] == "train" and kinds[-1] == "last" and kinds.count("last") == 1
    assert kinds.count("best") == 1  # constant metric: only the first test is a new best
    assert kinds.index("best") == kinds.index("test") + 1
    train_calls = [c for c in calls if c[0] == "train"]
    assert train_calls[0][1:] == (0, 0)
    assert all(b[1] >= a[1] and b[2] > a[2] for a, b in zip(train_calls, train_calls[1:]))
    assert stats["num_collected_episodes"] >= 30 and stats["best_reward"] == 6.0
    assert stats["num_gradient_steps"] == agent.update_calls == len(train_calls)
    assert agent.batch_sizes == {64}
    for key in ("reward_metric_stats", "num_collected_steps", "num_collected_episodes", "num_gradient_steps",
                "training_time", "best_reward"):
        assert key in stats


class Clock:
    """A perf_counter that moves only when a test's phase says it spent time: the time split is checked
    exactly, whatever the machine's load (a real sleep's overshoot and the envs' own time are not counted)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def spend(self, seconds):
        self.now += seconds


def test_time_split_puts_each_phase_where_it_was_spent(monkeypatch):
    # train_fn runs in the collect phase, update() in the update phase, test_fn in the test phase
    clock, tests, trains = Clock(), [], []

    class SlowLearner(CountingLearner):
        def update(self, batch_size):
            clock.spend(0.02)
            return super().update(batch_size)

    trainer = small_trainer(train_fn=lambda eps, steps: (trains.append(eps), clock.spend(0.01)),
                            test_fn=lambda eps, steps: (tests.append(eps), clock.spend(0.05)))
    agent = SlowLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    monkeypatch.setattr(time, "perf_counter", clock)
    stats = trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False)
    split = stats["time_split"]
    assert set(split) == {"collect_s", "update_s", "test_s"}
    assert agent.update_calls > 0 and len(tests) > 1 and len(trains) > 1
    assert split["update_s"] == pytest.approx(0.02 * agent.update_calls, abs=1e-3)
    assert split["test_s"] == pytest.approx(0.05 * len(tests), abs=1e-3)
    assert split["collect_s"] == pytest.approx(0.01 * len(trains), abs=1e-3)
    assert sum(split.values()) == pytest.approx(stats["training_time"], abs=2e-3)


def test_update_freq_counts_env_steps_and_shared_agent_stores_each_seat_once():
    trainer = small_trainer(update_freq=40, episodes_per_train=20)
    agent = learner(trainer)
    stats = trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False)
    # 4 envs step together: each chunk is ceil(40 / 4) = 10 vector steps = 40 env steps
    assert stats["num_collected_steps"] == 40 * agent.update_calls
    # turn-based: one agent step per env step; every closed transition is stored exactly once
    assert stats["num_collected_agent_steps"] == stats["num_collected_steps"]
    assert stats["num_collected_steps"] - 4 * 2 <= agent.stored <= stats["num_collected_steps"]


def test_stop_fn_ends_training_early_and_learning_mask_limits_storage():
    trainer = small_trainer(stop_fn=lambda metric, eps: eps >= 10, episodes_per_train=1000)
    a, b = learner(trainer), learner(trainer, "player_2")
    stats = trainer.train([a, b], learning_mask=[1, 0], plot=False, progress=False)
    assert stats["stopped_by_stop_fn"] and stats["num_collected_episodes"] < 100
    assert a.stored > 0 and b.stored == 0 and b.update_calls == 0


def test_test_returns_per_seat_returns_and_counts():
    trainer = small_trainer()
    r1, r2 = (RandomAgent(trainer.action_space(a), seed=i) for i, a in enumerate(trainer.possible_agents))
    res = trainer.test([r1, r2], episodes=7)
    assert res["rewards"].shape == (7, 2) and res["num_collected_episodes"] == 7
    assert np.all(res["rewards"].sum(axis=1) == 0)
    assert 5 <= res["mean_num_steps"] <= 9 and res["num_collected_steps"] == pytest.approx(7 * res["mean_num_steps"])


def test_agents_as_dict_and_seeding_reproduces_a_run():
    def run():
        trainer = small_trainer(seed=3)
        agent = learner(trainer)
        stats = trainer.train({"player_1": agent, "player_2": agent}, learning_mask={"player_1": 1, "player_2": 1},
                              plot=False, progress=False)
        return stats["test_history"], stats["num_collected_steps"]

    assert run() == run()


def test_plot_is_written_where_it_says(tmp_path):
    trainer = small_trainer(plot_path=str(tmp_path / "reward.png"))
    agent = learner(trainer)
    stats = trainer.train([agent, agent], learning_mask=[1, 1], progress=False)
    assert stats["plot_path"] == str(tmp_path / "reward.png")
    assert (tmp_path / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("kwargs, match", [
    (dict(learning_mask=[1]), "learning_mask has 1 entries"),
    (dict(learning_mask=[1, 0, 1]), "learning_mask has 3 entries"),
    (dict(learning_mask=[0, 0]), "no learning seat"),
    (dict(learning_mask=[1, 1], exploration_mask=[1]), "exploration_mask has 1 entries"),
    (dict(learning_mask=[2, 1]), "0/1"),
])
def test_bad_masks_raise_before_any_work(kwargs, match):
    trainer = small_trainer()
    agent = learner(trainer)
    with pytest.raises(ValueError, match=match):
        trainer.train([agent, agent], plot=False, progress=False, **kwargs)
    assert agent.stored == 0 and trainer._train_venv is None


def test_bad_agents_raise_before_any_work():
    trainer = small_trainer()
    agent = learner(trainer)
    with pytest.raises(ValueError, match="got 1 agents for an env with 2 seats"):
        trainer.train([agent], learning_mask=[1, 1])
    with pytest.raises(ValueError, match="missing \\['player_2'\\]"):
        trainer.train({"player_1": agent}, learning_mask=[1, 1])
    with pytest.raises(TypeError, match="no observe\\(\\)/update\\(\\)"):
        trainer.train([RandomAgent(trainer.action_space("player_1")), agent], learning_mask=[1, 1])
    wrong = CountingLearner(gym.spaces.Discrete(7), trainer.observation_space("player_1"))
    with pytest.raises(ValueError, match="action space Discrete\\(7\\)"):
        trainer.train([wrong, agent], learning_mask=[1, 1])
    c4 = small_trainer(connect_four_v3.env)
    wrong_obs = CountingLearner(trainer.action_space("player_1"), c4.observation_space("player_0"))
    with pytest.raises(ValueError, match="observation space"):
        trainer.train([agent, wrong_obs], learning_mask=[1, 1])
    with pytest.raises(TypeError, match="no act"):
        trainer.train([object(), agent], learning_mask=[0, 1])
    assert agent.stored == 0


def test_bad_env_and_settings():
    with pytest.raises(TypeError, match="unsupported env"):
        DecentralizedTrainer(lambda: object())
    with pytest.raises(ValueError, match="num_train_envs must be a positive integer"):
        DecentralizedTrainer("CartPole-v1", num_train_envs=0)
    with pytest.raises(TypeError, match="stop_fn must be callable"):
        DecentralizedTrainer("CartPole-v1", stop_fn=3)


def test_illegal_action_from_an_agent_is_a_clear_error():
    class Cheater(CountingLearner):
        def act(self, obs, mask=None, explore=False):
            return np.full(len(obs), 1)  # "take 2" even with one stone left

    trainer = DecentralizedTrainer(lambda: NimEnv(stones=3), num_train_envs=1, num_test_envs=1,
                                   episodes_per_train=5, test_freq=5, episodes_per_test=1, update_freq=10)
    cheat = Cheater(trainer.action_space("player_0"), trainer.observation_space("player_0"))
    with pytest.raises(ValueError, match="illegal \\(masked\\) action 1"):
        trainer.train([cheat, cheat], learning_mask=[1, 1], plot=False, progress=False)


def test_gymnasium_one_agent_case():
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=50,
                                   test_freq=5, episodes_per_train=10, episodes_per_test=2, seed=0)
    assert trainer.possible_agents == ["agent_0"]
    agent = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert stats["num_collected_episodes"] >= 10 and 8 <= stats["reward_metric_stats"]["last"] <= 100


def test_subprocess_pool_gives_the_same_run_as_in_process():
    """processes=N (the pool network) must not change what is collected."""
    def run(processes):
        trainer = small_trainer(processes=processes, episodes_per_train=20)
        agent = learner(trainer)
        stats = trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False)
        trainer.close()
        return stats["test_history"], stats["num_collected_steps"], agent.stored

    assert run(2) == run(None)
