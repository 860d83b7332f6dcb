"""The env's global state reaches a joint learner's JointTransitions (state, next_state)."""
from __future__ import annotations

import numpy as np
from mpe2 import simple_spread_v3
from pettingzoo.classic import rps_v2

from marl_note.agents import RandomAgent
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.trainers.collector import Collector


class _Seat(RandomAgent):
    """A random seat of a joint learner that only keeps what it is given."""

    def __init__(self, space, learner):
        super().__init__(space, seed=0)
        self.joint_learner = learner


class _Keep:
    def __init__(self):
        self.got = []

    def observe_joint(self, batch):
        self.got.append(batch)

    def update(self, batch_size=None):
        return {}


def _collect(env_fn, state: bool, steps: int):
    spec = make_spec(adapt(env_fn()))
    keep = _Keep()
    seats = [_Seat(spec.action_space(a), keep) for a in spec.possible_agents]
    venv = SyncVectorEnv([env_fn] * 2, state=state)
    col = Collector(venv, spec, seats, explore=[True] * len(seats), learn=[True] * len(seats))
    col.reset(seed=0)
    col.collect(n_steps=steps)
    col.flush()
    return spec, keep.got


def test_simple_spread_state_reaches_joint_transitions():
    def fn():
        return simple_spread_v3.parallel_env(max_cycles=4)
    spec, got = _collect(fn, state=True, steps=12)
    jt = got[0]
    assert jt.state.shape == (len(jt), 54) and jt.next_state.shape == (len(jt), 54)
    # the state is the env's state(): MPE's is every agent's observation, concatenated
    obs = np.concatenate([jt.obs[a] for a in spec.possible_agents], axis=1)
    np.testing.assert_allclose(jt.state, obs)
    checked = 0
    for b in range(len(jt)):
        ended = jt.truncated[b].any() or jt.terminated[b].any()
        nxt = np.concatenate([jt.next_obs[a][b] for a in spec.possible_agents])
        np.testing.assert_allclose(jt.next_state[b], nxt)  # the final state where the episode ended
        later = [c for c in range(b + 1, len(jt)) if jt.stream[c] == jt.stream[b]]
        if not ended and later:  # within an episode, the env's next row starts from this row's next state
            np.testing.assert_allclose(jt.state[later[0]], jt.next_state[b])
            checked += 1
    assert checked >= 6


def test_state_is_none_without_a_state_request_or_without_a_state():
    def fn():
        return simple_spread_v3.parallel_env(max_cycles=4)
    _, got = _collect(fn, state=False, steps=4)
    assert got[0].state is None and got[0].next_state is None

    def rps():  # a Parallel env without state(): no state space, no state, even when asked for
        return rps_v2.parallel_env(num_actions=3, max_cycles=3)
    spec, got = _collect(rps, state=True, steps=4)
    assert spec.state_space is None
    assert got[0].state is None and got[0].next_state is None and len(got[0]) == 4
