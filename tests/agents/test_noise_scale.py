"""The gradient noise scale estimator against a closed form, its smoothing, state and input checks."""
import math

import numpy as np
import pytest

from marl_note.agents.noise_scale import GradientNoiseScale, noise_scale_terms


def linear_regression_case(dim=5, dist_sq=1.0, noise_var=4.0):
    """Loss 0.5 (w.x - y)^2 with y = w*.x + eps, x ~ N(0, I), eps ~ N(0, noise_var), at w = w* + d.

    The per-sample gradient is g = (d.x - eps) x, so G = E[g] = d and, with Isserlis' theorem,
    E[g g^T] = (|d|^2 + noise_var) I + 2 d d^T: Sigma = (|d|^2 + noise_var) I + d d^T,
    tr(Sigma) = dim (|d|^2 + noise_var) + |d|^2 and |G|^2 = |d|^2.
    """
    d = np.full(dim, math.sqrt(dist_sq / dim))
    trace = dim * (dist_sq + noise_var) + dist_sq
    return d, trace, dist_sq


def batch_grad_sq(d, noise_var, batch, n, rng):
    """|G_B|^2 of ``n`` independent batches of size ``batch`` (numpy per-sample gradients)."""
    x = rng.normal(size=(n, batch, len(d)))
    eps = rng.normal(scale=math.sqrt(noise_var), size=(n, batch))
    g = ((x @ d - eps)[..., None] * x).mean(axis=1)
    return (g ** 2).sum(axis=1)


def test_matches_the_closed_form_of_linear_regression_within_ten_percent():
    noise_var = 4.0
    d, trace, g_sq = linear_regression_case(noise_var=noise_var)
    b_true = trace / g_sq  # 26
    rng = np.random.default_rng(0)
    n, b_small, b_big = 6000, 8, 128  # 20 seeds: within 6.5%, spread 2.7%
    small = batch_grad_sq(d, noise_var, b_small, n, rng)
    big = batch_grad_sq(d, noise_var, b_big, n, rng)
    est = GradientNoiseScale(smooth=0.9998)
    for s, b in zip(small, big, strict=True):
        est.update(s, b_small, b, b_big)
    assert est.b_simple == pytest.approx(b_true, rel=0.1)
    assert est.g_sq == pytest.approx(g_sq, rel=0.1)
    assert est.trace_sigma == pytest.approx(trace, rel=0.1)
    # the estimate is not the naive ratio: |G_small|^2 alone overstates |G|^2 by tr(Sigma)/b_small
    assert small.mean() == pytest.approx(g_sq + trace / b_small, rel=0.1)


def test_terms_are_exact_for_the_expected_squared_norms():
    # E|G_B|^2 = |G|^2 + tr(Sigma)/B recovered exactly from the expectations
    g_sq, trace = 0.7, 13.0
    got = noise_scale_terms(g_sq + trace / 4, 4, g_sq + trace / 64, 64)
    assert got == pytest.approx((g_sq, trace))


def test_smoothing_and_special_values():
    est = GradientNoiseScale(smooth=0.9)
    assert math.isnan(est.b_simple) and math.isnan(est.g_sq)
    # a single pair whose big-batch norm is too small for b_big: |G|^2 estimate negative -> inf
    assert est.update(1.0, 1, 0.1, 2) == math.inf
    est = GradientNoiseScale(smooth=0.0)
    # the big batch's norm exceeds the small one's: tr(Sigma) estimate negative -> 0
    assert est.update(1.0, 1, 2.0, 2) == 0.0
    # bias correction: one update of a slow average gives the measurement itself
    est = GradientNoiseScale(smooth=0.99)
    est.update(3.0, 1, 1.5, 4)
    assert (est.g_sq, est.trace_sigma, est.b_simple) == pytest.approx((1.0, 2.0, 2.0))


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(1)
    pairs = [(rng.uniform(2, 3), 4, rng.uniform(0.5, 1), 32) for _ in range(6)]
    a = GradientNoiseScale(smooth=0.8)
    for p in pairs[:3]:
        a.update(*p)
    b = GradientNoiseScale()
    b.load_state_dict(a.state_dict())
    for p in pairs[3:]:
        assert a.update(*p) == b.update(*p)
    assert b.smooth == 0.8 and b.count == 6
    with pytest.raises(KeyError, match="lacks"):
        b.load_state_dict({"smooth": 0.5})
    with pytest.raises(ValueError, match="not valid"):
        b.load_state_dict({**a.state_dict(), "g_sq": np.nan})


@pytest.mark.parametrize("args, error, match", [
    ((1.0, 8, 0.5, 8), ValueError, "b_small must be smaller than b_big"),
    ((1.0, 16, 0.5, 8), ValueError, "b_small must be smaller than b_big"),
    ((1.0, 0, 0.5, 8), ValueError, "b_small must be a positive integer"),
    ((1.0, 2.5, 0.5, 8), ValueError, "b_small must be a positive integer"),
    ((-1.0, 2, 0.5, 8), ValueError, "g_small_sq must be a finite non-negative"),
    ((1.0, 2, np.inf, 8), ValueError, "g_big_sq must be a finite non-negative"),
    ((1.0, 2, "x", 8), TypeError, "g_big_sq must be a number"),
])
def test_bad_input_raises_before_anything_changes(args, error, match):
    est = GradientNoiseScale(smooth=0.5)
    est.update(3.0, 1, 1.5, 4)
    before = est.state_dict()
    with pytest.raises(error, match=match):
        est.update(*args)
    after = est.state_dict()
    assert all(np.array_equal(v, after[k]) for k, v in before.items())


@pytest.mark.parametrize("smooth", [-0.1, 1.0, float("nan")])
def test_bad_smooth_raises(smooth):
    with pytest.raises(ValueError, match="smooth must be in"):
        GradientNoiseScale(smooth=smooth)
