"""Annealed Gaussian noise processes for continuous-action exploration, numpy only.

The keras-rl vocabulary: ``sigma`` goes linearly from ``sigma`` to ``sigma_min`` over
``n_steps_annealing`` calls to ``sample()`` (constant when ``sigma_min`` is None). Each process
owns a seedable ``numpy.random.Generator``; ``state_dict()`` holds the schedule position, the rng
state and (for Ornstein-Uhlenbeck) the current value, all as numpy arrays.
:class:`ExplorationNoise` applies a process to a batch of actions in units of the half action range.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.exploration.policies import LinearSchedule
from marl_note.rng import rng_from_array, rng_to_array

__all__ = ["AnnealedGaussianProcess", "GaussianWhiteNoiseProcess", "OrnsteinUhlenbeckProcess", "ExplorationNoise"]


def _shape(size) -> tuple[int, ...]:
    return tuple(int(s) for s in np.atleast_1d(np.asarray(size, np.int64)))


class AnnealedGaussianProcess:
    """Base class: ``mu``, an annealed ``sigma``, a sample counter and an rng.

    Subclasses implement ``sample()`` (which must call ``self._tick()``) and may extend ``reset``.

    Example:
        >>> p = AnnealedGaussianProcess(sigma=1.0, sigma_min=0.5, n_steps_annealing=10)
        >>> p.current_sigma, p.schedule.value(10)
        (1.0, 0.5)
    """

    def __init__(self, mu=0.0, sigma: float = 1.0, sigma_min: float | None = None,
                 n_steps_annealing: int = 1000, size=1, seed: int | None = None):
        if sigma < 0 or (sigma_min is not None and sigma_min < 0):
            raise ValueError(f"sigma and sigma_min must be non-negative, got {sigma}, {sigma_min}")
        self.size = _shape(size)
        self.mu = np.broadcast_to(np.asarray(mu, np.float64), self.size).copy()
        self.schedule = LinearSchedule(sigma, sigma_min, n_steps_annealing)
        self.n_steps = 0
        self.rng = np.random.default_rng(seed)

    @property
    def current_sigma(self) -> float:
        return self.schedule.value(self.n_steps)

    def _tick(self) -> float:
        sigma = self.current_sigma
        self.n_steps += 1
        return sigma

    def sample(self) -> np.ndarray:
        raise NotImplementedError

    def reset(self, indices=None) -> None:
        """Start a new episode (the annealing schedule is not reset)."""

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"n_steps": np.asarray(self.n_steps, np.int64), "rng": rng_to_array(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n_steps = int(np.asarray(state["n_steps"]))
        rng_from_array(self.rng, state["rng"])


class GaussianWhiteNoiseProcess(AnnealedGaussianProcess):
    """Independent ``N(mu, sigma^2)`` samples of shape ``size`` with annealed ``sigma``.

    Example:
        >>> noise = GaussianWhiteNoiseProcess(sigma=1.0, sigma_min=0.0, n_steps_annealing=10, size=2, seed=0)
        >>> noise.sample().shape, [noise.sample() for _ in range(10)][-1].tolist()
        ((2,), [0.0, 0.0])
    """

    def __init__(self, mu=0.0, sigma: float = 1.0, sigma_min: float | None = None,
                 n_steps_annealing: int = 1000, size=1, seed: int | None = None):
        super().__init__(mu, sigma, sigma_min, n_steps_annealing, size, seed)

    def sample(self) -> np.ndarray:
        sigma = self._tick()
        return self.mu + sigma * self.rng.standard_normal(self.size)


class OrnsteinUhlenbeckProcess(AnnealedGaussianProcess):
    """Temporally correlated noise: ``x += theta * (mu - x) * dt + sigma * sqrt(dt) * N(0, 1)``.

    ``x`` starts at ``x0`` (zeros when None) and returns there on ``reset()``; with a batched
    ``size=(num_envs, action_dim)``, ``reset(indices)`` restarts only those rows.

    Example:
        >>> ou = OrnsteinUhlenbeckProcess(theta=0.15, mu=0.0, sigma=0.2, size=(4, 1), seed=0)
        >>> x = ou.sample(); x.shape
        (4, 1)
        >>> ou.reset([0]); ou.x_prev[0].tolist()
        [0.0]
    """

    def __init__(self, theta: float, mu=0.0, sigma: float = 1.0, dt: float = 1e-2, x0=None, size=1,
                 sigma_min: float | None = None, n_steps_annealing: int = 1000, seed: int | None = None):
        super().__init__(mu, sigma, sigma_min, n_steps_annealing, size, seed)
        if theta < 0 or dt <= 0:
            raise ValueError(f"need theta >= 0 and dt > 0, got theta={theta}, dt={dt}")
        self.theta = float(theta)
        self.dt = float(dt)
        self.x0 = None if x0 is None else np.broadcast_to(np.asarray(x0, np.float64), self.size).copy()
        self.x_prev: np.ndarray = np.zeros(self.size)
        self.reset()

    def sample(self) -> np.ndarray:
        sigma = self._tick()
        x = (self.x_prev + self.theta * (self.mu - self.x_prev) * self.dt
             + sigma * np.sqrt(self.dt) * self.rng.standard_normal(self.size))
        self.x_prev = x
        return x.copy()

    def reset(self, indices=None) -> None:
        start = np.zeros(self.size) if self.x0 is None else self.x0
        if indices is None:
            self.x_prev = start.copy()
        else:
            self.x_prev[indices] = start[indices]

    def state_dict(self):
        return {**super().state_dict(), "x_prev": self.x_prev.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.x_prev = np.array(state["x_prev"], np.float64).reshape(self.size)


class ExplorationNoise:
    """Adds a noise process to ``[B, dim]`` unit-range actions.

    ``process`` is any object with ``sample()`` (and optionally ``reset(indices)``,
    ``state_dict()``, ``load_state_dict()``), e.g. :class:`GaussianWhiteNoiseProcess` or
    :class:`OrnsteinUhlenbeckProcess`.
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
        self.rows = size[0] if self.batched and size is not None else None

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
