"""Shared by the MADDPG tests: the backend's class, and random joint batches padded like the collector's."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import JointTransitions

BACKENDS = ["torch", "tf", "numpy"]


def maddpg_class(backend):
    """``marl_note.agents.<backend>.MADDPG``; skips when the framework is missing (numpy needs none)."""
    if backend != "numpy":
        pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    return importlib.import_module(f"marl_note.agents.{backend}").MADDPG


def sample_space(space, n, rng):
    if isinstance(space, gym.spaces.Discrete):
        return space.start + rng.integers(0, space.n, n)
    return rng.uniform(np.maximum(space.low, -1), np.minimum(space.high, 1), (n, *space.shape)).astype(space.dtype)


def joint_batch(n, rng, obs_spaces, act_spaces, dead=0.2, term=0.2):
    """``n`` random joint rows; agents absent in a row (probability ``dead``) have zero rows."""
    agents = tuple(obs_spaces)
    alive = rng.random((n, len(agents))) >= dead
    alive[np.arange(n), rng.integers(0, len(agents), n)] = True
    obs = {a: sample_space(obs_spaces[a], n, rng) for a in agents}
    act = {a: sample_space(act_spaces[a], n, rng) for a in agents}
    next_obs = {a: sample_space(obs_spaces[a], n, rng) for a in agents}
    for j, a in enumerate(agents):
        for d in (obs, act, next_obs):
            d[a][~alive[:, j]] = 0
    terminated = (rng.random((n, len(agents))) < term) & alive
    return JointTransitions(agents, obs=obs, act=act, rew=rng.normal(size=(n, len(agents))).astype(np.float32),
                            next_obs=next_obs, terminated=terminated,
                            truncated=(rng.random((n, len(agents))) < 0.1) & alive & ~terminated, alive=alive,
                            stream=np.arange(n))


def set_state(m, arrays):
    """Load ``{state key: array}`` into ``m`` through its numpy state (both backends)."""
    state = m.state_dict()
    state.update({k: np.asarray(v, state[k].dtype) for k, v in arrays.items()})
    m.load_state_dict(state)
