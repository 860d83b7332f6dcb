"""The gradient noise scale (McCandlish et al., 2018, "An Empirical Model of Large-Batch Training").

With ``|G_B|^2`` the squared norm of the mean loss gradient over a batch of ``B`` samples,
``E|G_B|^2 = |G|^2 + tr(Sigma) / B`` (``G`` the true gradient, ``Sigma`` the per-sample gradient
covariance). Two batch sizes ``b_small < b_big`` give unbiased estimates of both terms
(:func:`noise_scale_terms`); :class:`GradientNoiseScale` smooths each with an exponential moving
average and divides: the simple noise scale ``B_simple = tr(Sigma) / |G|^2``, the batch size
beyond which a larger batch stops buying proportionally faster progress. Numpy only: a backend
supplies the squared norms (e.g. ``DQN.grad_sq_norm``).

Example:
    >>> est = GradientNoiseScale(smooth=0.0)
    >>> est.update(g_small_sq=3.0, b_small=1, g_big_sq=1.5, b_big=4)  # |G|^2 = 1, tr(Sigma) = 2
    2.0
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.validation import positive_int

__all__ = ["GradientNoiseScale", "noise_scale_terms"]


def _squared_norm(name: str, value: Any) -> float:
    try:
        if isinstance(value, (str, bytes, bool, np.bool_)):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number (a squared gradient norm), got {type(value).__name__}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite non-negative number (a squared gradient norm), got {value!r}")
    return v


def noise_scale_terms(g_small_sq: float, b_small: int, g_big_sq: float, b_big: int) -> tuple[float, float]:
    """The unbiased estimates ``(|G|^2, tr(Sigma))`` from the squared norms of two batch-mean gradients.

    ``|G|^2 ~ (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)`` and
    ``tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/b_small - 1/b_big)``; either may come out
    negative on one noisy pair (that is what unbiased means), so smooth them before dividing.

    Example:
        >>> noise_scale_terms(3.0, 1, 1.5, 4)
        (1.0, 2.0)
        >>> noise_scale_terms(3.0, 4, 1.5, 4)
        Traceback (most recent call last):
        ...
        ValueError: b_small must be smaller than b_big, got b_small=4, b_big=4
    """
    g_small_sq = _squared_norm("g_small_sq", g_small_sq)
    g_big_sq = _squared_norm("g_big_sq", g_big_sq)
    b_small = positive_int("b_small", b_small, "the small batch size")
    b_big = positive_int("b_big", b_big, "the big batch size")
    if b_small >= b_big:
        raise ValueError(f"b_small must be smaller than b_big, got b_small={b_small}, b_big={b_big}")
    g_sq = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g_sq, trace


class GradientNoiseScale:
    """Smoothed estimates of ``|G|^2``, ``tr(Sigma)`` and ``B_simple = tr(Sigma) / |G|^2``.

    Each :meth:`update` turns one pair of squared batch-gradient norms into the unbiased terms of
    :func:`noise_scale_terms` and folds each into its own exponential moving average
    (``m <- smooth * m + (1 - smooth) * x``, bias-corrected as Adam's moments are, so the first
    update is not pulled towards zero); :attr:`b_simple` divides the averages. It is ``nan`` before
    the first update, ``inf`` while the smoothed ``|G|^2`` is not positive (the noise still hides
    the gradient) and ``0`` when the smoothed ``tr(Sigma)`` is negative. ``smooth=0`` keeps only
    the last pair. :meth:`state_dict` / :meth:`load_state_dict` carry it through checkpoints.

    Example:
        >>> est = GradientNoiseScale(smooth=0.5)
        >>> est.update(3.0, 1, 1.5, 4), est.update(6.0, 1, 2.25, 4)  # terms (1, 2), then (1, 5)
        (2.0, 4.0)
        >>> est.g_sq, est.trace_sigma, est.count
        (1.0, 4.0, 2)
        >>> again = GradientNoiseScale(smooth=0.5)
        >>> again.load_state_dict(est.state_dict())
        >>> again.b_simple
        4.0
        >>> GradientNoiseScale(smooth=1.0)
        Traceback (most recent call last):
        ...
        ValueError: smooth must be in [0, 1) (the weight of the past in the moving averages), got 1.0
    """

    def __init__(self, smooth: float = 0.99):
        try:
            smooth = float(smooth)
        except (TypeError, ValueError):
            raise TypeError(f"smooth must be a number in [0, 1), got {type(smooth).__name__}") from None
        if not 0.0 <= smooth < 1.0:
            raise ValueError(f"smooth must be in [0, 1) (the weight of the past in the moving averages), got {smooth}")
        self.smooth = smooth
        self.count = 0
        self._g_sq = 0.0  # uncorrected moving averages
        self._trace = 0.0

    def update(self, g_small_sq: float, b_small: int, g_big_sq: float, b_big: int) -> float:
        """Fold in one measurement (checked before anything changes); returns the new :attr:`b_simple`."""
        g_sq, trace = noise_scale_terms(g_small_sq, b_small, g_big_sq, b_big)
        s = self.smooth
        self._g_sq = s * self._g_sq + (1.0 - s) * g_sq
        self._trace = s * self._trace + (1.0 - s) * trace
        self.count += 1
        return self.b_simple

    def _corrected(self, value: float) -> float:
        return value / (1.0 - self.smooth ** self.count) if self.count else math.nan

    @property
    def g_sq(self) -> float:
        """The smoothed estimate of ``|G|^2`` (``nan`` before the first update)."""
        return self._corrected(self._g_sq)

    @property
    def trace_sigma(self) -> float:
        """The smoothed estimate of ``tr(Sigma)`` (``nan`` before the first update)."""
        return self._corrected(self._trace)

    @property
    def b_simple(self) -> float:
        """``tr(Sigma) / |G|^2`` of the smoothed terms (``nan``, ``inf`` or ``0`` as the class says)."""
        if not self.count:
            return math.nan
        if self._g_sq <= 0.0:
            return math.inf
        return max(self._trace, 0.0) / self._g_sq  # the bias corrections cancel

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"smooth": np.asarray(self.smooth, np.float64), "count": np.asarray(self.count, np.int64),
                "g_sq": np.asarray(self._g_sq, np.float64), "trace_sigma": np.asarray(self._trace, np.float64)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("smooth", "count", "g_sq", "trace_sigma") if k not in state]
        if missing:
            raise KeyError(f"GradientNoiseScale state lacks {missing}")
        smooth, count = float(np.asarray(state["smooth"])), int(np.asarray(state["count"]))
        g_sq, trace = float(np.asarray(state["g_sq"])), float(np.asarray(state["trace_sigma"]))
        if not 0.0 <= smooth < 1.0 or count < 0 or not (math.isfinite(g_sq) and math.isfinite(trace)):
            raise ValueError(f"GradientNoiseScale state is not valid: smooth={smooth}, count={count}, "
                             f"g_sq={g_sq}, trace_sigma={trace}")
        self.smooth, self.count, self._g_sq, self._trace = smooth, count, g_sq, trace

    def __repr__(self) -> str:
        return f"GradientNoiseScale(smooth={self.smooth}, count={self.count}, b_simple={self.b_simple:.4g})"
