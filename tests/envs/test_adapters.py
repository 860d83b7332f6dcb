import gymnasium as gym
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.envs import AECAdapter, GymAdapter, ParallelAdapter, SyncVectorEnv, adapt, env_factory, make_spec
from tests.scripted_envs import NimEnv, RaceEnv


def test_aec_adapter_strips_mask_and_only_selected_agent_acts():
    env = adapt(tictactoe_v3.env())
    assert isinstance(env, AECAdapter)
    res = env.reset(seed=0)
    assert list(res.obs) == ["player_1"]
    assert res.obs["player_1"].shape == (3, 3, 2)
    assert res.masks["player_1"].dtype == bool and res.masks["player_1"].all()
    res = env.step({"player_1": 4})
    assert list(res.obs) == ["player_2"]
    assert not res.masks["player_2"][4]
    with pytest.raises(ValueError, match="exactly one action"):
        env.step({"player_1": 0})


def test_aec_adapter_reports_loss_to_the_mover_and_consumes_dead_steps():
    env = adapt(NimEnv(stones=3))
    env.reset()
    res = env.step({"player_0": 0})  # take 1, two left
    assert list(res.obs) == ["player_1"] and not res.episode_over
    res = env.step({"player_1": 1})  # take 2: player_1 wins
    assert res.episode_over and res.obs == {}
    assert res.rewards == {"player_0": -1.0, "player_1": 1.0}
    assert res.terminated == {"player_0": True, "player_1": True}
    assert res.truncated == {"player_0": False, "player_1": False}
    assert res.final_obs["player_0"].tolist() == [0, 2]


def test_aec_truncation_is_reported_as_truncated():
    env = adapt(NimEnv(stones=10, max_turns=2))
    env.reset()
    env.step({"player_0": 0})
    res = env.step({"player_1": 0})
    assert res.episode_over
    assert res.truncated == {"player_0": True, "player_1": True}
    assert res.terminated == {"player_0": False, "player_1": False}


def test_parallel_adapter_agents_finish_at_different_times():
    env = adapt(RaceEnv())
    assert isinstance(env, ParallelAdapter)
    res = env.reset()
    assert sorted(res.obs) == ["a", "b"]
    env.step({"a": 0, "b": 0})
    res = env.step({"a": 0, "b": 0})
    assert list(res.obs) == ["b"] and res.terminated == {"a": True} and res.final_obs["a"].tolist() == [2.0]
    res = env.step({"b": 0})
    assert res.episode_over and res.truncated == {"b": True} and res.terminated == {"b": False}


def test_gym_adapter_one_agent():
    env = adapt(gym.make("CartPole-v1"))
    assert isinstance(env, GymAdapter) and env.possible_agents == ("agent_0",)
    res = env.reset(seed=1)
    for _ in range(500):
        res = env.step({"agent_0": 0})
        if res.episode_over:
            break
    assert res.episode_over and res.terminated["agent_0"] and res.rewards["agent_0"] == 1.0
    assert "agent_0" in res.final_obs and res.obs == {}


def test_spec_from_each_api():
    spec = make_spec(adapt(tictactoe_v3.env()))
    assert spec.possible_agents == ("player_1", "player_2") and spec.turn_based and spec.has_action_mask
    assert spec.observation_space("player_1").shape == (3, 3, 2)
    spec = make_spec(adapt(gym.make("CartPole-v1")))
    assert not spec.turn_based and not spec.has_action_mask and spec.action_space("agent_0").n == 2
    with pytest.raises(KeyError, match="unknown agent"):
        spec.action_space("nobody")


def test_env_factory_accepts_ids_modules_and_callables_and_rejects_the_rest():
    assert isinstance(env_factory("CartPole-v1")(), gym.Env)
    assert env_factory(tictactoe_v3)().possible_agents == ["player_1", "player_2"]
    assert env_factory(tictactoe_v3.env) is tictactoe_v3.env
    with pytest.raises(ValueError, match="unknown Gymnasium env id"):
        env_factory("NoSuchEnv-v9")
    with pytest.raises(TypeError, match="not an env instance"):
        env_factory(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="unsupported env"):
        env_factory(42)
    with pytest.raises(TypeError, match="unsupported env"):
        adapt(object())


def test_vector_env_autoresets_in_the_same_step():
    venv = SyncVectorEnv([lambda: NimEnv(stones=2)] * 2)
    first = venv.reset(seed=0)
    assert all(list(r.obs) == ["player_0"] for r in first.values())
    res = venv.step({0: {"player_0": 1}})  # env 0: take 2 -> game over, reset at once
    assert list(res) == [0]
    assert res[0].episode_over and list(res[0].obs) == ["player_0"]
    assert res[0].obs["player_0"].tolist() == [2, 0]  # first turn of the next game
