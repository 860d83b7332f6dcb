"""Observations that do not fit their spaces, and agents outside ``possible_agents``, are named where
they enter the collector instead of failing later (or silently).

Real envs (CartPole-v1, Blackjack-v1, tic-tac-toe, the goal env PointReach) are wrapped to emit a
wrong-shaped, non-numeric, NaN-in-an-integer-space or out-of-bounds observation at a known step;
the scripted Parallel race and Nim envs grow an agent they do not list. Well-formed real envs must
pass without an error or a warning.
"""
import warnings

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo.classic import rps_v2, tictactoe_v3
from pettingzoo.utils import BaseWrapper

import marl_note.trainers.step_check as step_check
from marl_note.agents import RandomAgent
from marl_note.envs import SubprocVectorEnv, SyncVectorEnv, adapt, make_spec
from marl_note.envs.goal_envs import PointReachEnv
from marl_note.trainers import Collector, DecentralizedTrainer, NonFiniteError
from tests.scripted_envs import NimEnv, RaceEnv
from tests.trainers.test_finite import StillAgent
from tests.trainers.test_trainer import CountingLearner


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Out-of-bounds values warn once per process and space: each test starts with none warned."""
    monkeypatch.setattr(step_check, "_WARNED", set())


class ObsAt(gym.ObservationWrapper):
    """Replaces the observation by ``bad(obs)`` at step ``at`` of the episodes of the env reset with seed
    ``seed`` (every env when None); step 0 is the reset observation."""

    def __init__(self, env, bad, at, seed=1):
        super().__init__(env)
        self.bad, self.at, self.seed = bad, at, seed
        self.poisoned, self.t = seed is None, 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.poisoned = self.seed is None or seed == self.seed
        self.t = -1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        return super().step(action)

    def observation(self, obs):
        self.t += 1
        return self.bad(obs) if self.poisoned and self.t == self.at else obs


def cartpole(bad, at=5, seed=1):
    return lambda: ObsAt(gym.make("CartPole-v1"), bad, at, seed)


def collect(env_fn, n_envs=2, steps=60, venv=None, **kw):
    spec = make_spec(adapt(env_fn()))
    agents = [StillAgent(spec.action_space(a)) if isinstance(spec.observation_space(a), gym.spaces.Dict)
              else RandomAgent(spec.action_space(a), seed=0) for a in spec.possible_agents]
    venv = venv or SyncVectorEnv([env_fn] * n_envs)
    col = Collector(venv, spec, agents, [True] * len(agents), [False] * len(agents), **kw)
    col.reset(seed=0)  # env i is reset with seed i
    return col.collect(n_steps=steps)


CARTPOLE_SPACE = r"Box\(\[-4\.8 .*\], \(4,\), float32\)"


@pytest.mark.parametrize("bad,expected", [
    (lambda obs: obs[:3], rf"observation has shape \(3,\), but its space {CARTPOLE_SPACE} has shape \(4,\)"),
    (lambda obs: np.stack([obs, obs]), r"observation has shape \(2, 4\), but its space .* has shape \(4,\)"),
    (lambda obs: "pole", rf"observation is a str \('pole'\), not numbers for its space {CARTPOLE_SPACE}"),
    (lambda obs: None, r"observation is a NoneType \(None\), not numbers"),
    (lambda obs: [1.0, 2.0, [3.0]], r"observation is a list \(\[1\.0, 2\.0, \[3\.0\]\]\), not numbers"),
])
def test_a_wrong_shaped_or_non_numeric_observation_names_env_agent_step_and_space(bad, expected):
    with pytest.raises(ValueError, match=r"^env 1, agent 'agent_0', step 5 of its episode \(env 1's step 5 in all\): "
                                         + expected) as err:
        collect(cartpole(bad))
    assert not isinstance(err.value, NonFiniteError) and "Fix the env, or the observation space" in str(err.value)
    # the check is the collector's to turn off; check_finite does not
    with pytest.raises(ValueError, match="step 5 of its episode"):
        collect(cartpole(bad), check_finite=False)
    with pytest.raises(ValueError) as err:  # without the check: numpy's error, stacking the batch to act on
        collect(cartpole(bad), check_spaces=False)
    assert "observation space" not in str(err.value)


def test_a_bad_reset_observation_is_named_too():
    with pytest.raises(ValueError, match=r"^env 1, agent 'agent_0', at reset \(env 1 has run 0 steps in all\): "
                                         r"observation has shape \(5,\)"):
        collect(cartpole(lambda obs: np.append(obs, 0.0), at=0))


def test_the_trainer_raises_before_a_wrong_shaped_observation_reaches_the_learner():
    trainer = DecentralizedTrainer(cartpole(lambda obs: obs[:2], at=7), num_train_envs=2, num_test_envs=1,
                                   update_freq=20, test_freq=4, episodes_per_train=8, episodes_per_test=1, seed=0)
    agent = CountingLearner(trainer.action_space("agent_0"), trainer.observation_space("agent_0"))
    with pytest.raises(ValueError, match=r"^env 1, agent 'agent_0', step 7 of its episode .*: observation has "
                                         r"shape \(2,\), but its space .* has shape \(4,\)"):
        trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert agent.stored == 0  # raised before the step was absorbed


class TicTacToeBoards(BaseWrapper):
    """tic-tac-toe whose boards come as float32 (whole numbers: they still fit the int8 space), with
    ``bad`` put into the first board that holds ``marks`` marks."""

    def __init__(self, env, bad=None, marks=3):
        super().__init__(env)
        self.bad, self.marks = bad, marks

    def observe(self, agent):
        obs = dict(super().observe(agent))
        board = obs["observation"].astype(np.float32)
        if self.bad is not None and board.sum() == self.marks:
            board[0, 0, 0] = self.bad
        obs["observation"] = board
        return obs


@pytest.mark.parametrize("bad,shown", [(np.nan, "nan"), (0.5, "0.5"), (np.inf, "inf")])
def test_a_non_whole_number_in_an_integer_space_is_refused(bad, shown):
    # on the old code a NaN board became -128 (int8) in the replay buffer and was trained on
    env_fn = lambda: TicTacToeBoards(tictactoe_v3.env(), bad)  # noqa: E731
    for check_finite in (True, False):  # not a matter of the NaN check: the value does not fit the space
        with pytest.raises(ValueError, match=rf"^env 0, agent 'player_2', step 3 of its episode .*: observation is "
                                             rf"{shown} at index \(0, 0, 0\), not a whole number as its integer space "
                                             r"Box\(0, 1, \(3, 3, 2\), int8\) holds"):
            collect(env_fn, n_envs=1, steps=10, check_finite=check_finite)


def test_a_nan_in_a_discrete_leaf_of_a_tuple_space_is_refused():
    blackjack = lambda: ObsAt(gym.make("Blackjack-v1"), lambda obs: (float("nan"), *obs[1:]), at=0, seed=None)  # noqa: E731
    with pytest.raises(ValueError, match=r"^env 0, agent 'agent_0', at reset .*: observation\[0\] is nan, not a whole "
                                         r"number as its integer space Discrete\(32\) holds"):
        collect(blackjack, n_envs=1, steps=5)


def test_a_missing_dict_entry_is_named():
    def drop_goal(obs):
        return {k: v for k, v in obs.items() if k != "desired_goal"}

    with pytest.raises(ValueError, match=r"^env 0, agent 'agent_0', step 3 of its episode .*: "
                                         r"observation\['desired_goal'\] is missing: the env returned a dict"):
        collect(lambda: ObsAt(PointReachEnv(), drop_goal, at=3, seed=None), n_envs=1, steps=10)


def test_out_of_bounds_values_warn_once_and_are_used():
    off_track = cartpole(lambda obs: obs + np.float32([10, 0, 0, 0]), at=3, seed=None)  # x beyond +-4.8
    with pytest.warns(UserWarning, match=r"^env 0, agent 'agent_0', step 3 of its episode .*: observation is 1\d\.\d+ "
                                         r"at index \(0,\), outside its space .*warned once per space") as caught:
        assert collect(off_track, steps=200).env_steps == 200  # every episode leaves the bounds; all are collected
    assert len([w for w in caught if "outside its space" in str(w.message)]) == 1
    with warnings.catch_warnings():  # the next collector (e.g. the trainer's next test) does not warn again
        warnings.simplefilter("error")
        assert collect(off_track, steps=60).env_steps == 60


@pytest.mark.parametrize("name,env_fn", [
    ("tic-tac-toe (int8 boards, masks)", tictactoe_v3.env),
    ("tic-tac-toe, float32 boards of whole numbers", lambda: TicTacToeBoards(tictactoe_v3.env())),
    ("rock-paper-scissors (Discrete observations)", rps_v2.parallel_env),
    ("simple_spread (float32, unbounded)", lambda: simple_spread_v3.parallel_env(max_cycles=25)),
    ("CartPole-v1 (float32, bounded)", lambda: gym.make("CartPole-v1")),
    ("CartPole-v1 returning float64", lambda: ObsAt(gym.make("CartPole-v1"), lambda obs: obs.astype(np.float64),
                                                    at=5, seed=None)),
    ("Pendulum-v1", lambda: gym.make("Pendulum-v1")),
    ("Blackjack-v1 (a Tuple of Discrete)", lambda: gym.make("Blackjack-v1")),
    ("PointReach (a Dict goal space)", PointReachEnv),
    ("Nim (int64 Box, masks)", NimEnv),
])
def test_well_formed_real_envs_pass_without_errors_or_warnings(name, env_fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert collect(env_fn, steps=120).env_steps >= 120


# ------------------------------------------------------------------ agents outside possible_agents

class LateJoiner(RaceEnv):
    """The race, but agent ``c`` (not in ``possible_agents``) joins at step ``at`` (0: at reset)."""

    def __init__(self, at=1, reward_only=False):
        super().__init__()
        self.at, self.reward_only = at, reward_only

    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        if self.at == 0:
            self.agents.append("c")
            obs["c"] = np.array([0.0], np.float32)
        return obs, infos

    def step(self, actions):
        obs, rew, term, trunc, infos = super().step({a: act for a, act in actions.items() if a != "c"})
        if self.t == self.at:
            rew["c"] = 0.0
            if not self.reward_only:
                obs["c"] = np.array([1.0], np.float32)
        return obs, rew, term, trunc, infos


@pytest.mark.parametrize("at,reward_only,did", [(1, False, "returned an observation for"),
                                                 (1, True, "returned a reward for"),
                                                 (0, False, "started an episode with")])
def test_a_parallel_env_adding_an_agent_is_named_with_its_possible_agents(at, reward_only, did):
    # the old code failed in the collector with a bare KeyError: 'c'
    with pytest.raises(ValueError, match=rf"^env 'race_v0' {did} agent 'c', which is not in its possible_agents "
                                         r"\['a', 'b'\]\. An env must list every agent"):
        collect(lambda: LateJoiner(at, reward_only), n_envs=1, steps=10)


class UnlistedNim(NimEnv):
    """Three-player Nim that lists only two players in ``possible_agents``; player_2 moves third."""

    def __init__(self):
        super().__init__(stones=10, players=3)
        self.players, self.possible_agents = self.possible_agents, self.possible_agents[:2]

    def reset(self, seed=None, options=None):
        listed, self.possible_agents = self.possible_agents, self.players
        super().reset(seed, options)
        self.possible_agents = listed


def test_an_aec_env_selecting_an_agent_it_does_not_list_is_named():
    with pytest.raises(ValueError, match=r"^env 'nim_v0' selected \(agent_selection\) agent 'player_2', which is not "
                                         r"in its possible_agents \['player_0', 'player_1'\]"):
        collect(UnlistedNim, n_envs=1, steps=10)


def test_worker_processes_name_the_env_index_too():
    # a wrong shape does not fit the shared-memory slot and comes through the pipe; checked in the parent
    venv = SubprocVectorEnv([cartpole(lambda obs: obs[:3])] * 2, processes=2)
    try:
        with pytest.raises(ValueError, match=r"^env 1, agent 'agent_0', step 5 of its episode .*shape \(3,\)"):
            collect(cartpole(lambda obs: obs[:3]), venv=venv)
    finally:
        venv.close()
    venv = SubprocVectorEnv([LateJoiner] * 2, processes=2)
    try:
        with pytest.raises(ValueError, match=r"^env 'race_v0' returned an observation for agent 'c'") as err:
            collect(LateJoiner, venv=venv, steps=10)
        assert "(env 0)" in "".join(getattr(err.value, "__notes__", []))  # the worker's note names the env index
    finally:
        venv.close()


# ------------------------------------------------------------------ the batch test against the search

@pytest.mark.parametrize("space,obs,verdict", [
    (gym.spaces.Box(0, 1, (2,), np.int8), np.array([-1, 0], np.int8), "outside"),  # a negative reads as 255
    (gym.spaces.Box(0, 1, (2,), np.int8), np.array([0, 2**40]), "outside"),  # int64 for an int8 space
    (gym.spaces.Box(0, 1, (2,), np.int8), np.array([True, False]), None),
    (gym.spaces.Box(0, 1, (2,), np.int8), np.array([1.0, 0.0]), None),  # whole numbers fit
    (gym.spaces.Box(-3, 3, (2,), np.int16), np.array([-3, 4], np.int16), "outside"),
    (gym.spaces.Box(0, 255, (2,), np.uint8), np.array([255, 0], np.uint8), None),
    (gym.spaces.Box(0, 255, (2,), np.uint8), np.array([256, 0]), "outside"),
    (gym.spaces.Discrete(3, start=1), np.int64(0), "outside"),
    (gym.spaces.Discrete(3, start=1), 3, None),
    (gym.spaces.MultiDiscrete([2, 5]), np.array([1, 5]), "outside"),
    (gym.spaces.MultiBinary(2), np.array([1, 1], np.int8), None),
    (gym.spaces.Box(0, 10, (1,), np.float32), np.array([10.5], np.float32), "outside"),
    (gym.spaces.Box(0, 10, (1,), np.float32), np.array([np.nan], np.float32), "nan"),
    (gym.spaces.Box(np.float32([0, -np.inf]), np.float32([1, np.inf])), np.array([0.5, -1e30]), None),
    (gym.spaces.Box(np.float32([0, -np.inf]), np.float32([1, np.inf])), np.array([1.5, 0]), "outside"),
    (gym.spaces.Box(-np.inf, np.inf, (2,), np.float64), np.array([np.inf, 0]), "inf"),
    (gym.spaces.Box(-np.inf, np.inf, (2,), np.float64), np.array([1e308, 1e308]), None),  # huge but finite
])
def test_each_space_kind_is_judged_alike_in_a_batch_and_alone(space, obs, verdict):
    from marl_note.envs.adapters import StepResult
    from marl_note.types import EnvSpec

    spec = EnvSpec(("a", "b"), {"a": space, "b": space}, dict.fromkeys("ab", gym.spaces.Discrete(2)), False, False)
    check, zeros = step_check.StepCheck(spec), np.zeros(2, np.int64)
    good = space.sample()
    results = {0: StepResult({"a": good, "b": good}, {}, {"a": 0.0}), 1: StepResult({"b": obs}, {}, {"b": 0.0})}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if verdict in ("nan", "inf"):
            with pytest.raises(NonFiniteError, match=rf"^env 1, agent 'b', step 1 .*: observation is {verdict}"):
                check.step(results, zeros, zeros)
        else:
            check.step(results, zeros, zeros)
    messages = [str(w.message) for w in caught]
    if verdict == "outside":
        assert len(messages) == 1 and messages[0].startswith("env 1, agent 'b', step 1")
        assert "outside its space" in messages[0]
    else:
        assert messages == []
