import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.trainers import Collector, check_actions
from marl_note.types import Transitions
from tests.scripted_envs import MaskedRaceEnv, NimEnv, RaceEnv


class Scripted:
    """Plays a fixed list of actions per call and records what it observes."""

    def __init__(self, space, moves):
        self.action_space = space
        self.moves = list(moves)
        self.seen: list[Transitions] = []
        self.calls = []

    def act(self, obs, mask=None, explore=False):
        self.calls.append((len(obs), explore))
        return np.array([self.moves.pop(0) for _ in range(len(obs))])

    def observe(self, t):
        self.seen.append(t)

    def update(self, batch_size):
        return {"gradient_steps": 0}


def _collector(env_fn, agents, n_envs=1, learn=None, explore=None):
    spec = make_spec(adapt(env_fn()))
    n = spec.num_agents
    col = Collector(SyncVectorEnv([env_fn] * n_envs), spec, agents, explore or [True] * n, learn or [True] * n)
    col.reset(seed=0)
    return col


def test_turn_based_transitions_credit_the_mover_and_close_terminal():
    # Nim from 5: p0 takes 1, p1 takes 1, p0 takes 2, p1 takes 1 and wins.
    spec_space = gym.spaces.Discrete(2)
    p0, p1 = Scripted(spec_space, [0, 1]), Scripted(spec_space, [0, 0])
    col = _collector(lambda: NimEnv(stones=5), [p0, p1])
    stats = col.collect(n_episodes=1)
    assert stats.episodes == 1 and stats.env_steps == 4 and stats.agent_steps == 4
    assert stats.returns_array(2).tolist() == [[-1.0, 1.0]]
    col.flush()
    (t0,), (t1,) = p0.seen, p1.seen
    assert t0.obs.tolist() == [[5, 0], [3, 2]] and t0.act.tolist() == [0, 1]
    assert t0.rew.tolist() == [0.0, -1.0]  # the opponent's reply turned p0's last move into a loss
    assert t0.next_obs.tolist() == [[3, 2], [0, 4]]  # own next turn's view, then the final view
    assert t0.terminated.tolist() == [False, True] and not t0.truncated.any()
    assert t1.obs.tolist() == [[4, 1], [1, 3]] and t1.rew.tolist() == [0.0, 1.0]
    assert t1.next_obs.tolist() == [[1, 3], [0, 4]] and t1.terminated.tolist() == [False, True]
    assert t1.mask.tolist() == [[True, True], [True, False]]  # one stone left: "take 2" illegal
    assert t1.next_mask[0].tolist() == [True, False]
    assert set(t0.stream.tolist()) == {0} and set(t1.stream.tolist()) == {1}


def test_truncated_episode_closes_every_agent_truncated():
    p = Scripted(gym.spaces.Discrete(2), [0] * 10)
    col = _collector(lambda: NimEnv(stones=10, max_turns=3), [p, p])
    col.collect(n_episodes=1)
    col.flush()
    (t,) = p.seen  # one policy in both seats: one delivery, each seat's transitions stored once
    assert len(t) == 3
    assert t.truncated.tolist() == [False, True, True] and not t.terminated.any()
    assert sorted(t.stream.tolist()) == [0, 0, 1]


def test_parallel_env_agents_dying_mid_episode():
    a, b = Scripted(gym.spaces.Discrete(2), [0] * 10), Scripted(gym.spaces.Discrete(2), [0] * 10)
    col = _collector(RaceEnv, [a, b])
    stats = col.collect(n_episodes=1)
    assert stats.env_steps == 3 and stats.agent_steps == 5
    assert stats.returns_array(2).tolist() == [[2.0, 3.0]]
    col.flush()
    (ta,), (tb,) = a.seen, b.seen
    assert ta.terminated.tolist() == [False, True] and ta.next_obs.ravel().tolist() == [1.0, 2.0]
    assert tb.truncated.tolist() == [False, False, True] and not tb.terminated.any()
    assert tb.rew.tolist() == [1.0, 1.0, 1.0]


