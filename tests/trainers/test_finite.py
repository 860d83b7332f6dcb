"""Non-finite rewards and observations are caught where they enter; hook results are checked.

Real envs (CartPole-v1, the goal env PointReach, a two-agent Parallel race) wrapped to return a
NaN at a known env step: the collector and the trainer raise NonFiniteError naming the env index,
the agent and the step, and run on with ``check_finite=False``.
"""
import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.envs.goal_envs import PointReachEnv
from marl_note.trainers import Collector, DecentralizedTrainer, NonFiniteError
from tests.scripted_envs import RaceEnv
from tests.trainers.test_trainer import CountingLearner


class NaNAt(gym.Wrapper):
    """Puts a NaN into the reward, the observation (``key`` of a Dict one) or the reset observation
    at step ``at`` of the episodes of the env reset with seed ``seed`` (every env when None)."""

    def __init__(self, env, what, at, seed=None, key=None):
        super().__init__(env)
        self.what, self.at, self.seed, self.key = what, at, seed, key
        self.poisoned, self.t = seed is None, 0

    def _poison(self, obs):
        obs = {k: v.copy() for k, v in obs.items()} if isinstance(obs, dict) else obs.copy()
        (obs[self.key] if self.key else obs)[0] = np.nan
        return obs

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.poisoned = self.seed is None or seed == self.seed
        self.t = 0
        obs, info = self.env.reset(seed=seed, options=options)
        return (self._poison(obs) if self.poisoned and self.what == "reset" else obs), info

    def step(self, action):
        obs, rew, term, trunc, info = self.env.step(action)
        self.t += 1
        if self.poisoned and self.t == self.at:
            if self.what == "reward":
                rew = float("nan")
            elif self.what in ("obs", "final"):
                obs = self._poison(obs)
        return obs, rew, term, trunc, info


def cartpole(what, at=5, seed=1):
    return lambda: NaNAt(gym.make("CartPole-v1"), what, at, seed)


class StillAgent:
    """Zero Box actions for a batch of Dict observations (RandomAgent counts a dict's keys as its batch)."""

    def __init__(self, space):
        self.action_space = space

    def act(self, obs, mask=None, explore=False):
        return np.zeros((len(obs["observation"]), *self.action_space.shape), self.action_space.dtype)


def collect(env_fn, n_envs=2, steps=60, **kw):
    spec = make_spec(adapt(env_fn()))
    agents = [StillAgent(spec.action_space(a)) if isinstance(spec.observation_space(a), gym.spaces.Dict)
              else RandomAgent(spec.action_space(a), seed=0) for a in spec.possible_agents]
    col = Collector(SyncVectorEnv([env_fn] * n_envs), spec, agents, [True] * len(agents), [False] * len(agents), **kw)
    col.reset(seed=0)  # env i is reset with seed i
    return col.collect(n_steps=steps)


@pytest.mark.parametrize("what,expected", [
    ("reward", r"^env 1, agent 'agent_0', step 5 of its episode \(env 1's step 5 in all\): reward is nan\. "),
    ("obs", r"^env 1, agent 'agent_0', step 5 of its episode .*: observation is nan at index \(0,\)"),
    ("reset", r"^env 1, agent 'agent_0', at reset \(env 1 has run 0 steps in all\): observation is nan"),
])
def test_collector_names_env_agent_and_step_and_can_be_turned_off(what, expected):
    with pytest.raises(NonFiniteError, match=expected) as err:
        collect(cartpole(what))
    assert "check_finite=False" in str(err.value)  # says how to turn the check off
    assert collect(cartpole(what), check_finite=False).env_steps == 60


def test_final_observation_and_later_episodes_are_named():
    # a NaN in the terminal observation of agent 'a' (RaceEnv: 'a' terminates at step 2)
    class FinalNaN(RaceEnv):
        def step(self, actions):
            obs, rew, term, trunc, info = super().step(actions)
            if self.t == 2 and self.episodes == 3:
                obs["a"] = np.array([np.nan], np.float32)
            return obs, rew, term, trunc, info

        def reset(self, seed=None, options=None):
            self.episodes = getattr(self, "episodes", 0) + 1
            return super().reset(seed, options)

    with pytest.raises(NonFiniteError, match=r"^env 0, agent 'a', step 2 of its episode \(env 0's step 8 in all\): "
                                             r"final observation is nan"):
        collect(FinalNaN, n_envs=1, steps=20)


def test_goal_env_dict_observation_leaves_are_checked():
    env_fn = lambda: NaNAt(PointReachEnv(), "obs", 3, key="desired_goal")  # noqa: E731
    with pytest.raises(NonFiniteError, match=r"agent 'agent_0', step 3 .*: observation\['desired_goal'\] is nan"):
        collect(env_fn, n_envs=1, steps=10)


def test_integer_observations_are_not_checked_for_nan_but_rewards_are():
    class NaNReward(gym.Wrapper):  # tic-tac-toe through PettingZoo would need an AEC wrapper; Blackjack is int
        def step(self, action):
            obs, rew, term, trunc, info = self.env.step(action)
            return obs, float("nan"), term, trunc, info

    spec = make_spec(adapt(tictactoe_v3.env()))
    col = Collector(SyncVectorEnv([tictactoe_v3.env] * 2), spec,
                    [RandomAgent(spec.action_space(a), seed=0) for a in spec.possible_agents], [True] * 2, [False] * 2)
    assert col.step_check.any_float is False  # int8 boards: no NaN check (the space check covers them)
    col.reset(seed=0)
    assert col.collect(n_episodes=4).episodes == 4
    with pytest.raises(NonFiniteError, match=r"^env 0, agent 'agent_0', step 1 of its episode.*: reward is nan"):
        collect(lambda: NaNReward(gym.make("Blackjack-v1")), n_envs=1, steps=5)


