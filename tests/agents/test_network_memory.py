"""Networks and AlphaZero's position buffer too large for the machine are refused before anything is allocated."""
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.networks import TRAINING_BYTES_PER_WEIGHT, conv_weights, mlp_size, mlp_weights
from marl_note.contrib.alphazero.core import PositionReplay
from marl_note.replay import InsufficientMemoryError, ReplayMemoryError, memory


@pytest.fixture
def eight_gb(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 10**9)


def peak_while(fn):
    """Run ``fn`` (which must raise) and return the peak of traced memory meanwhile."""
    tracemalloc.start()
    try:
        fn()
    except InsufficientMemoryError as exc:
        return tracemalloc.get_traced_memory()[1], exc
    finally:
        tracemalloc.stop()
    raise AssertionError("not refused")


def test_a_network_too_large_is_refused_before_any_layer_is_drawn(eight_gb):
    rng = np.random.default_rng(0)
    peak, exc = peak_while(lambda: mlp_weights("q_net", 18, (100_000, 100_000), 9, rng))
    assert peak < 1_000_000  # not one layer of the 200 GB was drawn
    assert str(exc).startswith("network q_net (hidden_sizes=(100000, 100000) on 18 inputs) has 10,002,900,009 "
                               "weights: training them needs 200 GB, but only 8 GB of memory is available")
    assert mlp_size(18, (100_000, 100_000), 9) * TRAINING_BYTES_PER_WEIGHT == 200_058_000_180
    peak, exc = peak_while(lambda: conv_weights("q_net", 3, ((100_000, 8, 1, 0),) * 2, rng))
    assert peak < 1_000_000 and "conv torso q_net.conv" in str(exc) and "fewer or narrower conv_layers" in str(exc)
    assert len(mlp_weights("q_net", 18, (64, 64), 9, rng)) == 6  # ordinary networks are drawn as before


def test_an_agent_with_a_huge_network_is_refused_not_killed_by_numpy(eight_gb):
    torch = pytest.importorskip("torch")  # noqa: F841
    from marl_note.agents.torch import DQN

    with pytest.raises(InsufficientMemoryError, match=r"network q_net .* lower hidden_sizes"):
        DQN(gym.spaces.Box(0, 1, (18,)), gym.spaces.Discrete(9), hidden_sizes=(100_000, 100_000), seed=0)


def test_alphazero_position_buffer_too_large_is_refused_before_allocating(eight_gb):
    peak, exc = peak_while(lambda: PositionReplay(10**9, obs_dim=(84,), n_actions=7))
    assert peak < 1_000_000 and isinstance(exc, ReplayMemoryError)
    assert str(exc).startswith("AlphaZero buffer_size=1000000000 (positions kept for training) needs 375 GB "
                               "(375 B per position), but only 8 GB")
    assert "at most about 21333333 positions fit" in str(exc)
    assert len(PositionReplay(1000, obs_dim=(84,), n_actions=7).obs) == 1000
