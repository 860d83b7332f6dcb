import functools
import io

import gymnasium as gym
import numpy as np
import pytest

from marl_note.envs.goal_envs import BitFlippingEnv, PointReachEnv
from marl_note.replay import HERReplayBuffer, HindsightRelabeler, goal_observation
from marl_note.types import Transitions


def stack(dicts):
    return {k: np.stack([d[k] for d in dicts]) for k in dicts[0]}


def collect(buf, make_env, n_envs=3, steps=60, seed=0):
    """Random-action rollouts of ``n_envs`` envs, stepped in lockstep and added as interleaved streams."""
    envs = [make_env() for _ in range(n_envs)]
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    for e in envs:
        e.action_space.seed(seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        order = rng.permutation(n_envs)  # streams arrive in arbitrary order within a batch
        acts, results = [], []
        for i in order:
            a = envs[i].action_space.sample()
            acts.append(a)
            results.append(envs[i].step(a))
        next_obs = [r[0] for r in results]
        terminated = np.array([r[2] for r in results])
        truncated = np.array([r[3] for r in results])
        buf.add(Transitions(obs=stack([obs[i] for i in order]), act=np.array(acts),
                            rew=np.array([r[1] for r in results]), next_obs=stack(next_obs),
                            terminated=terminated, truncated=truncated, stream=order))
        for j, i in enumerate(order):
            obs[i] = envs[i].reset()[0] if terminated[j] or truncated[j] else next_obs[j]
    return envs[0]


def storage_snapshot(buf):
    return {k: np.array(v, copy=True) for k, v in buf.state_dict().items() if k != "rng_state"}


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
@pytest.mark.parametrize("make_env", [lambda: BitFlippingEnv(6), PointReachEnv])
def test_relabelled_rewards_goals_and_storage(strategy, make_env):
    env = make_env()
    buf = HERReplayBuffer.from_env(env, capacity=10_000, strategy=strategy, k=4, seed=1)
    collect(buf, make_env, steps=120)
    assert len(buf) > 100
    before = storage_snapshot(buf)
    s = buf.sample_relabeled(4000)
    t = s.transitions
    # every reward (relabelled or original) is the env's reward for the goal the agent sees
    achieved = buf.column("next_achieved_goal")[t.indices]
    np.testing.assert_array_equal(t.rew, env.compute_reward(achieved, s.goal, {}))
    # unrelabelled items keep their stored goal and reward
    keep = ~s.relabeled
    np.testing.assert_array_equal(s.goal[keep], buf.column("desired_goal")[t.indices[keep]])
    np.testing.assert_array_equal(t.rew[keep], buf.column("rew")[t.indices[keep]])
    assert (s.goal_index[keep] == -1).all()
    # relabelled goals are achieved goals from the same episode, at an allowed step
    rel = s.relabeled
    assert abs(rel.mean() - 0.8) < 0.03
    gi, ii = s.goal_index[rel], t.indices[rel]
    np.testing.assert_array_equal(s.goal[rel], buf.column("next_achieved_goal")[gi])
    np.testing.assert_array_equal(buf.column("ep_first")[gi], buf.column("ep_first")[ii])
    step, goal_step, length = buf.column("step")[ii], buf.column("step")[gi], buf.column("ep_len")[ii]
    if strategy == "future":
        assert (goal_step >= step).all() and (goal_step > step).any()
    elif strategy == "final":
        assert (goal_step == length - 1).all()
    else:
        assert (goal_step < step).any() and (goal_step > step).any()
    # relabelling makes successes common (the point of HER)
    assert (t.rew[rel] == 0).mean() > (t.rew[keep] == 0).mean()
    # agents see [observation, goal] in float32, inside the flat space
    np.testing.assert_array_equal(t.obs, goal_observation({"observation": buf.column("observation")[t.indices]},
                                                          s.goal))
    np.testing.assert_array_equal(t.next_obs[:, -s.goal.shape[1]:], s.goal.astype(np.float32))
    assert t.obs.dtype == np.float32 and all(buf.flat_observation_space.contains(o) for o in t.obs[:50])
    # sampling never writes to storage
    after = storage_snapshot(buf)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)


def test_k_zero_never_relabels():
    buf = HERReplayBuffer.from_env(BitFlippingEnv(4), capacity=500, k=0, seed=0)
    collect(buf, lambda: BitFlippingEnv(4), steps=30)
    s = buf.sample_relabeled(500)
    assert not s.relabeled.any()


def test_episodes_are_held_until_they_end_and_stored_contiguously():
    buf = HERReplayBuffer.from_env(BitFlippingEnv(8), capacity=1000, seed=0)
    collect(buf, lambda: BitFlippingEnv(8), n_envs=2, steps=5)  # shorter than a full episode (8 steps)
    assert buf.num_pending + len(buf) == 10
    first, length, step = buf.column("ep_first"), buf.column("ep_len"), buf.column("step")
    slot = np.arange(len(buf))
    np.testing.assert_array_equal(slot, first + step)  # episode steps sit in consecutive slots
    assert (step < length).all()


