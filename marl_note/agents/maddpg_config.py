"""MADDPG's hyperparameters: :class:`MADDPGConfig`, defaults and validation (the core is in
:mod:`marl_note.agents.maddpg`)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marl_note.agents.networks import ACTIVATIONS, check_hidden_sizes
from marl_note.validation import (
    check_callable,
    non_negative_float,
    non_negative_int,
    open_unit_interval,
    optional,
    positive_float,
    positive_int,
    unit_interval,
)

__all__ = ["MADDPGConfig"]


@dataclass(frozen=True)
class MADDPGConfig:
    """MADDPG's hyperparameters, checked once (see :class:`MADDPGCore` for their meaning).

    ``MARL`` is the original library's name of ``centralized_critic``; when given it decides it.

    Example:
        >>> MADDPGConfig(MARL=False).centralized_critic
        False
        >>> MADDPGConfig(tau=0.0)
        Traceback (most recent call last):
        ...
        ValueError: tau must be in (0, 1] (the rate of the Polyak target update), got 0.0
    """

    hidden_sizes: Sequence[int] = (64, 64)  # kept as a tuple
    activation: str = "relu"
    actor_lr: float = 1e-2
    critic_lr: float = 1e-2
    gamma: float = 0.95
    tau: float = 0.01
    buffer_size: int = 100_000
    learning_starts: int = 1024
    replay_ratio: float = 0.05
    update_steps: int | None = None
    temperature: float = 1.0
    noise_sigma: float = 0.1
    noise: Mapping[str, Any] | None = None
    action_reg: float = 1e-3
    max_grad_norm: float | None = 0.5
    centralized_critic: bool = True
    MARL: bool | None = None
    reward_done_func_ma: Callable | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("hidden_sizes", check_hidden_sizes(self.hidden_sizes))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {self.activation!r}")
        for name in ("actor_lr", "critic_lr", "temperature"):
            put(name, positive_float(name, getattr(self, name)))
        put("gamma", unit_interval("gamma", self.gamma, "the discount"))
        put("tau", open_unit_interval("tau", self.tau, "the rate of the Polyak target update"))
        put("buffer_size", positive_int("buffer_size", self.buffer_size))
        put("learning_starts", non_negative_int("learning_starts", self.learning_starts))
        put("update_steps", optional(non_negative_int, "update_steps", self.update_steps))
        for name in ("replay_ratio", "noise_sigma", "action_reg"):
            put(name, non_negative_float(name, getattr(self, name)))
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))
        if self.noise is not None and not isinstance(self.noise, Mapping):
            raise TypeError(f"noise must be a dict {{agent: noise process}}, got {type(self.noise).__name__}")
        check_callable("reward_done_func_ma", self.reward_done_func_ma, "(joint) -> (rew, terminated)")
        put("centralized_critic", bool(self.centralized_critic if self.MARL is None else self.MARL))
