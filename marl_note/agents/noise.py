"""Annealed Gaussian noise processes for continuous-action exploration, numpy only.

The keras-rl vocabulary: ``sigma`` goes linearly from ``sigma`` to ``sigma_min`` over
``n_steps_annealing`` calls to ``sample()`` (constant when ``sigma_min`` is None). Each process
owns a seedable ``numpy.random.Generator``; ``state_dict()`` holds the schedule position, the rng
state and (for Ornstein-Uhlenbeck) the current value, all as numpy arrays.

Also here: :func:`rng_state_to_array` / :func:`rng_state_from_array`, which save a PCG64
generator's state as a uint64 array so that agents can checkpoint their exploration rng in numpy.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from marl_note.agents.policies import LinearSchedule

__all__ = ["AnnealedGaussianProcess", "GaussianWhiteNoiseProcess", "OrnsteinUhlenbeckProcess",
           "rng_state_to_array", "rng_state_from_array"]


def _shape(size) -> tuple[int, ...]:
    return (int(size),) if np.isscalar(size) else tuple(int(s) for s in size)


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
        return {"n_steps": np.asarray(self.n_steps, np.int64), "rng": rng_state_to_array(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n_steps = int(np.asarray(state["n_steps"]))
        rng_state_from_array(self.rng, state["rng"])


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


# --------------------------------------------------------------------------- rng state as numpy

_MASK64 = (1 << 64) - 1


def rng_state_to_array(rng: np.random.Generator) -> np.ndarray:
    """The state of a PCG64 ``Generator`` as a uint64 array of 6 words (for numpy checkpoints).

    Example:
        >>> rng = np.random.default_rng(1); s = rng_state_to_array(rng); x = rng.random()
        >>> rng_state_from_array(rng, s); rng.random() == x
        True
    """
    st = rng.bit_generator.state
    if st["bit_generator"] != "PCG64":
        raise TypeError(f"only PCG64 generators can be saved, got {st['bit_generator']}")
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s >> 64, s & _MASK64, inc >> 64, inc & _MASK64, st["has_uint32"], st["uinteger"]],
                    dtype=np.uint64)


def rng_state_from_array(rng: np.random.Generator, arr: np.ndarray) -> None:
    """Restore a state saved by :func:`rng_state_to_array` into ``rng`` (in place)."""
    w = [int(x) for x in np.asarray(arr, np.uint64).reshape(-1)]
    if len(w) != 6:
        raise ValueError(f"expected a saved rng state of 6 words, got {len(w)}")
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4], "uinteger": w[5],
    }