def test_inference_is_batched_across_envs_and_seats_of_one_policy():
    p = Scripted(gym.spaces.Discrete(2), [0] * 1000)
    col = _collector(lambda: NimEnv(stones=4), [p, p], n_envs=8)
    col.collect(n_steps=8 * 3)
    assert all(n == 8 for n, _ in p.calls)  # one call per step for all 8 envs


def test_non_learning_seats_store_nothing_and_exploration_flag_is_passed():
    p, r = Scripted(gym.spaces.Discrete(2), [0] * 100), Scripted(gym.spaces.Discrete(2), [0] * 100)
    col = _collector(lambda: NimEnv(stones=6), [p, r], learn=[True, False], explore=[False, True])
    col.collect(n_episodes=2)
    col.flush()
    assert r.seen == [] and len(p.seen) == 1 and set(p.seen[0].stream.tolist()) == {0}
    assert all(ex is False for _, ex in p.calls) and all(ex is True for _, ex in r.calls)


def test_illegal_and_out_of_space_actions_raise_before_the_env_steps():
    space = gym.spaces.Discrete(2)
    col = _collector(lambda: NimEnv(stones=1), [Scripted(space, [1]), Scripted(space, [0])])
    with pytest.raises(ValueError, match="illegal \\(masked\\) action 1"):
        col.collect(n_steps=1)
    col = _collector(lambda: NimEnv(stones=3), [Scripted(space, [5]), Scripted(space, [0])])
    with pytest.raises(ValueError, match="outside Discrete\\(2\\)"):
        col.collect(n_steps=1)
    with pytest.raises(ValueError, match="shape"):
        check_actions(np.zeros((2, 2)), space, None, 2, "x")
    box = gym.spaces.Box(-1, 1, (2,))
    stored, env_a = check_actions(np.array([[3.0, -0.5]]), box, None, 1, "x")
    assert stored.tolist() == [[3.0, -0.5]] and env_a.tolist() == [[1.0, -0.5]]
    with pytest.raises(ValueError, match="non-finite"):
        check_actions(np.array([[np.nan, 0.0]]), box, None, 1, "x")


def test_episode_quota_is_exact_and_random_agents_play_legal_tictactoe():
    spec = make_spec(adapt(tictactoe_v3.env()))
    agents = [RandomAgent(spec.action_space(a), seed=i) for i, a in enumerate(spec.possible_agents)]
    col = Collector(SyncVectorEnv([tictactoe_v3.env] * 4), spec, agents, [True, True], [False, False])
    col.reset(seed=0)
    stats = col.collect(n_episodes=10)
    assert stats.episodes == 10
    r = stats.returns_array(2)
    assert set(np.unique(r.sum(axis=1)).tolist()) == {0.0}  # zero-sum: win/loss or draw
    assert all(5 <= n <= 9 for n in stats.lengths)


def test_dict_observations_of_goal_envs_are_stacked_key_wise():
    from marl_note.envs import BitFlippingEnv

    class Recorder(Scripted):
        def act(self, obs, mask=None, explore=False):
            assert isinstance(obs, dict) and obs["observation"].shape == (len(obs["desired_goal"]), 4)
            return super().act(obs["observation"], mask, explore)

    agent = Recorder(gym.spaces.Discrete(4), [0, 1, 2, 3] * 50)
    col = _collector(lambda: BitFlippingEnv(n_bits=4), [agent], n_envs=3)
    col.collect(n_steps=12)
    col.flush()
    (t,) = agent.seen
    assert set(t.obs) == {"observation", "achieved_goal", "desired_goal"}
    assert t.obs["observation"].shape == (len(t), 4) and t.next_obs["achieved_goal"].shape == (len(t), 4)
    assert t[:2].obs["desired_goal"].shape == (2, 4)


class JointRecorder:
    """A centralised learner: records joint data; its seat actors play fixed actions."""

    def __init__(self, n_seats):
        self.seen = []
        self.seats = []
        for _ in range(n_seats):
            seat = Scripted(gym.spaces.Discrete(2), [1] * 100)
            seat.joint_learner = self
            self.seats.append(seat)

    def observe_joint(self, jt):
        self.seen.append(jt)

    def update(self, batch_size):
        return {"gradient_steps": 1}


