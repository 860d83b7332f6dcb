"""Update accounting: replay_ratio counts env steps for a shared agent, not seats x env steps."""
from __future__ import annotations

import numpy as np
import pytest


def run(num_agents: int, **options):
    """Gradient steps per env step of one DQN in every seat of MPE simple_spread with ``num_agents`` agents."""
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    pytest.importorskip("torch")
    from marl_note.agents.torch import DQN
    from marl_note.trainers import DecentralizedTrainer

    env = lambda: simple_spread_v3.parallel_env(N=num_agents, max_cycles=25)  # noqa: E731
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, batch_size=16, update_freq=50,
                                   test_freq=100, episodes_per_train=8, episodes_per_test=1, seed=0)
    spec = trainer.spec
    agent = DQN(spec.observation_space(spec.possible_agents[0]), spec.action_space(spec.possible_agents[0]),
                hidden_sizes=(8,), learning_starts=1, replay_ratio=0.5, seed=0, **options)
    stats = trainer.train([agent] * num_agents, learning_mask=[1] * num_agents, plot=False, progress=False)
    trainer.close()
    logged = [v for _, v in trainer.run_state.series["gradient_steps_per_env_step"].values()]
    return stats["num_gradient_steps"] / stats["num_collected_steps"], logged


def test_a_shared_dqn_does_the_gradient_steps_per_env_step_of_a_one_seat_dqn():
    one, _ = run(1)
    shared, logged = run(3)
    assert one == pytest.approx(0.5)
    assert shared == pytest.approx(one)  # was 3x: the ratio counted each seat's transition
    assert logged and all(v == pytest.approx(0.5) for v in logged)  # the trainer records it per update
    per_transition, _ = run(3, update_count="transitions")
    assert per_transition == pytest.approx(3 * one)


def test_new_steps_falls_back_to_transitions_without_reports_and_checks_the_option():
    from marl_note.agents.schedule import NewSteps

    new = NewSteps()
    new.observed(5)
    assert new.take() == 5 and new.take() == 0
    with pytest.raises(ValueError, match="update_count must be 'env_steps'"):
        NewSteps("seats")
    pytest.importorskip("torch")
    import gymnasium as gym

    from marl_note.agents.torch import DQN
    with pytest.raises(ValueError, match="update_count"):
        DQN(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), update_count=np.int64(3))
