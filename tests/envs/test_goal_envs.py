import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from marl_note.envs.goal_envs import BitFlippingEnv, PointReachEnv


@pytest.mark.parametrize("make", [lambda: BitFlippingEnv(5), BitFlippingEnv, PointReachEnv])
def test_passes_gymnasium_env_checker(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings count as failures here
        check_env(make(), skip_render_check=True)


def test_bit_flipping_dynamics_and_truncation():
    env = BitFlippingEnv(n_bits=3)
    obs, _ = env.reset(seed=4)
    assert not np.array_equal(obs["achieved_goal"], obs["desired_goal"])
    np.testing.assert_array_equal(obs["observation"], obs["achieved_goal"])
    before = obs["observation"].copy()
    obs, r, term, trunc, _ = env.step(0)
    assert obs["observation"][0] == 1 - before[0] and (obs["observation"][1:] == before[1:]).all()
    # a start that differs from its goal in >= 2 bits: flipping bit 0 back and forth never succeeds
    def differing_bits(seed):
        obs, _ = env.reset(seed=seed)
        return int(np.sum(obs["achieved_goal"] != obs["desired_goal"]))

    seed = next(k for k in range(100) if differing_bits(k) >= 2)
    env.reset(seed=seed)
    results = [env.step(0)[1:4] for _ in range(3)]
    assert [r for r, _, _ in results] == [-1.0] * 3
    assert [(te, tr) for _, te, tr in results] == [(False, False), (False, False), (False, True)]


def test_bit_flipping_seeding_is_deterministic():
    a, b = BitFlippingEnv(16), BitFlippingEnv(16)
    for seed in range(5):
        oa, _ = a.reset(seed=seed)
        ob, _ = b.reset(seed=seed)
        for k in oa:
            np.testing.assert_array_equal(oa[k], ob[k])
    assert not np.array_equal(a.reset(seed=1)[0]["desired_goal"], a.reset(seed=2)[0]["desired_goal"])


@pytest.mark.parametrize("env", [BitFlippingEnv(4), PointReachEnv()])
def test_compute_reward_is_vectorized_and_agrees_with_step(env):
    rng = np.random.default_rng(0)
    rewards, achieved, desired = [], [], []
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        rewards.append(r)
        achieved.append(obs["achieved_goal"])
        desired.append(obs["desired_goal"])
        assert info["is_success"] == (r == 0.0) and term == (r == 0.0)
        if term or trunc:
            obs, _ = env.reset(seed=int(rng.integers(1000)))
    batch = env.compute_reward(np.stack(achieved), np.stack(desired), {})
    assert batch.shape == (200,) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch, rewards)
    assert 0.0 in rewards or isinstance(env, PointReachEnv)
    same = env.compute_reward(np.stack(achieved), np.stack(achieved), {})
    assert (same == 0).all()
    with pytest.raises(ValueError, match="shape"):
        env.compute_reward(np.zeros((3, 7)), np.zeros((3, 7)), {})


def test_point_reach_tolerance_and_bounds():
    env = PointReachEnv(tolerance=0.1)
    r = env.compute_reward(np.array([[0.0, 0.0], [0.0, 0.0]]), np.array([[0.09, 0.0], [0.11, 0.0]]), {})
    assert r.tolist() == [0.0, -1.0]
    obs, _ = env.reset(seed=3)
    for _ in range(60):
        obs, _, term, trunc, _ = env.step(np.array([1.0, 1.0], np.float32))
        assert env.observation_space.contains(obs)
        if term or trunc:
            break
    assert trunc or term
    with pytest.raises(ValueError, match="action"):
        env.step(np.array([np.nan, 0.0]))
