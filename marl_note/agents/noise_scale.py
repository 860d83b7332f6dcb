"""The gradient noise scale (McCandlish et al., 2018, "An Empirical Model of Large-Batch Training").

With ``|G_B|^2`` the squared norm of the mean loss gradient over a batch of ``B`` samples,
``E|G_B|^2 = |G|^2 + tr(Sigma) / B`` (``G`` the true gradient, ``Sigma`` the per-sample gradient
covariance). Two batch sizes ``b_small < b_big`` give unbiased estimates of both terms
(:func:`noise_scale_terms`); :class:`GradientNoiseScale` smooths each with an exponential moving
average and divides: the simple noise scale ``B_simple = tr(Sigma) / |G|^2``, the batch size
beyond which a larger batch stops buying proportionally faster progress. Numpy only: a backend
supplies the squared norms; an agent's :class:`NoiseScaleProbe` (``agent.noise_scale``) measures them
on its own data.

Example:
    >>> est = GradientNoiseScale(smooth=0.0)
    >>> est.update(g_small_sq=3.0, b_small=1, g_big_sq=1.5, b_big=4)  # |G|^2 = 1, tr(Sigma) = 2
    2.0
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from marl_note.validation import positive_int

__all__ = ["GradientNoiseScale", "NoiseScaleProbe", "ReplaySignal", "noise_scale_terms"]


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


@dataclass(frozen=True)
class ReplaySignal:
    """What an agent's stored data says about sampling (read by adaptive control).

    ``ess``: prioritized sampling's effective sample size as a fraction of the items it samples from
    (None without prioritized replay or while it is empty); ``window_span``: the items the sampling
    window covers now (0 without a window); ``capacity``: the items the data holds when full (the
    replay's capacity, PPO's ``n_steps``); ``prioritized``: whether the replay has an ESS to follow.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), prioritized=True, buffer_size=100)
        >>> agent.noise_scale.replay_signal()
        ReplaySignal(ess=None, window_span=0, capacity=100, prioritized=True)
    """

    ess: float | None = None
    window_span: int = 0
    capacity: int = 0
    prioritized: bool = False


class NoiseScaleProbe:
    """An agent's gradient noise scale: ``|G_B|^2`` of its main loss on its own data, folded into an estimator.

    ``agent.noise_scale`` of every built-in agent (made on first use). :meth:`grad_sq_norm` measures one
    batch, :meth:`measure_batches` two (folded into :attr:`estimator`, a :class:`GradientNoiseScale`
    with smoothing 0.99; assign another to change it), :meth:`measure` two drawn from the agent's
    replay or rollout, :meth:`fold_replica` the pair a distributed gradient step gave for free.
    Measuring changes nothing of the agent's state (weights, optimiser slots, counters, generator);
    the estimator's own state is not in ``agent.state_dict()``, its reader saves it. :attr:`seconds`
    is ``(b_small, seconds, b_big, seconds)`` of the last measurement's two gradient passes.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.types import Transitions
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> rng = np.random.default_rng(0)
        >>> def batch(n):
        ...     return Transitions(obs=rng.normal(size=(n, 3)), act=rng.integers(0, 2, n), rew=rng.normal(size=n),
        ...         next_obs=rng.normal(size=(n, 3)), terminated=np.zeros(n, bool), truncated=np.zeros(n, bool))
        >>> probe = agent.noise_scale
        >>> probe.measure(8, 64, np.random.default_rng(0)) is None  # nothing stored yet
        True
        >>> b = probe.measure_batches(batch(8), batch(64))
        >>> probe.count, b == probe.b_simple, probe.seconds[0::2]
        (1, True, (8, 64))
    """

    def __init__(self, grad_sq_norm: Callable[[Any], float], passes: Callable[[int, int, np.random.Generator], Any],
                 batch: Callable[[int, np.random.Generator], Any], ready: Callable[[], bool],
                 rows: Callable[[], int], replica_pair: Callable[[str, int], Any] | None,
                 replay_signal: Callable[[], ReplaySignal]):
        self._grad_sq_norm, self._passes, self._batch = grad_sq_norm, passes, batch
        self._ready, self._rows, self._replica_pair, self._replay_signal = ready, rows, replica_pair, replay_signal
        self.estimator = GradientNoiseScale()
        self.seconds: tuple[int, float, int, float] | None = None

    # -- the estimate ------------------------------------------------------------------------------
    @property
    def b_simple(self) -> float:
        """The estimator's smoothed ``B_simple``."""
        return self.estimator.b_simple

    @property
    def count(self) -> int:
        """Measurements folded into the estimator."""
        return self.estimator.count

    @property
    def g_sq(self) -> float:
        return self.estimator.g_sq

    @property
    def trace_sigma(self) -> float:
        return self.estimator.trace_sigma

    # -- measuring ---------------------------------------------------------------------------------
    def grad_sq_norm(self, batch: Any) -> float:
        """``|G_B|^2``: the squared norm of the gradient of ``batch``'s mean main loss (DQN's TD loss, PPO's
        clipped surrogate + value loss, DDPG's / SAC's / MADDPG's critic loss), unclipped, over the
        parameters that loss trains; in a distributed run too ``batch``'s own, without communicating."""
        return float(self._grad_sq_norm(batch))

    def measure_batches(self, batch_small: Any, batch_big: Any) -> float:
        """``|G_B|^2`` of two batches (``len(batch_small) < len(batch_big)``; independent batches keep the
        estimate unbiased) folded into :attr:`estimator`; returns its smoothed ``B_simple``."""
        small, big = len(batch_small), len(batch_big)
        if not 0 < small < big:
            raise ValueError(f"measure_batches needs a non-empty batch_small smaller than batch_big, "
                             f"got {small} and {big} rows")
        return self._fold(lambda: self.grad_sq_norm(batch_small), small,
                          lambda: self.grad_sq_norm(batch_big), big)

    def measure(self, b_small: int, b_big: int, rng: np.random.Generator | None = None) -> float | None:
        """Two independent batches of ``b_small`` and ``b_big`` rows of the agent's own data drawn with ``rng``
        (not the agent's generator) through :meth:`measure_batches`; None while there is too little data
        (an off-policy agent: an empty replay; PPO: a rollout under ``b_big`` rows, measured as minibatches
        at the first step of an update, GAE over the rollout once)."""
        b_small = positive_int("b_small", b_small, "the small measurement batch")
        b_big = positive_int("b_big", b_big, "the big measurement batch")
        if b_small >= b_big:
            raise ValueError(f"b_small must be smaller than b_big, got b_small={b_small}, b_big={b_big}")
        passes = self._passes(b_small, b_big, np.random.default_rng() if rng is None else rng)
        return None if passes is None else self._fold(passes[0], b_small, passes[1], b_big)

    def _fold(self, small: Callable[[], float], b_small: int, big: Callable[[], float], b_big: int) -> float:
        clock = time.perf_counter()
        g_small = small()
        mid = time.perf_counter()
        g_big = big()
        self.seconds = (int(b_small), mid - clock, int(b_big), time.perf_counter() - mid)
        return self.estimator.update(g_small, b_small, g_big, b_big)

    def batch(self, size: int, rng: np.random.Generator) -> Any:
        """``size`` rows drawn uniformly (with replacement, by ``rng``) from the agent's replay, or None while
        it is empty (a buffer that cannot be read by index, HER, is sampled, which moves its generator)."""
        return self._batch(size, rng)

    def fold_replica(self, optimizer: str, rows: int) -> tuple[float, int, float, int] | None:
        """After a gradient step averaged over several replicas (torch ranks, a ``tf.distribute`` strategy's
        replicas), fold the measurement that step gave for free: each replica's own ``|g_r|^2`` (small
        batch: one replica's rows, averaged over the replicas) and the all-reduced ``|g|^2`` (big batch:
        the global batch) of ``optimizer``'s loss. ``rows``: the rows this process stepped on. Returns
        the pair folded in, None in one process or one replica (nothing folded)."""
        pair = self._replica_pair(optimizer, rows) if self._replica_pair is not None else None
        if pair is not None:
            self.estimator.update(*pair)
        return pair

    # -- what adaptive control reads ---------------------------------------------------------------
    def ready(self) -> bool:
        """Whether the agent's data can be measured now (PPO: a full rollout, which an update follows)."""
        return bool(self._ready())

    def rows(self) -> int:
        """The rows of data there are to measure on now (the replay's items, the rollout's rows)."""
        return int(self._rows())

    def replay_signal(self) -> ReplaySignal:
        """The agent's :class:`ReplaySignal` now."""
        return self._replay_signal()

    def __repr__(self) -> str:
        return f"NoiseScaleProbe({self.estimator!r})"