# ------------------------------------------------------------------ the trainer

def small(env, **kw):
    args = dict(num_train_envs=2, num_test_envs=2, update_freq=20, test_freq=4, episodes_per_train=8,
                episodes_per_test=2, seed=0)
    args.update(kw)
    return DecentralizedTrainer(env, **args)


@pytest.mark.parametrize("what", ["reward", "obs"])
def test_trainer_raises_at_the_poisoned_step_and_runs_on_without_the_check(what):
    trainer = small(cartpole(what, at=7))
    agent = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    thing = "reward" if what == "reward" else "observation"
    with pytest.raises(NonFiniteError, match=rf"^env 1, agent 'agent_0', step 7 of its episode .*: {thing} is nan"):
        trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert agent.stored == 0  # raised before the poisoned step reached the learner
    trainer = small(cartpole(what, at=7), check_finite=False)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert stats["num_collected_episodes"] >= 8


def test_trainer_test_collector_checks_too():
    trainer = small(cartpole("reward", at=3, seed=None))
    agent = RandomAgent(trainer.action_space("agent_0"), seed=0)
    with pytest.raises(NonFiniteError, match=r"^env 0, agent 'agent_0', step 3 of its episode"):
        trainer.test([agent])
    assert np.isnan(small(cartpole("reward", at=3, seed=None), check_finite=False).test([agent])["reward"])


# ------------------------------------------------------------------ hook results

def train_tictactoe(**hooks):
    tests = []
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, update_freq=20,
                                   test_freq=4, episodes_per_train=12, episodes_per_test=2, seed=0,
                                   test_fn=lambda eps, steps: tests.append(eps), **hooks)
    agent = CountingLearner(trainer.action_space("player_1"), trainer.observation_space("player_1"))
    try:
        return trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False)
    finally:
        assert len(tests) <= 1  # raised at the first test at the latest


@pytest.mark.parametrize("metric,error,match", [
    (lambda r: r[:, 0], TypeError, r"reward_metric must return a real number.*shape \(2,\)"),
    (lambda r: None, TypeError, r"reward_metric must return a real number.*NoneType"),
    (lambda r: float("nan"), ValueError, r"reward_metric returned nan"),
    (lambda r: np.float32(np.inf), ValueError, r"reward_metric returned inf"),
])
def test_bad_reward_metric_results_raise_naming_the_hook(metric, error, match):
    with pytest.raises(error, match=match):
        train_tictactoe(reward_metric=metric)


@pytest.mark.parametrize("stop,error,match", [
    (lambda m, eps: np.array([True, False]), TypeError, r"stop_fn must return True \(stop\) or False.*shape \(2,\)"),
    (lambda m, eps: None, TypeError, r"stop_fn must return True \(stop\) or False.*NoneType"),
    (lambda m, eps: float("nan"), TypeError, r"stop_fn must return True \(stop\) or False.*float: nan"),
    # a number is no decision: 0.5 used to stop training (truthy) and 0 to go on
    (lambda m, eps: 0.5, TypeError, r"stop_fn must return True \(stop\) or False.*float: 0\.5"),
    (lambda m, eps: 1, TypeError, r"stop_fn must return True \(stop\) or False.*int: 1"),
    (lambda m, eps: np.float64(0.0), TypeError, r"stop_fn must return True \(stop\) or False.*float64"),
    (lambda m, eps: "no", TypeError, r"stop_fn must return True \(stop\) or False.*str: 'no'"),
    (lambda m, eps: [], TypeError, r"stop_fn must return True \(stop\) or False.*list: \[\]"),
])
def test_bad_stop_fn_results_raise_naming_the_hook(stop, error, match):
    with pytest.raises(error, match=match):
        train_tictactoe(stop_fn=stop)


@pytest.mark.parametrize("stop", [lambda m, eps: np.bool_(eps >= 4), lambda m, eps: eps >= 4,
                                  lambda m, eps: np.array(eps >= 4)])
def test_scalar_hook_results_still_work(stop):
    stats = train_tictactoe(reward_metric=lambda r: np.array(r[:, 0].mean()), stop_fn=stop)
    assert stats["stopped_by_stop_fn"] and np.isfinite(stats["best_reward"])


def test_huge_finite_values_are_not_reported():
    # the rewards' sum may overflow to inf on huge finite values; the search then finds nothing to report
    from marl_note.envs.adapters import StepResult
    from marl_note.trainers.finite import FiniteCheck
    spec = make_spec(adapt(gym.make("CartPole-v1")))
    check, zeros = FiniteCheck(spec), np.zeros(1, np.int64)
    huge = {0: StepResult({"agent_0": np.full(4, 3e38, np.float32)}, {}, {"agent_0": 1e308}, final_obs={})}
    check.step(huge, zeros, zeros)
    huge[0].rewards["agent_1"] = 1e308  # the rewards' sum overflows
    check.step(huge, zeros, zeros)
