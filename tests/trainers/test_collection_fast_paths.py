"""The cheap per-step paths of collection (issue #34) decide exactly as the general ones.

The step check compares a few float values in Python (one env of CartPole) and a larger batch in
numpy, both against bounds whose infinities became the largest double; a non-finite value must still
fail where a bound is infinite. The collector keeps each seat's running return as a Python float: a
float32 reward must still be summed in float64. One row stacks to a copy, as ``np.stack`` gives, a
chunk's rows stack to ``np.stack``'s array (and what it refuses is still refused), and a replay sample
is the same rows as ``get`` of its indices.
"""
import warnings

import gymnasium as gym
import numpy as np
import pytest

import marl_note.trainers.step_check as step_check
from marl_note.agents import RandomAgent
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.envs.adapters import StepResult
from marl_note.replay import ReplayBuffer
from marl_note.replay.storage import RingStorage
from marl_note.trainers import Collector, NonFiniteError, check_actions
from marl_note.trainers.step_check import StepCheck
from marl_note.types import EnvSpec, Transitions, stack_obs, stack_rows

# one bounded and one unbounded coordinate (CartPole's kind of space: bounds not uniform)
SPACE = gym.spaces.Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32))


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(step_check, "_WARNED", set())


def _step(check: StepCheck, rows: np.ndarray) -> None:
    """One vector step of ``len(rows)`` envs, env ``i`` observing ``rows[i]``."""
    results = {i: StepResult({"a": row}, {}, {"a": 1.0}) for i, row in enumerate(rows)}
    check.step(results, [3] * len(rows), [7] * len(rows))


@pytest.mark.parametrize("envs", [1, 40], ids=["few values: Python", "80 values: numpy"])
def test_the_step_check_decides_as_before_on_small_and_large_batches(envs):
    check = StepCheck(EnvSpec(("a",), {"a": SPACE}, {"a": gym.spaces.Discrete(2)}, False, False))
    ok = np.tile(np.array([0.5, -3e38], np.float32), (envs, 1))  # far out on the unbounded side: fine
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _step(check, ok)
    for bad, where in ((np.inf, 1), (-np.inf, 1), (np.nan, 1), (np.nan, 0)):
        rows = ok.copy()
        rows[-1, where] = bad
        with pytest.raises(NonFiniteError, match=f"env {envs - 1}, agent 'a', step 4 of its episode"):
            _step(check, rows)
    rows = ok.copy()
    rows[-1, 0] = 1.5  # outside the finite bound: warned once, then no longer watched
    with pytest.warns(UserWarning, match="outside its space"):
        _step(check, rows)
    with pytest.raises(NonFiniteError):  # the finite check goes on after the bounds are no longer watched
        _step(check, np.full((envs, 2), np.nan, np.float32))


def test_the_step_check_still_refuses_non_finite_values_with_finite_bounds_only_off():
    check = StepCheck(EnvSpec(("a",), {"a": SPACE}, {"a": gym.spaces.Discrete(2)}, False, False), finite=False)
    _step(check, np.array([[0.5, np.inf]], np.float32))  # the space check alone lets inf through, as before
    with pytest.raises(ValueError, match="has shape \\(3,\\)"):
        _step(check, np.zeros((1, 3), np.float32))


class Float32Rewards:
    """A vector env over CartPole whose rewards arrive as numpy float32 0.1 (a custom transport might)."""

    def __init__(self):
        self.venv = SyncVectorEnv([lambda: gym.make("CartPole-v1")])
        self.num_envs = 1

    def reset(self, seed=None):
        return self.venv.reset(seed=seed)

    def step(self, actions):
        results = self.venv.step(actions)
        for res in results.values():
            res.rewards = {a: np.float32(0.1) for a in res.rewards}
        return results


def test_returns_sum_float32_rewards_in_float64():
    spec = make_spec(adapt(gym.make("CartPole-v1")))
    col = Collector(Float32Rewards(), spec, [RandomAgent(spec.action_space("agent_0"), seed=0)], [True], [False])
    col.reset(seed=0)
    stats = col.collect(n_episodes=3)
    for ret, length in zip(stats.returns, stats.lengths):
        assert ret.dtype == np.float64 and ret.shape == (1,)
        assert ret[0] == sum([float(np.float32(0.1))] * length)  # float64 sums of the float32 value
    assert stats.env_steps == sum(stats.lengths) and all(isinstance(n, int) for n in stats.lengths)
    # a float32 running sum would differ after a few steps: the check above can tell them apart
    assert float(sum([np.float32(0.1)] * 20, np.float32(0))) != sum([float(np.float32(0.1))] * 20)


@pytest.mark.parametrize("row", [np.float32(2.5) * np.ones(()), np.arange(4, dtype=np.float32),
                                 np.arange(24, dtype=np.int8).reshape(2, 3, 4)], ids=["0-d", "1-d", "3-d int8"])
