"""Backend-neutral constructor settings for PPO and DDPG (numpy only).

The PyTorch and TensorFlow agents take the same arguments; each ``apply_*_config`` function here
checks those arguments and sets the resulting hyperparameters (and numpy-side helpers such as the
replay feed) on the agent, so both backends only build their networks. The functions run inside
``__init__`` after the backend base class has set ``agent.rng``, in the order the checks always ran.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from types import SimpleNamespace
    >>> agent = SimpleNamespace()
    >>> apply_ppo_config(agent, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), False, 2, gamma=0.9,
    ...     gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, n_epochs=2, n_steps=4,
    ...     max_grad_norm=0.5, normalize_advantage=True, target_kl=None)
    >>> agent.gamma, agent.n_steps, agent.out_dim
    (0.9, 4, 2)
    >>> ppo_action_output(gym.spaces.Box(-1, 1, (2, 3)))
    (True, 6)
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from marl_note.agents.continuous import ActionScaler, ExplorationNoise
from marl_note.agents.replay_options import ReplayFeed, check_prioritized_options

__all__ = ["ppo_action_output", "apply_ppo_config", "apply_ppo_priority_config",
           "apply_ddpg_config"]


def ppo_action_output(action_space: gym.Space) -> tuple[bool, int]:
    """``(continuous, policy output size)`` for PPO's action space (Discrete or Box)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return False, int(action_space.n)
    if isinstance(action_space, gym.spaces.Box):
        return True, int(np.prod(action_space.shape, dtype=np.int64))
    raise TypeError(f"PPO supports Discrete and Box action spaces, got {action_space!r}")


def apply_ppo_config(agent, observation_space: gym.Space, action_space: gym.Space, continuous: bool,
                     out_dim: int, *, gamma, gae_lambda, clip_range, ent_coef, vf_coef, n_epochs, n_steps,
                     max_grad_norm, normalize_advantage, target_kl) -> None:
    """Check PPO's training arguments and set its hyperparameters and rollout buffer on ``agent``."""
    if not 0.0 <= gamma <= 1.0 or not 0.0 <= gae_lambda <= 1.0 or clip_range <= 0:
        raise ValueError(f"need gamma, gae_lambda in [0, 1] and clip_range > 0, got {gamma}, "
                         f"{gae_lambda}, {clip_range}")
    if int(n_epochs) <= 0 or int(n_steps) <= 0:
        raise ValueError(f"n_epochs and n_steps must be positive, got {n_epochs}, {n_steps}")
    agent.out_dim = out_dim
    agent.action_start = 0 if continuous else int(action_space.start)
    agent.gamma, agent.gae_lambda, agent.clip_range = float(gamma), float(gae_lambda), float(clip_range)
    agent.ent_coef, agent.vf_coef = float(ent_coef), float(vf_coef)
    agent.n_epochs, agent.n_steps = int(n_epochs), int(n_steps)
    agent.max_grad_norm = max_grad_norm
    agent.normalize_advantage = bool(normalize_advantage)
    agent.target_kl = target_kl
    from marl_note.replay import RolloutBuffer
    agent.rollout = RolloutBuffer(observation_space, action_space)


def apply_ppo_priority_config(agent, *, PR, alpha, beta, initial_TD, lambda_, initial_ratio) -> None:
    """Check PPO's prioritized-minibatch options (``PR=True``) and set them on ``agent``."""
    agent.PR = bool(PR)
    agent.alpha, agent.beta, agent.initial_TD = check_prioritized_options(alpha, beta, initial_TD)
    if not 0.0 <= float(lambda_) <= 1.0:
        raise ValueError(f"lambda_ must lie in [0, 1] (the weight of |TD| against |ratio - 1| in the "
                         f"priority), got {lambda_}")
    if not (np.isfinite(initial_ratio) and initial_ratio >= 0):
        raise ValueError(f"initial_ratio must be a finite number >= 0, got {initial_ratio}")
    agent.lambda_, agent.initial_ratio = float(lambda_), float(initial_ratio)
    if agent.lambda_ * agent.initial_TD + (1 - agent.lambda_) * agent.initial_ratio <= 0:
        raise ValueError("the initial priority lambda_ * initial_TD + (1 - lambda_) * initial_ratio must be > 0")


def apply_ddpg_config(agent, observation_space: gym.Space, action_space: gym.Space, *, gamma, tau, buffer_size,
                      learning_starts, replay_ratio, update_steps, noise, action_l2, target_clip,
                      max_grad_norm, PR, alpha, beta, initial_TD, num_steps, her, compute_reward,
                      replay, augment=None) -> None:
    """Check DDPG's arguments and set its hyperparameters, action scaler, replay feed and noise."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    if replay_ratio < 0 or (update_steps is not None and int(update_steps) < 0) or int(learning_starts) < 0:
        raise ValueError("replay_ratio, update_steps and learning_starts must be non-negative")
    if action_l2 < 0:
        raise ValueError(f"action_l2 must be >= 0, got {action_l2}")
    if target_clip is not None and not (len(target_clip) == 2 and target_clip[0] <= target_clip[1]):
        raise ValueError(f"target_clip must be a (low, high) pair with low <= high, got {target_clip!r}")
    agent.gamma, agent.tau = float(gamma), float(tau)
    agent.learning_starts = int(learning_starts)
    agent.replay_ratio = float(replay_ratio)
    agent.update_steps = None if update_steps is None else int(update_steps)
    agent.action_l2 = float(action_l2)
    agent.target_clip = None if target_clip is None else (float(target_clip[0]), float(target_clip[1]))
    agent.max_grad_norm = max_grad_norm
    agent.scaler = ActionScaler(action_space)
    agent._feed = ReplayFeed(observation_space, action_space, buffer_size=buffer_size, gamma=gamma, PR=PR,
                             alpha=alpha, beta=beta, initial_TD=initial_TD, num_steps=num_steps, her=her,
                             compute_reward=compute_reward, replay=replay, augment=augment,
                             seed=int(agent.rng.integers(0, 2**63 - 1)))
    agent.replay = agent._feed.replay
    agent.noise = ExplorationNoise(noise, (agent.scaler.dim,), sigma=0.1,
                                   seed=int(agent.rng.integers(0, 2**63 - 1)))