def test_ring_wraparound_keeps_future_goals_inside_surviving_episodes():
    make = functools.partial(BitFlippingEnv, 8)
    buf = HERReplayBuffer.from_env(make(), capacity=23, strategy="episode", k=8, seed=3)
    collect(buf, make, n_envs=3, steps=80)
    assert len(buf) == 23
    for _ in range(20):
        s = buf.sample_relabeled(64)
        rel = s.relabeled
        gi, ii = s.goal_index[rel], s.transitions.indices[rel]
        np.testing.assert_array_equal(buf.column("ep_first")[gi], buf.column("ep_first")[ii])
        assert (buf.column("step")[gi] == (gi - buf.column("ep_first")[gi]) % 23).all()


def test_state_dict_roundtrip_with_pending_episodes():
    make = functools.partial(PointReachEnv, max_steps=7)
    buf = HERReplayBuffer.from_env(make(), capacity=40, seed=2)
    collect(buf, make, n_envs=2, steps=25)
    assert buf.num_pending > 0
    f = io.BytesIO()
    np.savez(f, **buf.state_dict())
    f.seek(0)
    other = HERReplayBuffer.from_env(make(), capacity=40, seed=99)
    other.load_state_dict(dict(np.load(f, allow_pickle=False)))
    assert len(other) == len(buf) and other.num_pending == buf.num_pending
    a, b = other.sample_relabeled(32), buf.sample_relabeled(32)
    np.testing.assert_array_equal(a.transitions.obs, b.transitions.obs)
    np.testing.assert_array_equal(a.transitions.rew, b.transitions.rew)
    collect(buf, make, n_envs=2, steps=5, seed=7)
    collect(other, make, n_envs=2, steps=5, seed=7)
    for k, v in buf.state_dict().items():
        np.testing.assert_array_equal(v, other.state_dict()[k], err_msg=k)
    bad = buf.state_dict()
    bad["added"] = np.int64(int(bad["added"]) + 1)
    with pytest.raises(ValueError, match="added"):
        other.load_state_dict(bad)


def test_bad_spaces_and_reward_functions():
    env = BitFlippingEnv(4)
    no_goal = gym.spaces.Dict({"observation": gym.spaces.MultiBinary(4), "achieved_goal": gym.spaces.MultiBinary(4)})
    with pytest.raises(ValueError, match=r"missing keys \['desired_goal'\]"):
        HERReplayBuffer(10, no_goal, env.action_space, env.compute_reward)
    with pytest.raises(ValueError, match="Dict observation space"):
        HERReplayBuffer(10, gym.spaces.MultiBinary(4), env.action_space, env.compute_reward)
    with pytest.raises(ValueError, match="reward function"):
        HERReplayBuffer(10, env.observation_space, env.action_space, None)
    with pytest.raises(ValueError, match="compute_reward"):
        HERReplayBuffer.from_env(gym.make("CartPole-v1"), 10)
    with pytest.raises(ValueError, match="strategy"):
        HindsightRelabeler(env.compute_reward, "past")
    with pytest.raises(ValueError, match="k must"):
        HindsightRelabeler(env.compute_reward, "future", k=-1)
    scalar = HERReplayBuffer(100, env.observation_space, env.action_space,
                             lambda a, d, info: float(np.all(a == d)), k=100, seed=0)
    collect(scalar, lambda: BitFlippingEnv(4), steps=10)
    with pytest.raises(ValueError, match="vectorized"):
        scalar.sample(16)


def test_bad_batches_are_rejected_before_anything_changes():
    make = functools.partial(BitFlippingEnv, 4)
    buf = HERReplayBuffer.from_env(make(), capacity=100, seed=0)
    collect(buf, make, steps=6)
    before, pending = storage_snapshot(buf), buf.num_pending
    obs = {"observation": np.zeros((2, 4)), "achieved_goal": np.zeros((2, 4)), "desired_goal": np.zeros((2, 4))}
    good = dict(obs=obs, act=np.array([0, 1]), rew=np.zeros(2), next_obs=obs, terminated=np.ones(2, bool),
                truncated=np.zeros(2, bool), stream=np.array([0, 1]))
    for change, match in [({"obs": np.zeros((2, 8))}, "dict obs"),
                          ({"next_obs": {"observation": obs["observation"]}}, "achieved_goal"),
                          ({"obs": {**obs, "desired_goal": np.zeros((2, 3))}}, "desired_goal has shape"),
                          ({"act": np.zeros((3,), int)}, "act has shape")]:
        with pytest.raises(ValueError, match=match):
            buf.add(Transitions(**{**good, **change}))
    after = storage_snapshot(buf)
    assert buf.num_pending == pending
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)
    with pytest.raises(ValueError, match="empty"):
        HERReplayBuffer.from_env(make(), capacity=10).sample(1)
