"""Running statistics of a stream of numbers, for normalising value targets and rewards."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["RunningMeanStd"]


class RunningMeanStd:
    """Running mean and variance of a stream of numbers (MAPPO's value targets, QMIX's team rewards), merged
    batch by batch (Chan et al.'s parallel update, float64).

    Example:
        >>> r = RunningMeanStd()
        >>> r.update(np.array([1.0, 3.0]))
        >>> float(r.mean), float(r.var), r.normalize(np.array([3.0])).round(3).tolist()
        (2.0, 1.0, [1.0])
    """

    def __init__(self) -> None:
        self.mean, self.var, self.count = np.float64(0.0), np.float64(1.0), np.float64(0.0)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape(-1)
        if not len(x):
            return
        m, v, n = x.mean(), x.var(), float(len(x))
        total = self.count + n
        delta = m - self.mean
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + v * n + delta ** 2 * self.count * n / total) / total
        self.count = np.float64(total)

    @property
    def std(self) -> float:
        return float(np.sqrt(max(float(self.var), 1e-8)))

    def normalize(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, np.float64) - self.mean) / self.std).astype(np.float32)

    def denormalize(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, np.float64) * self.std + self.mean).astype(np.float32)

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        """``{prefix}.mean``, ``.var`` and ``.count`` (numpy scalars), for an agent's extra state."""
        return {f"{prefix}.{k}": np.asarray(getattr(self, k)) for k in ("mean", "var", "count")}

    def load(self, prefix: str, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state` wrote under ``prefix``.

        Example:
            >>> r = RunningMeanStd(); r.update(np.array([1.0, 3.0])); s = RunningMeanStd(); s.load("r", r.state("r"))
            >>> float(s.mean), float(s.count)
            (2.0, 2.0)
        """
        self.mean, self.var, self.count = (np.float64(np.asarray(state[f"{prefix}.{k}"]))
                                           for k in ("mean", "var", "count"))
