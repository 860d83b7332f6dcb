"""What the pool asks of an agent before its actors act for it, through the agent contract.

An actor acts with the agent's acting shell (:class:`~marl_note.agents.base.RemoteActing`:
``agent.remote.shell()``, refreshed with ``shell.remote.load(agent.remote.state(), version)``;
built-in agents implement it in :mod:`marl_note.agents.acting_shell`). Whether the learners are
on-policy (the pool then collects in lockstep with the updates) is
:func:`marl_note.agents.registry.is_on_policy`.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.agents import RandomAgent
    >>> from marl_note.agents.torch import PPO
    >>> print(shell_refusal(RandomAgent(gym.spaces.Discrete(2))))
    RandomAgent is not a marl_note agent (AgentCore with networks behind the numpy seam); the pool \
trainer's actors act only with those (train it with actors=None)
    >>> on_policy(PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,)))
    True
"""
from __future__ import annotations

from typing import Any

from marl_note.agents.base import RemoteActing
from marl_note.agents.registry import is_on_policy

__all__ = ["on_policy", "shell_refusal"]


def on_policy(agent: Any) -> bool:
    """Whether ``agent`` learns only from data collected with its current weights (the one definition,
    :func:`~marl_note.agents.registry.is_on_policy`; an agent that declares nothing is off-policy here)."""
    return is_on_policy(agent, default=False)


def shell_refusal(agent: Any) -> str | None:
    """Why ``agent`` cannot act in an actor process (None: it can)."""
    if not isinstance(agent, RemoteActing):
        return (f"{type(agent).__name__} is not a marl_note agent (AgentCore with networks behind the numpy "
                f"seam); the pool trainer's actors act only with those (train it with actors=None)")
    try:
        agent.remote.shell()
    except TypeError as exc:
        return str(exc)
    return None
