"""Checkpoints written by release 0.1.0 (tests/fixtures/release-0.1.0) still restore, in both backends.

The fixtures were written by the 0.1.0 code (tiny networks, a few updates); ``expected.npz`` holds
what each restored agent did then on a fixed batch of observations. Restoring must give the same
greedy actions (and Q-values) in the backend that wrote it and in the other one.
"""
from pathlib import Path

import numpy as np
import pytest

from marl_note.agents.checkpoints import restore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "release-0.1.0"
NAMES = ["dqn_torch", "ppo_torch", "ddpg_torch", "dqn_tf", "maddpg_torch"]


@pytest.fixture(scope="module")
def expected():
    with np.load(FIXTURES / "expected.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize("name", NAMES)
def test_release_checkpoint_restores(name, backend, expected):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    agent = restore(FIXTURES / f"{name}.zip", backend=backend)
    obs = expected["obs"]
    if name.startswith("maddpg"):
        for k, seat in enumerate(agent.seat_agents()):
            np.testing.assert_allclose(seat.act(obs, explore=False), expected[f"{name}.seat{k}"], rtol=1e-5, atol=1e-6)
        return
    got = agent.act(obs, explore=False)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected[name])
    if name.startswith("dqn"):
        np.testing.assert_allclose(agent.q_values(obs), expected[f"{name}.q"], rtol=1e-5, atol=1e-6)
