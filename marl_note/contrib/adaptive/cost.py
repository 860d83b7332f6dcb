"""What a gradient step costs in wall time, as ``a + c * B``, with the env time each step carries.

McCandlish et al. (2018) model the gradient steps to a given loss as ``S(B) = S_min (1 + B_noise / B)``.
When one step of batch ``B`` costs ``a + c * B`` seconds, the wall time ``S(B) (a + c B)`` is least at
``B* = sqrt(B_noise * a / c)``: below it the fixed cost of each of the many steps dominates, above it
the rows beyond the noise scale buy little. :class:`StepCost` estimates ``a`` and ``c`` online from
three timings:

- the noise measurement's two gradient passes (``b_small`` and ``b_big`` rows; the agent records
  their seconds in ``agent.noise_scale.seconds``) split one pass into a fixed part and a per-row part;
- the update rounds give the real seconds per gradient step at the batch in use (sampling, optimiser
  and target updates included), which rescales that split;
- the collection chunks give the env seconds, which a gradient step carries in one of two ways: an
  off-policy learner (DQN, DDPG, SAC: a fixed number of gradient steps per env step) pays the same
  env time per step whatever its batch, so it joins ``a``; an on-policy learner (PPO: a fixed number
  of epochs over each rollout) collects ``B / epochs`` env steps per gradient step, so it joins
  ``c``.

Numpy only; each estimate is an exponential moving average, saved with the adaptive callback.

Example:
    >>> cost = StepCost(smooth=0.0)
    >>> cost.add_probe(64, 0.0012, 512, 0.0021)  # one pass: 1.07 ms + 2.0 us a row
    >>> cost.add_round(batch=256, update_s=0.16, gradient_steps=100, collect_s=0.04, env_steps=400,
    ...                on_policy=False)
    >>> a, c = cost.coefficients()
    >>> round(a * 1e3, 2), round(c * 1e6, 2)  # ms fixed (0.4 ms of env time joined it), us per row
    (1.48, 2.03)
    >>> round(cost.best_batch(50.0))  # sqrt(50 a / c)
    191
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["StepCost"]

_NAMES = ("fixed", "per_row", "step", "batch", "env_per_step", "env_per_row")


class StepCost:
    """Online estimates of the fixed and per-row seconds of a gradient step (see the module docstring).

    :meth:`coefficients` is None until both a probe (:meth:`add_probe`) and an update round
    (:meth:`add_round`) were seen. ``smooth`` is the weight of the past in the moving averages.
    """

    def __init__(self, smooth: float = 0.8):
        if not 0.0 <= float(smooth) < 1.0:
            raise ValueError(f"smooth must be in [0, 1), got {smooth}")
        self.smooth = float(smooth)
        self.values: dict[str, float] = {}  # the moving averages (absent: not seen yet)
        self.on_policy: bool | None = None

    def _fold(self, name: str, value: float) -> None:
        old = self.values.get(name)
        self.values[name] = value if old is None else self.smooth * old + (1.0 - self.smooth) * value

    def add_probe(self, b_small: int, t_small: float, b_big: int, t_big: float) -> None:
        """The seconds of one gradient pass over ``b_small`` and over ``b_big`` rows."""
        if not (0 < b_small < b_big and t_small >= 0 and t_big >= 0):
            raise ValueError(f"a cost probe needs 0 < b_small < b_big and times >= 0, got "
                             f"{b_small}, {t_small}, {b_big}, {t_big}")
        per_row = (t_big - t_small) / (b_big - b_small)  # averaged unclamped (unbiased), clamped when used
        self._fold("per_row", per_row)
        self._fold("fixed", t_small - per_row * b_small)

    def add_round(self, *, batch: int, update_s: float, gradient_steps: int, collect_s: float, env_steps: int,
                  on_policy: bool) -> None:
        """One collection chunk and the update round after it (at ``batch`` rows a gradient step)."""
        if gradient_steps <= 0 or batch <= 0:
            return  # nothing learnt this round (warm-up): no step to time
        self.on_policy = bool(on_policy)
        self._fold("step", update_s / gradient_steps)
        self._fold("batch", float(batch))
        if env_steps > 0:
            env_s = collect_s / gradient_steps  # env seconds per gradient step at this batch
            self._fold("env_per_row" if on_policy else "env_per_step", env_s / batch if on_policy else env_s)

    def coefficients(self) -> tuple[float, float] | None:
        """``(a, c)``: seconds of a gradient step of ``B`` rows are ``a + c * B``, env time included; None
        before a probe and a round. The probe's split of one pass is rescaled so that it gives the real
        step's seconds at the batch of the recent rounds."""
        v = self.values
        if "fixed" not in v or "step" not in v:
            return None
        fixed, per_row = max(v["fixed"], 0.0), max(v["per_row"], 0.0)
        if fixed + per_row * v["batch"] > 0:
            scale = v["step"] / (fixed + per_row * v["batch"])
            fixed, per_row = fixed * scale, per_row * scale
        a = fixed + v.get("env_per_step", 0.0)
        c = per_row + v.get("env_per_row", 0.0)
        return a, c

    def best_batch(self, b_noise: float) -> float:
        """``sqrt(b_noise * a / c)``, the batch of least wall time to a loss; ``nan`` without estimates,
        0 without noise, ``inf`` when a row costs nothing measurable."""
        coef = self.coefficients()
        if coef is None or math.isnan(b_noise):
            return math.nan
        a, c = coef
        if b_noise <= 0:
            return 0.0
        if c <= 0:
            return math.inf
        return math.sqrt(b_noise * a / c)

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {f"cost.{k}": np.asarray(v, np.float64) for k, v in self.values.items()}
        out["cost.on_policy"] = np.asarray(-1 if self.on_policy is None else int(self.on_policy), np.int64)
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        values = {k[len("cost."):]: float(np.asarray(v)) for k, v in state.items()
                  if k.startswith("cost.") and k != "cost.on_policy"}
        unknown = sorted(set(values) - set(_NAMES))
        signed = ("fixed", "per_row")  # one noisy probe may time the big pass faster than the small one
        if unknown or not all(math.isfinite(v) and (v >= 0 or k in signed) for k, v in values.items()):
            raise ValueError(f"step-cost state is not valid: {values}")
        flag = int(np.asarray(state.get("cost.on_policy", -1)))
        self.values, self.on_policy = values, None if flag < 0 else bool(flag)
