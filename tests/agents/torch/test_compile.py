"""``compile=True`` is opt-in and never fatal: where torch.compile fails, the agent warns and runs eagerly.

(A real compile takes minutes on a small CPU box, so the suite checks the fallback only; see
``bench/`` for timings.)
"""
import gymnasium as gym
import numpy as np
import pytest
import torch

from marl_note.agents.torch import PPO
from marl_note.agents.torch.common import maybe_compile
from marl_note.types import Transitions


def test_maybe_compile_falls_back_with_a_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken)
    double = maybe_compile(lambda x: 2 * x, True, "doubler")
    with pytest.warns(RuntimeWarning, match="torch.compile of the doubler failed.*no compiler"):
        assert double(torch.tensor(2.0)).item() == 4.0
    assert double(torch.tensor(3.0)).item() == 6.0  # eager from now on, no second warning
    assert maybe_compile(len, False, "len") is len


def test_ppo_compile_option_falls_back_to_the_eager_update(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (_ for _ in ()).throw(RuntimeError("nope")))
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(32, 3)).astype(np.float32)
    t = Transitions(obs=obs, act=rng.integers(0, 2, 32), rew=rng.normal(size=32), next_obs=obs,
                    terminated=np.zeros(32, bool), truncated=np.zeros(32, bool))
    with pytest.warns(RuntimeWarning, match="PPO loss"):
        agents = [PPO(space, gym.spaces.Discrete(2), n_steps=32, n_epochs=1, hidden_sizes=(8,), seed=0, compile=c)
                  for c in (False, True)]
        for agent in agents:
            agent.observe(t)
            agent.update(16)
    a, b = (agent.state_dict() for agent in agents)
    assert all(np.array_equal(a[k], b[k]) for k in a if k.startswith("net."))


def test_dqn_compile_option_falls_back_to_the_eager_step(monkeypatch):
    from marl_note.agents.torch import DQN

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (_ for _ in ()).throw(RuntimeError("nope")))
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    rng = np.random.default_rng(1)
    t = Transitions(obs=rng.normal(size=(16, 3)).astype(np.float32), act=rng.integers(0, 2, 16),
                    rew=rng.normal(size=16), next_obs=rng.normal(size=(16, 3)).astype(np.float32),
                    terminated=np.zeros(16, bool), truncated=np.zeros(16, bool))
    with pytest.warns(RuntimeWarning, match="DQN loss"):
        agents = [DQN(space, gym.spaces.Discrete(2), hidden_sizes=(8,), learning_starts=1, update_steps=2, seed=0,
                      compile=c) for c in (False, True)]
        for agent in agents:
            agent.observe(t)
            agent.update(8)
    a, b = (agent.state_dict() for agent in agents)
    assert all(np.array_equal(a[k], b[k]) for k in a if k.startswith("q_net."))
