"""Torch optimisers are built at their first step: a restored agent that only acts never builds one (building
imports torch._dynamo, over a second of CPU), and until then its optimiser state reads, writes and reaches
the built optimiser exactly as the optimiser's own would."""
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl_note.agents.torch import DQN, SAC
from marl_note.agents.torch.common import PendingAdam
from marl_note.types import Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def batch(space, n=32, seed=0):
    rng = np.random.default_rng(seed)
    act = (rng.integers(0, space.n, n) if isinstance(space, gym.spaces.Discrete)
           else rng.uniform(-1, 1, (n, *space.shape)).astype(np.float32))
    obs, next_obs = (rng.uniform(-1, 1, (n, 3)).astype(np.float32) for _ in range(2))
    return Transitions(obs=obs, act=act, rew=rng.normal(size=n).astype(np.float32), next_obs=next_obs,
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool))


@pytest.mark.parametrize("cls, space", [(DQN, gym.spaces.Discrete(2)), (SAC, gym.spaces.Box(-1, 1, (1,), np.float32))],
                         ids=["dqn", "sac-autotuned-temperature"])
def test_a_restored_agents_optimiser_state_is_its_saved_one_until_and_after_its_first_step(cls, space, tmp_path):
    trained = cls(OBS, space, hidden_sizes=(8,), learning_starts=8, seed=0)
    trained.observe(batch(space))
    trained.update(16)
    assert not any(isinstance(o, PendingAdam) for o in trained.nets.optimizers.values())
    saved = trained.state_dict()
    assert any(k.endswith(".exp_avg_sq") for k in saved)

    restored = cls.restore(trained.save(str(tmp_path / "ck")))
    assert all(isinstance(o, PendingAdam) for o in restored.nets.optimizers.values())  # not built by restoring
    again = restored.state_dict()
    assert again.keys() == saved.keys()
    for k in saved:
        assert np.asarray(again[k]).dtype == np.asarray(saved[k]).dtype and np.array_equal(again[k], saved[k]), k

    # the next step is the same from the saved slots as from the live optimiser's
    more = batch(space, seed=1)
    for agent in (trained, restored):
        agent.rng = np.random.default_rng(7)  # SAC's noise for the step: the same for both
        agent.learn(more)
    assert not any(isinstance(o, PendingAdam) for o in restored.nets.optimizers.values())
    a, b = trained.state_dict(), restored.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_a_learning_rate_set_before_the_first_step_is_the_built_optimisers():
    agent = DQN(OBS, gym.spaces.Discrete(2), hidden_sizes=(8,), learning_starts=8, seed=0)
    agent.nets.set_learning_rate("optimizer", 0.25)
    assert agent.nets.learning_rates() == {"optimizer": 0.25}
    assert agent.state_dict()["optimizer.lr"] == 0.25
    agent.observe(batch(gym.spaces.Discrete(2)))
    agent.update(16)
    assert agent.nets.optimizer("optimizer").param_groups[0]["lr"] == 0.25


def test_slots_for_a_parameter_the_optimiser_lacks_are_refused():
    pending = PendingAdam([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    with pytest.raises(KeyError, match="opt.1.exp_avg: opt has 1 parameters"):
        pending.load("opt", {"opt.1.exp_avg": np.ones(2)})


ACT_ONLY = textwrap.dedent("""
    import sys
    import numpy as np
    from marl_note.agents.checkpoints import restore
    agent = restore(sys.argv[1])
    agent.act(np.zeros((4, 3), np.float32))
    agent.state_dict()
    print("dynamo imported:", "torch._dynamo" in sys.modules)
""")


def test_restoring_and_acting_builds_no_optimiser_in_a_fresh_process(tmp_path):
    agent = DQN(OBS, gym.spaces.Discrete(2), hidden_sizes=(8,), learning_starts=8, seed=0)
    agent.observe(batch(gym.spaces.Discrete(2)))
    agent.update(16)
    path = agent.save(str(tmp_path / "ck"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", ACT_ONLY, path], capture_output=True, text=True, timeout=120,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "dynamo imported: False" in out.stdout, out.stdout + out.stderr[-2000:]