def test_one_row_stacks_to_a_copy_like_np_stack(row):
    batch = stack_obs([row])
    expected = np.stack([row])
    assert batch.shape == expected.shape and batch.dtype == expected.dtype and np.array_equal(batch, expected)
    assert batch.flags.c_contiguous and not np.shares_memory(batch, row)


@pytest.mark.parametrize("rows", [
    [np.arange(4, dtype=np.float32) + i for i in range(5)],  # observations
    [np.ones((2, 3), np.uint8) * i for i in range(4)],  # images, any rank
    [np.int64(i % 3) for i in range(6)],  # Discrete actions
    [np.float32(0.5), np.float32(-1.0)],
    [np.array([True, False]), np.array([False, True])],  # action masks
    [np.zeros(2, np.float32), np.ones(2)],  # dtypes that differ: promoted as np.stack does
    [np.int32(1), np.int64(2)], [1, 2, 3], [np.array(1.0), np.array(2.0)],  # mixed, Python, 0-d: np.stack's path
], ids=["float32", "images", "int64-scalars", "float32-scalars", "masks", "mixed-dtypes", "mixed-scalars", "python",
        "0-d"])
def test_a_chunks_rows_stack_to_np_stacks_array(rows):
    out, expected = stack_rows(rows), np.stack(rows)
    assert out.dtype == expected.dtype and out.shape == expected.shape and out.flags.c_contiguous
    assert out.tobytes() == expected.tobytes()
    assert not np.shares_memory(out, rows[0])


@pytest.mark.parametrize("rows", [[np.zeros(2), np.zeros(3)], [np.zeros(2), np.zeros(4), np.zeros(3), np.zeros(3)],
                                  [np.zeros(2), [0.0, 0.0, 0.0]]])
def test_rows_of_different_shapes_are_still_refused(rows):
    with pytest.raises(ValueError):
        stack_rows(rows)  # (2 + 4 + 3 + 3 values would reshape to 4 x 3 if only the sizes were checked)


def test_a_replay_sample_is_the_rows_get_reads_and_a_copy():
    buf = ReplayBuffer(50, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
    n = 30
    buf.add(Transitions(obs=np.arange(3 * n, dtype=np.float32).reshape(n, 3), act=np.arange(n) % 2,
                        rew=np.arange(n, dtype=np.float32), next_obs=-np.arange(3 * n, dtype=np.float32).reshape(n, 3),
                        terminated=np.arange(n) % 3 == 0, truncated=np.zeros(n, bool)))
    batch = buf.sample(16)
    again = buf.get(batch.indices)
    for name in ("obs", "act", "rew", "next_obs", "terminated", "truncated"):
        got, want = getattr(batch, name), getattr(again, name)
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert np.array_equal(batch.rew, batch.indices.astype(np.float32))  # row k holds reward k
    batch.obs[:] = 99  # a copy: the stored rows do not change
    assert not np.array_equal(buf.get(batch.indices).obs, batch.obs)


@pytest.mark.parametrize("index", [[True, False, True, False], [3, -1, 0], [[1, 2], [0, 3]], []],
                         ids=["bool mask", "negative", "2-d", "empty"])
def test_storage_reads_the_rows_fancy_indexing_reads(index):
    storage = RingStorage(4, {"x": ((2,), np.float32), "done": ((), np.bool_)})
    storage.write({"x": np.arange(8, dtype=np.float32).reshape(4, 2), "done": np.array([True, False, False, True])})
    index = np.array(index, dtype=None if index else np.int64)
    for name, rows in storage.read(index).items():
        want = storage.column(name)[index]
        assert rows.dtype == want.dtype and rows.shape == want.shape and np.array_equal(rows, want), name
    with pytest.raises(IndexError, match="out of bounds"):
        storage.read(np.array([4]))


def test_the_action_check_in_python_keeps_every_verdict():
    space, legal = gym.spaces.Discrete(3, start=-2), np.array([[True, False, True]] * 2)
    stored, for_env = check_actions(np.array([0, -2], np.int8), space, legal, 2, "agent A")
    assert stored.tolist() == for_env.tolist() == [0, -2]
    # a uint batch minus a negative start; whole floats pass as int64
    assert check_actions(np.array([0], np.uint8), space, legal[:1], 1, "agent A")[0].tolist() == [0]
    assert check_actions(np.array([-2.0]), space, None, 1, "agent A")[0].dtype == np.int64
    refused = ((np.array([0, 1], np.uint8), "agent A returned action 1 outside Discrete\\(3, start=-2\\)"),
               (np.array([-3, 0]), "agent A returned action -3 outside"),
               (np.array([0, -1]), "illegal \\(masked\\) action -1; legal actions were \\[-2, 0\\]"),
               (np.array([0.5, 0.0]), "non-integer actions"), (np.array([True, False]), "non-integer actions"))
    for actions, message in refused:
        with pytest.raises(ValueError, match=message):
            check_actions(actions, space, legal, 2, "agent A")
    assert check_actions(np.zeros(0, np.int64), space, None, 0, "agent A")[0].shape == (0,)
