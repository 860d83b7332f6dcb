"""Masked action-value primitives, numpy only: argmax, softmax and sampling over legal actions.

Every function takes ``values [B, n]`` and an optional boolean ``mask [B, n]`` (``True`` = legal);
illegal entries are set to ``-inf`` before any argmax or softmax, so nothing here returns an
illegal action, and every row must have at least one legal action. The exploration policies
(:mod:`marl_note.agents.exploration.policies`) and the algorithms' ``act`` are built on them.

Example:
    >>> import numpy as np
    >>> masked_softmax(np.zeros((1, 3)), np.array([[True, False, True]])).tolist()
    [[0.5, 0.0, 0.5]]
"""
from __future__ import annotations

import numpy as np

__all__ = ["check_values", "masked_values", "masked_argmax", "argmax_checked", "masked_softmax", "boltzmann_probs",
           "sample_categorical", "uniform_legal", "gumbel_noise"]


def check_values(values: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``(values, mask)`` checked: values 2-d, mask None or boolean of the same shape with a legal action per row."""
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"values must be a 2-d array [batch, num_actions], got shape {values.shape}")
    if mask is None:
        return values, None
    mask = np.asarray(mask)
    if mask.shape != values.shape:
        raise ValueError(f"mask shape {mask.shape} does not match values shape {values.shape}")
    mask = mask.astype(bool, copy=False)
    if not mask.any(axis=1).all():
        rows = np.flatnonzero(~mask.any(axis=1)).tolist()
        raise ValueError(f"mask rows {rows} have no legal action")
    return values, mask


def masked_values(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``values`` as float64 with illegal entries set to ``-inf``."""
    values, mask = check_values(values, mask)
    out = values.astype(np.float64, copy=True)
    if mask is not None:
        out[~mask] = -np.inf
    return out


def masked_argmax(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Index of the largest legal value per row (first one on ties).

    Example:
        >>> masked_argmax(np.array([[3., 1., 2.]]), np.array([[False, True, True]])).tolist()
        [2]
    """
    return argmax_checked(*check_values(values, mask))


def argmax_checked(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """:func:`masked_argmax` of a pair already through :func:`check_values` (the exploration
    policies check once). Illegal entries become ``-inf`` in the values' own float type: a
    float32 -> float64 cast is exact, so the order and the first-on-ties pick are the same.

    Example:
        >>> argmax_checked(np.array([[3., 1., 2.]], np.float32), np.array([[False, True, True]])).tolist()
        [2]
    """
    if mask is None:  # (no float64 copy: the cast is exact, the argmax the same)
        return values.argmax(axis=1).astype(np.int64)
    return np.where(mask, values, -np.inf).argmax(axis=1).astype(np.int64)


def masked_softmax(logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Row-wise softmax with exactly zero probability on illegal entries."""
    z = masked_values(logits, mask)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sample per row of ``probs`` (rows need not be exactly normalised).

    Zero-probability entries are never returned: the first index whose cumulative sum exceeds
    ``u * total`` always carries positive mass.
    """
    c = np.cumsum(probs, axis=1)
    u = rng.random(len(probs))[:, None] * c[:, -1:]
    return (c > u).argmax(axis=1).astype(np.int64)


def uniform_legal(mask: np.ndarray | None, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Uniform random legal action per row (uniform over all ``shape[1]`` actions without a mask)."""
    b, n = shape
    if mask is None:
        return rng.integers(0, n, size=b).astype(np.int64)
    counts = mask.sum(axis=1)
    k = (rng.random(b) * counts).astype(np.int64)
    return (np.cumsum(mask, axis=1) > k[:, None]).argmax(axis=1).astype(np.int64)


def boltzmann_probs(values: np.ndarray, mask: np.ndarray | None, tau: float,
                    clip: tuple[float, float] = (-500.0, 500.0)) -> np.ndarray:
    """``softmax(clip(values / tau))`` over legal actions (keras-rl's Boltzmann distribution)."""
    values, mask = check_values(values, mask)
    return masked_softmax(np.clip(values.astype(np.float64) / tau, *clip), mask)


def gumbel_noise(rng: np.random.Generator, shape) -> np.ndarray:
    """Standard Gumbel(0, 1) noise of ``shape``."""
    return rng.gumbel(size=shape)