def test_joint_data_for_centralised_learners_pads_dead_agents():
    learner = JointRecorder(2)
    col = _collector(RaceEnv, learner.seats, n_envs=2)
    assert col.learners == [learner]
    col.collect(n_episodes=2)
    col.flush()
    (jt,) = learner.seen
    assert jt.agents == ("a", "b") and len(jt) == 6  # 3 steps x 2 envs
    assert sorted(jt.stream.tolist()) == [0, 0, 0, 1, 1, 1]
    rows = jt.stream == 0
    # step 1: both alive; step 2: a terminates; step 3: only b, truncated
    assert jt.alive[rows].tolist() == [[True, True], [True, True], [False, True]]
    assert jt.terminated[rows].tolist() == [[False, False], [True, False], [False, False]]
    assert jt.truncated[rows].tolist() == [[False, False], [False, False], [False, True]]
    assert jt.rew[rows].tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]]
    assert jt.next_obs["a"][rows].ravel().tolist() == [1.0, 2.0, 0.0] and jt.obs["a"][rows][2, 0] == 0.0
    assert jt.act["b"][rows].tolist() == [1, 1, 1] and jt.act["a"][rows].tolist() == [1, 1, 0]
    assert not learner.seats[0].seen  # no per-seat transitions for joint learners


def test_joint_learner_on_a_turn_based_env_is_refused():
    learner = JointRecorder(2)
    with pytest.raises(TypeError, match="needs a Parallel env"):
        _collector(lambda: NimEnv(stones=3), learner.seats)


class FirstLegalSeat:
    """A seat actor of a centralised learner: plays the first legal action, records ``env_ids``."""

    accepts_env_ids = True

    def __init__(self, learner):
        self.action_space = gym.spaces.Discrete(3)
        self.joint_learner = learner
        self.env_ids = []

    def act(self, obs, mask=None, explore=False, env_ids=None):
        self.env_ids.append(env_ids.tolist())
        return mask.argmax(axis=1)


def test_joint_rows_carry_each_agents_action_masks_and_env_ids_reach_the_seats():
    learner = JointRecorder(0)
    learner.seats = [FirstLegalSeat(learner), FirstLegalSeat(learner)]
    col = _collector(MaskedRaceEnv, learner.seats, n_envs=2)
    col.collect(n_episodes=2)  # the env asserts that every action was legal
    col.flush()
    (jt,) = learner.seen
    assert set(jt.mask) == set(jt.next_mask) == {"a", "b"}
    assert jt.mask["a"].shape == jt.next_mask["b"].shape == (6, 3) and jt.mask["a"].dtype == bool
    legal = MaskedRaceEnv.legal
    for i in (0, 1):
        rows = jt.stream == i
        # a acts at t = 0, 1 and terminates with its final mask at t = 2; its dead row is all True
        assert jt.mask["a"][rows].tolist() == [legal("a", 0).tolist(), legal("a", 1).tolist(), [True] * 3]
        assert jt.next_mask["a"][rows].tolist() == [legal("a", 1).tolist(), legal("a", 2).tolist(), [True] * 3]
        # b acts at t = 0, 1, 2 and is truncated with its final mask at t = 3
        assert jt.mask["b"][rows].tolist() == [legal("b", t).tolist() for t in (0, 1, 2)]
        assert jt.next_mask["b"][rows].tolist() == [legal("b", t).tolist() for t in (1, 2, 3)]
        assert jt.act["b"][rows].tolist() == [0, 1, 2]  # the only legal action each step
    assert learner.seats[0].env_ids == [[0, 1]] * 2 and learner.seats[1].env_ids == [[0, 1]] * 3


def test_joint_rows_without_env_masks_have_none():
    learner = JointRecorder(2)
    col = _collector(RaceEnv, learner.seats, n_envs=1)
    col.collect(n_episodes=1)
    col.flush()
    assert learner.seen[0].mask is None and learner.seen[0].next_mask is None
