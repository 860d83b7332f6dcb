"""The env's global state (PettingZoo ``state()``) in the env contract: spec, adapters, vector envs."""
from __future__ import annotations

import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo.classic import tictactoe_v3

from marl_note.envs import SubprocVectorEnv, SyncVectorEnv, adapt, make_spec


def _spread():
    return simple_spread_v3.parallel_env(max_cycles=3)


def test_spec_has_the_state_space_of_an_env_with_state_and_none_without():
    assert make_spec(adapt(_spread())).state_space.shape == (54,)
    assert make_spec(adapt(simple_spread_v3.env())).state_space.shape == (54,)
    assert make_spec(adapt(tictactoe_v3.env())).state_space is None


def test_state_is_not_asked_unless_requested():
    env = _spread()
    calls = []
    original = env.state
    env.state = lambda: calls.append(1) or original()
    res = adapt(env).reset(seed=0)
    assert res.state is None and not calls
    res = adapt(env, state=True).step({a: 0 for a in env.agents})
    assert calls and res.state.shape == (54,)


@pytest.mark.parametrize("kind", ["sync", "subproc"])
def test_vector_env_reports_state_and_final_state_at_auto_reset(kind):
    fns = [_spread] * 2
    venv = SyncVectorEnv(fns, state=True) if kind == "sync" else SubprocVectorEnv(fns, processes=1, state=True)
    ref = _spread()
    try:
        first = venv.reset(seed=3)
        ref.reset(seed=3)
        np.testing.assert_array_equal(first[0].state, ref.state())
        acts = {a: 1 for a in ref.possible_agents}
        for t in range(3):
            res = venv.step({0: acts, 1: acts})
            ref.step(acts)
            if t < 2:
                np.testing.assert_array_equal(res[0].state, ref.state())
                assert res[0].final_state is None
        assert res[0].episode_over
        np.testing.assert_array_equal(res[0].final_state, ref.state())  # the finished episode's last state
        ref.reset(seed=None)
        assert res[0].state is not None and res[0].state.shape == (54,)  # the next episode's first state
        assert not np.array_equal(res[0].state, res[0].final_state)
    finally:
        venv.close()


def test_vector_env_without_state_reports_none():
    venv = SyncVectorEnv([_spread])
    res = venv.reset(seed=0)[0]
    assert res.state is None and res.final_state is None
