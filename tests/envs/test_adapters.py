import gymnasium as gym
import numpy as np
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


def _play(adapter, seed, moves=60):
    """Seeded random games (and one illegal move per game) through an adapter: every StepResult."""
    rng = np.random.default_rng(seed)
    out = [adapter.reset(seed=seed)]
    for k in range(moves):
        res = out[-1]
        if res.episode_over:
            res = adapter.reset()
            out.append(res)
        (agent,) = res.obs
        legal = np.flatnonzero(res.masks[agent])
        illegal = np.flatnonzero(~res.masks[agent])
        move = int(illegal[0]) if k % 7 == 6 and len(illegal) else int(rng.choice(legal))
        out.append(adapter.step({agent: move}))
    return out


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def test_aec_adapter_reads_last_from_the_unwrapped_env_with_identical_results(monkeypatch):
    """Under PettingZoo's own wrappers the adapter skips last()'s wrapper-chain lookups and returns
    exactly what last() gives (legal, illegal-move and dead steps alike)."""
    from pettingzoo.classic import connect_four_v3
    from pettingzoo.utils.env import AECEnv

    calls = []
    original = AECEnv.last
    monkeypatch.setattr(AECEnv, "last", lambda self, observe=True: calls.append(1) or original(self, observe))
    for make in (tictactoe_v3.env, connect_four_v3.env):
        fast = AECAdapter(make())
        slow = AECAdapter(make())
        slow._direct_last = False
        got, want = _play(fast, seed=3), _play(slow, seed=3)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert _same(vars(g), vars(w))
        assert any(r.episode_over for r in got) and any(r.rewards for r in got)
    assert len(calls) > 0  # the slow adapters went through last() ...
    calls.clear()
    _play(AECAdapter(tictactoe_v3.env()), seed=0)
    assert calls == []  # ... the plain ones never do


def test_aec_adapter_keeps_last_of_a_custom_wrapper():
    from pettingzoo.utils import BaseWrapper

    class Shaped(BaseWrapper):
        def last(self, observe=True):
            obs, rew, term, trunc, info = super().last(observe)
            return obs, rew * 10 + 0.5, term, trunc, info

    env = AECAdapter(Shaped(tictactoe_v3.env()))
    res = env.reset(seed=0)
    assert res.rewards == {"player_1": 0.5}
    wrapped = tictactoe_v3.env()
    wrapped.env.terminations = {}  # a layer that keeps its own copy falls back to last() too
    assert not AECAdapter(wrapped)._direct_last and AECAdapter(tictactoe_v3.env())._direct_last
