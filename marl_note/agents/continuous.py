"""Numpy-only pieces of the continuous-control agents (DDPG), shared by the torch and TF backends.

:class:`ActionScaler` maps the networks' ``[-1, 1]`` (tanh) actions to a Box's bounds and back;
:class:`ExplorationNoise` draws a noise process from :mod:`marl_note.agents.noise` per batch row,
in units of the half action range.
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from marl_note.agents.noise import GaussianWhiteNoiseProcess

__all__ = ["ActionScaler", "ExplorationNoise", "check_box_action_space"]


def check_box_action_space(space: gym.Space, who: str = "DDPG") -> gym.spaces.Box:
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

    def __init__(self, space: gym.spaces.Box):
        self.space = check_box_action_space(space)
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


class ExplorationNoise:
    """Adds a noise process to ``[B, dim]`` unit-range actions.

    ``process`` is any object with ``sample()`` (and optionally ``reset(indices)``,
    ``state_dict()``, ``load_state_dict()``), e.g. :class:`~marl_note.agents.noise.
    GaussianWhiteNoiseProcess` or :class:`~marl_note.agents.noise.OrnsteinUhlenbeckProcess`.
    Its samples are in units of the half action range (``sigma=0.1`` moves an action by 10 %
    of ``(high - low) / 2``). A process whose ``size`` is the action shape is sampled once per
    row; one whose ``size`` is ``(num_envs, *action_shape)`` is sampled once per batch of
    ``num_envs`` rows (OU noise keeps one state per env that way). ``None`` gives the default
    Gaussian with ``sigma``.

    Example:
        >>> noise = ExplorationNoise(None, (2,), sigma=0.1, seed=0)
        >>> noise(np.zeros((3, 2))).shape
        (3, 2)
    """

    def __init__(self, process: Any, action_shape: tuple[int, ...], sigma: float = 0.1, seed: int | None = None):
        self.action_shape = tuple(int(s) for s in action_shape)
        if process is None:
            process = GaussianWhiteNoiseProcess(sigma=float(sigma), size=self.action_shape, seed=seed)
        if not callable(getattr(process, "sample", None)):
            raise TypeError(f"noise must be a process with sample(), e.g. GaussianWhiteNoiseProcess or "
                            f"OrnsteinUhlenbeckProcess, got {type(process).__name__}")
        size = getattr(process, "size", None)
        size = tuple(np.atleast_1d(np.asarray(size, np.int64)).tolist()) if size is not None else None
        if size is not None and size != self.action_shape and size[1:] != self.action_shape:
            raise ValueError(f"noise process size {size} must be the action shape {self.action_shape} or "
                             f"(num_envs, *{self.action_shape})")
        self.process = process
        self.batched = size is not None and size != self.action_shape
        self.rows = size[0] if self.batched else None

    def __call__(self, unit: np.ndarray) -> np.ndarray:
        """``unit + noise``, clipped to [-1, 1]."""
        n = len(unit)
        if self.batched:
            if n != self.rows:
                raise ValueError(f"the noise process holds {self.rows} rows (num_envs) but act() got a batch of {n}")
            eps = np.asarray(self.process.sample(), np.float64)
        else:
            eps = np.stack([np.asarray(self.process.sample(), np.float64) for _ in range(n)]) if n else \
                np.zeros((0, *self.action_shape))
        return np.clip(unit + eps.reshape(n, -1), -1.0, 1.0)

    def episodes_ended(self, stream: np.ndarray | None, done: np.ndarray) -> None:
        """Restart the process for ended episodes: the rows ``stream % num_envs`` when batched, else all."""
        reset = getattr(self.process, "reset", None)
        if not callable(reset) or not np.any(done):
            return
        if self.batched and stream is not None:
            reset(np.unique(np.asarray(stream)[np.asarray(done, bool)] % self.rows))
        else:
            reset()

    def state_dict(self) -> dict[str, np.ndarray]:
        fn = getattr(self.process, "state_dict", None)
        return {f"noise.{k}": np.asarray(v) for k, v in fn().items()} if callable(fn) else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        fn = getattr(self.process, "load_state_dict", None)
        own = {k[len("noise."):]: v for k, v in state.items() if k.startswith("noise.")}
        if callable(fn) and own:
            fn(own)
