"""Backend-neutral constructor settings for DQN (numpy only).

The PyTorch and TensorFlow agents take the same arguments; each ``apply_*_config`` function here
checks those arguments and sets the resulting hyperparameters (and numpy-side helpers such as the
replay feed) on the agent, so both backends only build their networks. The functions run inside
``__init__`` after the backend base class has set ``agent.rng``, in the order the checks always ran.

Example:
    >>> sorted(name for name in __all__ if name.startswith("apply_"))
    ['apply_dqn_config']
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.policies import EpsGreedyQPolicy
from marl_note.agents.replay_options import ReplayFeed
from marl_note.agents.rl_common import run_update_schedule

__all__ = ["apply_dqn_config"]


def apply_dqn_config(agent, observation_space: gym.Space, action_space: gym.Space, *, gamma, buffer_size,
                     learning_starts, double, target_update, tau, criterion, max_grad_norm, replay_ratio,
                     update_steps, policy, replay, PR, alpha, beta, initial_TD, num_steps, her,
                     compute_reward, augment=None) -> None:
    """Check DQN's arguments and set its hyperparameters, policy and replay feed on ``agent``."""
    if criterion not in ("huber", "mse"):
        raise ValueError(f"criterion must be 'huber' or 'mse', got {criterion!r}")
    if tau is not None and not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if int(target_update) <= 0 or replay_ratio < 0 or (update_steps is not None and int(update_steps) < 0):
        raise ValueError("target_update must be positive, replay_ratio and update_steps non-negative")
    if policy is not None and not callable(getattr(policy, "select", None)):
        raise TypeError(f"policy must have select(values, mask, rng), got {type(policy).__name__}")
    agent.n_actions = int(action_space.n)
    agent.action_start = int(action_space.start)
    agent.gamma = float(gamma)
    agent.learning_starts = int(learning_starts)
    agent.double = bool(double)
    agent.target_update = int(target_update)
    agent.tau = None if tau is None else float(tau)
    agent.criterion = criterion
    agent.max_grad_norm = max_grad_norm
    agent.replay_ratio = float(replay_ratio)
    agent.update_steps = None if update_steps is None else int(update_steps)
    agent.policy = policy if policy is not None else EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000)
    agent._feed = ReplayFeed(observation_space, action_space, buffer_size=buffer_size, gamma=gamma, PR=PR,
                             alpha=alpha, beta=beta, initial_TD=initial_TD, num_steps=num_steps, her=her,
                             compute_reward=compute_reward, replay=replay, augment=augment,
                             seed=None if replay is not None else int(agent.rng.integers(0, 2**63 - 1)))
    agent.replay = agent._feed.replay




class DQNSharedMethods:
    """DQN methods that are the same numpy code in both backends: update schedule and extra state.

    Example:
        >>> hasattr(DQNSharedMethods, "update") and hasattr(DQNSharedMethods, "_extra_state")
        True
    """

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        new, self._new_transitions = self._new_transitions, 0
        return run_update_schedule(self, batch_size, self._gradient_step, new=new, extra=self._policy_metrics)

    def _policy_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in getattr(self.policy, "metrics", dict)().items()}

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        state = {"new_transitions": np.asarray(self._new_transitions, np.int64)}
        if hasattr(self.policy, "state_dict"):
            state.update({f"policy.{k}": np.asarray(v) for k, v in self.policy.state_dict().items()})
        return state

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new_transitions = int(np.asarray(state.get("new_transitions", 0)))
        if hasattr(self.policy, "load_state_dict"):
            self.policy.load_state_dict({k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")})

    def __repr__(self) -> str:
        return (f"DQN(obs_dim={self.encoder.dim}, n_actions={self.n_actions}, policy={self.policy!r}, "
                f"agent_steps={self.agent_steps}, updates={self.updates})")
