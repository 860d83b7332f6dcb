"""The adaptive controllers' rules: numpy only, one proposal per update round.

Two signals drive them:

- ``noise = B_simple / B``, the gradient noise of the current batch size ``B`` relative to the
  true gradient: ``E|G_B - G|^2 / |G|^2 = tr(Sigma) / (B |G|^2)`` (``B_simple`` from
  :class:`~marl_note.agents.noise_scale.GradientNoiseScale`). At ``noise = 1`` the batch equals
  the noise scale, where McCandlish et al. (2018) put the best trade of steps against samples.
- ``ess``, the effective sample size of prioritized replay as a fraction of the stored items
  (``1 / sum_i P(i)^2 / N``, in ``(0, 1]``; 1 is uniform sampling).

Each knob has the original library's parameter dict: ``rate`` (the fraction of the distance to
the proposal moved per round, in ``(0, 1]``), ``min`` / ``max`` (bounds), ``smooth`` (weight of the
past in an exponential moving average of the signal, in ``[0, 1)``), ``scale`` (the sensitivity:
the exponent on the signal's ratio to its target; for the batch size, the multiple of
``B_simple`` aimed at) and ``align`` (round to a multiple; integers only). A knob moves in log
space (``gamma`` in the space of its horizon ``1 / (1 - gamma)``, ``beta`` in that of ``1 - beta``),
so ``rate`` and ``scale`` mean the same for every knob: with the smoothed ratio ``r`` of signal to
target, the knob moves to ``value * r ** (sign * scale * rate)``, then into ``[min, max]``.

Example:
    >>> rule = KnobRule("tau", {"rate": 1.0, "smooth": 0.0})
    >>> rule.propose(0.01, noise=4.0, target_noise=1.0, ess=None, target_ess=0.5)  # noisy: slower targets
    0.0025
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["KNOBS", "BatchRule", "KnobRule", "Params", "check_params"]

PARAM_NAMES = ("rate", "min", "max", "smooth", "scale", "align")
_FLOOR = 1e-6  # signals are clamped to [_FLOOR, 1 / _FLOOR] before their logarithm


@dataclass(frozen=True)
class Knob:
    """How one knob reads its signal: ``signal`` ("noise" or "ess"), ``sign`` (+1: the knob rises with
    the ratio signal/target, -1: it falls), the space it moves in and its default parameters.
    ``1 - beta`` moves against ``beta``, so in the "complement" space the sign flips."""

    signal: str
    sign: int
    space: str  # "log", "horizon" (gamma), "complement" (beta)
    defaults: Mapping[str, float]
    why: str


# The rules, each with the reason for its direction (documented in the module and the README).
KNOBS: dict[str, Knob] = {
    "alpha": Knob("ess", +1, "log", {"min": 0.05, "max": 1.0},
                  "ESS below target: sampling piles onto few items (high-variance, overfit batches), so "
                  "prioritize less; above: there is room to prioritize more"),
    "beta": Knob("ess", -1, "complement", {"min": 0.0, "max": 1.0},
                 "ESS below target: the sampling distribution is far from uniform and its bias larger, so "
                 "correct more (beta towards 1); above: less correction is needed"),
    "eps": Knob("noise", +1, "log", {"min": 0.01, "max": 1.0},
                "noise above target: the mean gradient has shrunk against the per-sample spread, the data "
                "have little left to teach, so explore more for new data; below: learning progresses on "
                "what it sees, so explore less"),
    "tau": Knob("noise", -1, "log", {"min": 1e-4, "max": 1.0},
                "noise above target: the online weights jitter, so the targets follow more slowly; below: "
                "they may follow faster"),
    "gamma": Knob("noise", -1, "horizon", {"min": 0.8, "max": 0.999},
                  "noise above target: shorten the horizon 1/(1-gamma), which lowers the variance of the "
                  "bootstrapped targets; below: lengthen it"),
    "clip_range": Knob("noise", -1, "log", {"min": 0.02, "max": 0.5},
                       "noise above target: the policy-gradient estimate is unreliable, so shrink PPO's trust "
                       "region; below: widen it"),
    "update_freq": Knob("noise", +1, "log", {"min": 1, "max": 10_000, "align": 1},
                        "noise above target: a gradient step buys little on the current data, so collect more "
                        "env steps between update rounds; below: update more often"),
    "window_size": Knob("ess", +1, "log", {"min": 1024, "max": math.inf, "align": 1},
                        "ESS below target: sample only the newest items; the oldest, whose priorities fell "
                        "well below the new items' (their TD errors were learnt, and data from old policies "
                        "are what prioritization already ignores), leave the sampled set, and dropping items "
                        "of less than about half the average probability raises the ESS fraction; above: "
                        "widen the window (bounded by the replay's capacity)"),
}


def check_params(name: str, params: Any, defaults: Mapping[str, float]) -> dict[str, float]:
    """A knob's parameter dict with the defaults filled in, checked (a clear error naming the knob).

    Example:
        >>> check_params("eps", {"rate": 0.5}, {"min": 0.01, "max": 1.0})["rate"]
        0.5
        >>> check_params("eps", {"speed": 1}, {})
        Traceback (most recent call last):
        ...
        ValueError: eps_params has unknown keys ['speed']; the keys are rate, min, max, smooth, scale, align
    """
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise TypeError(f"{name}_params must be a dict of {', '.join(PARAM_NAMES)}, got {type(params).__name__}")
    unknown = sorted(set(params) - set(PARAM_NAMES))
    if unknown:
        raise ValueError(f"{name}_params has unknown keys {unknown}; the keys are {', '.join(PARAM_NAMES)}")
    out = {"rate": 0.1, "min": 0.0, "max": math.inf, "smooth": 0.9, "scale": 1.0, "align": 0.0}
    out.update(defaults)
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}_params[{key!r}] must be a number, got {type(value).__name__}")
        out[key] = float(value)
    if not 0.0 < out["rate"] <= 1.0:
        raise ValueError(f"{name}_params['rate'] must be in (0, 1], got {out['rate']}")
    if not 0.0 <= out["smooth"] < 1.0:
        raise ValueError(f"{name}_params['smooth'] must be in [0, 1), got {out['smooth']}")
    if not (math.isfinite(out["scale"]) and out["scale"] > 0):
        raise ValueError(f"{name}_params['scale'] must be a positive number, got {out['scale']}")
    if not (out["align"] >= 0 and math.isfinite(out["align"])):
        raise ValueError(f"{name}_params['align'] must be >= 0 (0: no rounding), got {out['align']}")
    if not (out["min"] >= 0 and out["min"] <= out["max"]):
        raise ValueError(f"{name}_params needs 0 <= min <= max, got min={out['min']}, max={out['max']}")
    return out


Params = dict[str, float]


class _Smoothed:
    """A bias-corrected exponential moving average of a log-ratio (its state: mean, count)."""

    def __init__(self, smooth: float):
        self.smooth, self.mean, self.count = smooth, 0.0, 0

    def add(self, x: float) -> float:
        self.mean = self.smooth * self.mean + (1.0 - self.smooth) * x
        self.count += 1
        return self.mean / (1.0 - self.smooth ** self.count)


def _align(value: float, params: Params) -> float:
    align, lo, hi = params["align"], params["min"], params["max"]
    value = min(max(value, lo), hi)
    if align > 0:
        value = max(align, round(value / align) * align)
        while value > hi and value - align >= max(lo, align):
            value -= align
    return value


class KnobRule:
    """One knob's rule (see the module docstring and :data:`KNOBS` for the direction and why).

    ``propose(value, ...)`` returns the next value, or ``value`` unchanged while the knob's signal
    is missing (None or nan: no prioritized replay, no noise measurement yet); a noise of 0 or
    inf (the estimator's "no measurable noise" and "only noise") counts as 1e-6 or 1e6 times.

    Example:
        >>> rule = KnobRule("alpha", {"rate": 1.0, "smooth": 0.0})
        >>> round(rule.propose(0.6, noise=None, target_noise=1.0, ess=0.25, target_ess=0.5), 4)  # too peaked
        0.3
    """

    def __init__(self, name: str, params: Any = None):
        if name not in KNOBS:
            raise ValueError(f"unknown knob {name!r}; the knobs are {sorted(KNOBS)}")
        self.name, self.knob = name, KNOBS[name]
        self.params = check_params(name, params, self.knob.defaults)
        self._signal = _Smoothed(self.params["smooth"])

    def _to_space(self, value: float) -> float:
        if self.knob.space == "horizon":
            return 1.0 / max(1.0 - value, 1e-12)
        if self.knob.space == "complement":
            return max(1.0 - value, 1e-12)
        return max(value, 1e-12)

    def _from_space(self, x: float) -> float:
        if self.knob.space == "horizon":
            return 1.0 - 1.0 / x
        if self.knob.space == "complement":
            return 1.0 - x
        return x

    def propose(self, value: float, *, noise: float | None, target_noise: float, ess: float | None,
                target_ess: float) -> float:
        signal, target = (noise, target_noise) if self.knob.signal == "noise" else (ess, target_ess)
        if signal is None or math.isnan(signal):
            return value
        signal = min(max(signal, _FLOOR), 1.0 / _FLOOR)  # 0: no measurable noise; inf: only noise
        log_ratio = self._signal.add(math.log(signal / target))
        sign = self.knob.sign * (-1 if self.knob.space == "complement" else 1)
        p = self.params
        x = self._to_space(value) * math.exp(sign * p["scale"] * p["rate"] * log_ratio)
        return _align(self._from_space(x), p)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"mean": np.asarray(self._signal.mean, np.float64), "count": np.asarray(self._signal.count, np.int64)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        mean, count = float(np.asarray(state["mean"])), int(np.asarray(state["count"]))
        if not math.isfinite(mean) or count < 0:
            raise ValueError(f"{self.name} rule state is not valid: mean={mean}, count={count}")
        self._signal.mean, self._signal.count = mean, count


class BatchRule:
    """The batch size towards a target set by the noise scale ``B = scale * B_simple / target_noise``.

    ``objective="time"`` (the default) aims at the batch of least wall time to a given loss,
    ``sqrt(B * a / c)`` with a gradient step of ``B`` rows costing ``a + c * B`` seconds (env time
    included; :class:`~marl_note.contrib.adaptive.cost.StepCost` measures them): McCandlish et
    al.'s steps ``1 + B_noise / B`` times the cost of a step. ``objective="steps"`` aims at ``B``
    itself, where the batch's gradient noise equals ``target_noise`` (the trade of steps against
    samples, ignoring what a step costs). The log of the target is smoothed (``smooth``), the batch
    moves ``rate`` of the log distance per round, then into ``[min, max]`` and onto a multiple of
    ``align`` (e.g. the replica count). ``lr_rule`` scales the learning rate with the batch:
    ``"linear"`` (``lr * B_new / B_old``, Goyal et al. 2017), ``"sqrt"`` (``lr * sqrt(B_new /
    B_old)``, the rule that keeps the update's noise constant for Adam-like steps) or ``"none"``.

    Example:
        >>> rule = BatchRule({"rate": 1.0, "smooth": 0.0, "min": 16, "max": 1024, "align": 8}, objective="steps")
        >>> rule.propose(64, b_simple=250.0, target_noise=1.0)  # 250 -> the nearest multiple of 8
        248
        >>> from marl_note.contrib.adaptive.cost import StepCost
        >>> cost = StepCost(smooth=0.0)
        >>> cost.add_probe(64, 0.001, 512, 0.001 + 448 * 4e-6)  # 0.744 ms + 4 us a row
        >>> cost.add_round(batch=64, update_s=1.0, gradient_steps=1000, collect_s=0.256, env_steps=1000,
        ...                on_policy=False)  # 0.256 ms of env time a step: a = 1 ms, c = 4 us
        >>> BatchRule({"rate": 1.0, "smooth": 0.0}).propose(64, b_simple=400.0, target_noise=1.0, cost=cost)
        316
        >>> rule.lr_factor(64, 256), BatchRule(lr_rule="linear").lr_factor(64, 256)  # sqrt is the default
        (2.0, 4.0)
    """

    LR_RULES = ("linear", "sqrt", "none")
    OBJECTIVES = ("time", "steps")

    def __init__(self, params: Any = None, lr_rule: str = "sqrt", objective: str = "time"):
        self.params = check_params("batch", params, {"min": 16, "max": 4096, "align": 1, "smooth": 0.5,
                                                     "rate": 0.5})
        if self.params["min"] < 1:
            raise ValueError(f"batch_params['min'] must be at least 1, got {self.params['min']}")
        if lr_rule not in self.LR_RULES:
            raise ValueError(f"lr_rule must be one of {self.LR_RULES}, got {lr_rule!r}")
        if objective not in self.OBJECTIVES:
            raise ValueError(f"objective must be one of {self.OBJECTIVES}, got {objective!r}")
        self.lr_rule, self.objective = lr_rule, objective
        self._target = _Smoothed(self.params["smooth"])
        self.last_target = math.nan  # the target of the last propose (before smoothing and bounds)

    def target(self, b_simple: float, target_noise: float, cost: Any = None) -> float:
        """The batch this round aims at (before smoothing and bounds): ``nan`` without a measurement
        (or, for ``objective="time"``, without a cost estimate)."""
        if math.isnan(b_simple):
            return math.nan
        b_noise = self.params["scale"] * min(max(b_simple, _FLOOR), 1.0 / _FLOOR) / target_noise
        if self.objective == "steps":
            return b_noise
        return math.nan if cost is None else float(cost.best_batch(b_noise))

    def propose(self, batch: int, *, b_simple: float, target_noise: float, cost: Any = None) -> int:
        """The next batch size; unchanged without a target (see :meth:`target`), towards ``min`` when no
        noise is measurable (``B_simple = 0``), towards ``max`` when the noise hides the gradient (``inf``)."""
        target = self.last_target = self.target(b_simple, target_noise, cost)
        if math.isnan(target):
            return int(batch)
        p = self.params
        log_target = self._target.add(math.log(min(max(target, _FLOOR), 1.0 / _FLOOR)))
        new = math.exp(math.log(batch) + p["rate"] * (log_target - math.log(batch)))
        return int(_align(new, {**p, "align": max(p["align"], 1.0)}))

    def lr_factor(self, old: int, new: int) -> float:
        if self.lr_rule == "none" or old == new:
            return 1.0
        ratio = new / old
        return ratio if self.lr_rule == "linear" else math.sqrt(ratio)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"mean": np.asarray(self._target.mean, np.float64), "count": np.asarray(self._target.count, np.int64)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        mean, count = float(np.asarray(state["mean"])), int(np.asarray(state["count"]))
        if not math.isfinite(mean) or count < 0:
            raise ValueError(f"batch rule state is not valid: mean={mean}, count={count}")
        self._target.mean, self._target.count = mean, count
