"""Spaces seen from an agent, numpy only: the one observation encoder and the one Box action scaler.

The observation encoder (:class:`~marl_note.agents.encoders.ObsEncoder`, re-exported here),
action masks, :class:`~marl_note.types.Transitions` batches given to ``observe()``, the message
for a refused non-finite update, and :class:`ActionScaler` between a network's ``[-1, 1]``
actions and a Box's bounds.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.encoders import ObsEncoder, flat_obs_dim
from marl_note.types import NonFiniteError, Transitions

__all__ = ["flat_obs_dim", "ObsEncoder", "check_mask", "check_transitions", "raise_if_nonfinite_update",
           "ActionScaler", "check_box_action_space"]


def check_mask(mask: Any, batch: int, n: int, name: str = "mask") -> np.ndarray | None:
    """``mask`` as a bool ``[batch, n]`` array (or None), or a ValueError naming the problem.

    Example:
        >>> check_mask([[1, 0, 1]], 1, 3).tolist()
        [[True, False, True]]
    """
    if mask is None:
        return None
    arr = np.asarray(mask)
    if arr.shape != (batch, n):
        raise ValueError(f"{name} has shape {arr.shape}, expected ({batch}, {n}) (batch, num_actions)")
    return arr.astype(bool, copy=False)


def check_transitions(t: Any, encoder: ObsEncoder) -> Transitions:
    """``t`` itself once it is a :class:`Transitions` batch whose observations fit ``encoder``."""
    if not isinstance(t, Transitions):
        raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(t).__name__}")
    encoder.check(t.obs, "transitions.obs")
    encoder.check(t.next_obs, "transitions.next_obs")
    n = len(t)
    for name in ("obs", "act", "next_obs", "terminated", "truncated"):
        if len(np.asarray(getattr(t, name))) != n:
            raise ValueError(f"transitions.{name} has {len(np.asarray(getattr(t, name)))} items, rew has {n}")
    return t


def raise_if_nonfinite_update(who: str, update: int, values: dict[str, float]) -> None:
    """Raise :class:`~marl_note.types.NonFiniteError` naming the first non-finite of ``values``.

    ``values`` maps names (``"loss"``, ``"loss gradient norm"``, ...) to the floats of one
    gradient step, in the order the step computes them; ``who`` is the agent's class name and
    ``update`` the number of the gradient step that is refused (its weights are not written).

    Example:
        >>> raise_if_nonfinite_update("DQN", 7, {"loss": 0.5, "loss gradient norm": 2.0})
        >>> raise_if_nonfinite_update("DQN", 7, {"loss": float("nan"), "loss gradient norm": float("nan")})
        Traceback (most recent call last):
        ...
        marl_note.types.NonFiniteError: DQN update 7: loss is nan (loss gradient norm nan); ...
    """
    bad = [name for name, v in values.items() if not np.isfinite(v)]
    if not bad:
        return
    loss = bad[0].removesuffix(" gradient norm")
    partner = ", ".join(f"{name} {values[name]:.6g}" for name in (loss, f"{loss} gradient norm")
                        if name in values and name != bad[0])
    raise NonFiniteError(
        f"{who} update {update}: {bad[0]} is {values[bad[0]]}" + (f" ({partner})" if partner else "")
        + "; its optimiser step was not taken, so no weight holds a non-finite value. Usual causes: a NaN/inf "
        "reward or observation in the stored transitions, or a learning rate too large.")


# --------------------------------------------------------------------------- Box actions

def check_box_action_space(space: gym.Space, who: str = "this agent") -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box):
        raise TypeError(f"{who} needs a Box action space, got {space!r}; use DQN for Discrete actions")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(f"{who} squashes actions into the Box bounds, which must be finite; got {space!r}")
    if np.any(space.high < space.low):
        raise ValueError(f"action space has high < low: {space!r}")
    return space


class ActionScaler:
    """``[-1, 1]`` network actions <-> env actions in ``[low, high]`` (per dimension, affine).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> s = ActionScaler(gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32)))
        >>> s.to_env(np.array([[-1.0, 0.5]])).tolist(), s.to_unit(np.array([[1.0, -2.0]])).tolist()
        ([[0.0, 1.0]], [[1.0, -1.0]])
    """

    def __init__(self, space: gym.spaces.Box, who: str = "this agent"):
        self.space = check_box_action_space(space, who)
        self.shape = tuple(space.shape)
        self.dim = int(np.prod(self.shape, dtype=np.int64))
        low = space.low.astype(np.float64).reshape(-1)
        high = space.high.astype(np.float64).reshape(-1)
        self.center = (high + low) / 2.0
        self.half = (high - low) / 2.0
        self._safe_half = np.where(self.half > 0, self.half, 1.0)

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """``[B, dim]`` values in [-1, 1] -> ``[B, *shape]`` actions of the space's dtype, inside the bounds."""
        unit = np.clip(np.asarray(unit, np.float64).reshape(-1, self.dim), -1.0, 1.0)
        a = self.center + self.half * unit
        a = np.clip(a, self.space.low.reshape(-1), self.space.high.reshape(-1))
        return a.reshape(len(a), *self.shape).astype(self.space.dtype)

    def to_unit(self, act: np.ndarray) -> np.ndarray:
        """``[B, *shape]`` env actions -> ``[B, dim]`` float32 in [-1, 1] (what the critic sees)."""
        act = np.asarray(act, np.float64).reshape(-1, self.dim)
        return ((act - self.center) / self._safe_half).astype(np.float32)
