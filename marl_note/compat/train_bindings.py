"""What ``agent.train()`` settles on the agent once it knows the env: HER's reward function, ``compile``.

Agent side (no trainer): :mod:`marl_note.compat.facade` calls these before it builds the run.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.compat.rebuild import rebuild

__all__ = ["bind_env", "compute_reward_of", "set_compile"]


def compute_reward_of(env: Any) -> Any:
    """``compute_reward`` of a goal env (an instance, a Gymnasium id or a factory), else None.

    Example:
        >>> from marl_note.envs.goal_envs import BitFlippingEnv
        >>> compute_reward_of(BitFlippingEnv).__name__
        'compute_reward'
    """
    if isinstance(env, str):
        env = gym.make(env)
    elif not isinstance(env, gym.Env) and callable(env):
        env = env()
    reward = getattr(getattr(env, "unwrapped", env), "compute_reward", None)
    return reward if callable(reward) else None


def bind_env(agent: Any, env: Any) -> None:
    """Switch on hindsight replay that ``set(HER=True)`` left waiting for the env's ``compute_reward``."""
    her = agent.__dict__.get("_her_pending")
    if her is None:
        return
    reward = compute_reward_of(env)
    if reward is None:
        raise ValueError(f"set(HER=True) needs the env's compute_reward(achieved_goal, desired_goal, info); "
                         f"{env!r} has none")
    rebuild(agent, {"her": her, "compute_reward": reward})
    agent.__dict__.pop("_her_pending", None)


def set_compile(agent: Any, jit_compile: bool | None) -> None:
    """``train(jit_compile=...)``: the built-in agents' ``compile`` option (rebuilt when it changes)."""
    from marl_note.compat.rl import RLCore

    if jit_compile is None:
        return
    if not isinstance(jit_compile, (bool, np.bool_)):
        raise TypeError(f"jit_compile must be True, False or None, got {jit_compile!r}")
    if isinstance(agent, RLCore):
        if jit_compile:
            raise ValueError(f"train(jit_compile=True): {type(agent).__name__} runs your own networks; compile "
                             f"them yourself (torch.compile(module), or jit_compile=True on a Keras model)")
        return
    if bool(jit_compile) != agent.compile:
        rebuild(agent, {"compile": bool(jit_compile)})
