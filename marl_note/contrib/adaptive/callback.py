"""The trainer-side applier: a callback that measures, asks the rules, and applies between updates.

After each collection chunk (``on_collect_end``: the new data are stored, no update is running)
:class:`Adaptive` measures the controlled agent's gradient noise scale on its own data
(``agent.noise_scale.measure``, two independent batches drawn with the callback's generator, no
agent state changed) and prioritized replay's effective sample size, asks each rule
(:mod:`marl_note.contrib.adaptive.rules`) for a value and requests it from the trainer
(``trainer.request``: the batch size and ``update_freq``, the learning rates, every other knob as a
hyperparameter), whose run loop applies it before the chunk's updates. The replay's sampling
window (``window_size``) is proposed from the window in effect (at most the stored items), and a
proposal that reaches every stored item opens it to its bound, so new data keep joining it. The callback also
times each update round and the collection before it (:class:`~marl_note.contrib.adaptive.cost.StepCost`),
what the batch rule's ``"time"`` objective weighs the noise scale against. The values of the round
join each update's metrics (``adaptive/<name>``, which logging callbacks listed after it see),
are drawn by ``plot_series()`` and travel in run checkpoints (``state_dict``; a resumed run sets
them again when it starts).
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.base import NoiseScaled, Tunable
from marl_note.agents.noise_scale import GradientNoiseScale
from marl_note.agents.registry import is_on_policy
from marl_note.contrib.adaptive.cost import StepCost
from marl_note.contrib.adaptive.rules import BatchRule, KnobRule
from marl_note.rng import rng_from_array, rng_to_array
from marl_note.trainers.series import Series
from marl_note.validation import positive_int

__all__ = ["Adaptive"]

_HISTORY = ("batch_size", "batch_target", "b_simple", "noise", "ess")


def _fraction(name: str, value: Any) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value}")
    return value


class Adaptive:
    """Adaptive batch size and hyperparameters of one learning agent, as a training callback.

    ``batch`` (a :class:`~marl_note.contrib.adaptive.rules.BatchRule` or None) and ``knobs``
    (``{name: KnobRule}``, names from :data:`~marl_note.contrib.adaptive.rules.KNOBS`) are the
    rules; build them with :func:`~marl_note.contrib.adaptive.adjust` or
    :func:`~marl_note.contrib.adaptive.adabatch`. ``agent`` is the agent controlled (default: the
    run's only learning agent). The noise scale is measured every ``every`` chunks on ``num_samples``
    and ``num_samples // 8`` rows, smoothed with ``smooth``; ``target_noise`` and ``target_ess`` are
    the signals' set points. The trainer's batch size is shared by its learners, so with several
    learners the controlled one decides it. A knob the agent cannot adjust is refused when training
    starts, before any work.

    Example:
        >>> from marl_note.contrib.adaptive import adabatch
        >>> cb = adabatch(batch_params={"min": 32, "max": 512, "align": 8})
        >>> type(cb).__name__, cb.batch.params["align"], sorted(cb.state_dict())[:2]
        ('Adaptive', 8.0, ['b_simple', 'batch.count'])
    """

    def __init__(self, batch: BatchRule | None, knobs: Mapping[str, KnobRule], *, target_noise: float = 1.0,
                 target_ess: float = 0.5, num_samples: int = 512, smooth: float = 0.95, every: int = 1,
                 agent: Any = None, seed: int | None = 0):
        self.batch, self.knobs = batch, dict(knobs)
        self.target_noise = _fraction("target_noise", target_noise)
        self.target_ess = _fraction("target_ess", target_ess)
        if self.target_ess > 1:
            raise ValueError(f"target_ess is a fraction of the stored items, in (0, 1]; got {self.target_ess}")
        self.num_samples = positive_int("num_samples", num_samples, "rows of the big measurement batch")
        if self.num_samples < 16:
            raise ValueError(f"num_samples must be at least 16 (the small batch is num_samples // 8), "
                             f"got {self.num_samples}")
        self.every = positive_int("every", every, "chunks between measurements")
        self.estimator = GradientNoiseScale(smooth)
        self.cost = StepCost()  # seconds of a gradient step, for the batch rule's "time" objective
        self.agent = agent
        self.rng = np.random.default_rng(seed)
        self.rounds = 0
        self.values: dict[str, float] = {}  # what was last applied (empty before the first round)
        self.last: dict[str, float] = {}
        self.history = {name: Series(f"adaptive/{name}", "callbacks") for name in (*_HISTORY, *self.knobs)}
        self._per_ess: float | None = None
        self._on_policy = False  # the agent's, decided when training starts
        self._trainer: Any = None
        # the timing of the current round: when the last phase we time ended, the update seconds, steps, batch
        self._mark: float | None = None
        self._round = {"update_s": 0.0, "steps": 0, "batch": 0}
        self._batch_from = 0.0

    # -- events ------------------------------------------------------------------------------------
    def on_train_begin(self, trainer: Any) -> None:
        self._trainer = trainer
        if self.agent is None:
            learners = trainer.learners
            if len(learners) != 1:
                raise ValueError(f"the adaptive callback controls one agent and this run has {len(learners)} "
                                 f"learning agents: pass agent=")
            self.agent = learners[0]
        agent = self.agent
        if not (isinstance(agent, NoiseScaled) and isinstance(agent, Tunable)):
            raise TypeError(f"{type(agent).__name__} cannot measure its gradient noise scale (a built-in agent can)")
        self._on_policy = is_on_policy(agent, default=False)
        adjustable = agent.hyperparameters()
        missing = [n for n in self.knobs if n != "update_freq" and n not in adjustable]
        if missing:
            raise ValueError(f"{type(agent).__name__} cannot adjust {missing} (it adjusts {sorted(adjustable)}; "
                             f"tau needs soft target updates, alpha and beta prioritized replay, window_size "
                             f"a replay with a sampling window)")
        if "window_size" in self.knobs:
            self._bound_window(agent)
        agent.noise_scale.estimator = self.estimator
        self._mark = None
        if self.values:  # a resumed run: set what the saved run had reached
            self._apply(dict(self.values))

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        self._time_round(stats)
        self.rounds += 1
        if self.rounds % self.every:
            return
        agent = self.agent
        probe = agent.noise_scale
        b_simple = math.nan
        if probe.ready():
            big = min(self.num_samples, probe.rows()) if self._on_policy else self.num_samples
            probe.seconds = None
            measured = probe.measure(max(2, big // 8), big, self.rng)
            b_simple = math.nan if measured is None else float(measured)
            if measured is not None and probe.seconds is not None:
                self.cost.add_probe(*probe.seconds)
        batch = int(trainer.batch_size)
        noise = None if math.isnan(b_simple) else b_simple / batch
        signal = probe.replay_signal()
        ess = self._per_ess if signal.ess is None else signal.ess
        current = {**{n: float(v) for n, v in agent.hyperparameters().items() if n in self.knobs},
                   "batch_size": float(batch)}
        if "update_freq" in self.knobs:
            current["update_freq"] = float(trainer.update_freq)
        span = float(signal.window_span)
        if "window_size" in self.knobs and span:
            current["window_size"] = min(current["window_size"], span)  # the window in effect
        proposal = dict(current)
        target = math.nan
        if self.batch is not None and not math.isnan(b_simple):
            proposal["batch_size"] = float(self.batch.propose(batch, b_simple=b_simple,
                                                              target_noise=self.target_noise, cost=self.cost))
            target = self.batch.last_target
        for name, rule in self.knobs.items():
            proposal[name] = rule.propose(current[name], noise=noise, target_noise=self.target_noise, ess=ess,
                                          target_ess=self.target_ess)
        if "window_size" in self.knobs and proposal["window_size"] >= span:  # every stored item: open it
            proposal["window_size"] = self.knobs["window_size"].params["max"]
        self._apply(proposal)  # distributed: callbacks run on rank 0, and the run loop sends the changes on
        self.last = {"b_simple": b_simple, "batch_target": target, "noise": math.nan if noise is None else noise,
                     "ess": math.nan if ess is None else ess, **self.values}
        for name, series in self.history.items():
            series.add(episodes, self.last.get(name, math.nan))

    # the cost of a gradient step: every learner's update is timed (the batch size is the trainer's, shared
    # by its learners), and the collection between the end of the last update or test and on_collect_end
    def on_batch_begin(self, trainer: Any, batch: int, logs: dict[str, Any]) -> None:
        self._batch_from = time.perf_counter()
        self._round["batch"] = int(trainer.batch_size)

    def on_update_end(self, trainer: Any, metrics: Any, episodes: int) -> None:
        self._mark = time.perf_counter()

    def on_test_end(self, trainer: Any, result: Any, episodes: int) -> None:
        self._mark = time.perf_counter()

    def _time_round(self, stats: Any) -> None:
        now, r = time.perf_counter(), self._round
        if self._mark is not None and r["steps"]:
            self.cost.add_round(batch=int(r["batch"]), update_s=float(r["update_s"]), gradient_steps=int(r["steps"]),
                                collect_s=now - self._mark, env_steps=int(stats.env_steps),
                                on_policy=self._on_policy)
        self._round = {"update_s": 0.0, "steps": 0, "batch": 0}

    def on_batch_end(self, trainer: Any, batch: int, logs: dict[str, Any]) -> None:
        self._round["update_s"] += time.perf_counter() - self._batch_from
        self._round["steps"] += int(logs.get("gradient_steps", 0) or 0)
        if "per_ess" in logs and self._on_policy:  # the rollout's ESS over its rows
            self._per_ess = float(logs["per_ess"]) / max(1, self.agent.noise_scale.replay_signal().capacity)
        logs.update({f"adaptive/{k}": v for k, v in self.last.items()})

    def plot_series(self) -> dict[str, list[tuple[int, float]]]:
        return {s.name: s.values() for s in self.history.values() if s.values()}

    # -- measuring and applying ----------------------------------------------------------------------
    def _bound_window(self, agent: Any) -> None:
        """The window rule's bounds within the replay's capacity; a uniform replay (no ESS to follow) is refused."""
        signal = agent.noise_scale.replay_signal()
        if not signal.prioritized:
            raise ValueError(f"window_size follows prioritized replay's effective sample size, and "
                             f"{type(agent).__name__}'s replay samples uniformly: use prioritized replay "
                             f"(prioritized=True) or set the window with set_hyperparameter")
        params = self.knobs["window_size"].params
        params["max"] = min(params["max"], float(signal.capacity))
        params["min"] = min(params["min"], params["max"])

    def _apply(self, values: Mapping[str, float]) -> None:
        """Request ``values`` from the trainer (applied by its run loop before the next update round), in
        order: a batch size change scales every learning rate by the batch rule's factor."""
        trainer, agent = self._trainer, self.agent
        rates = dict(agent.learning_rates())
        changed: set[str] = set()
        request: dict[str, Any] = {}
        hyperparameters: dict[str, float] = {}
        batch = int(trainer.batch_size)
        for name, value in values.items():
            if name == "batch_size" and self.batch is None:  # not adapted: only recorded
                self.values[name] = float(batch)
            elif name == "batch_size" and self.batch is not None:
                new = int(value)
                factor = self.batch.lr_factor(batch, new) if new != batch else 1.0
                if factor != 1.0:
                    rates = {opt: lr * factor for opt, lr in rates.items()}
                    changed.update(rates)
                batch = request["batch_size"] = new
                self.values[name] = float(new)
            elif name.startswith("lr."):
                rates[name[len("lr."):]] = float(value)
                changed.add(name[len("lr."):])
                self.values[name] = float(value)
            elif name == "update_freq":
                request["update_freq"] = int(value)
                self.values[name] = float(int(value))
            else:
                hyperparameters[name] = self.values[name] = float(value)
        if self.batch is not None and "batch_size" in values:
            self.values.update({f"lr.{opt}": lr for opt, lr in rates.items()})
        trainer.request(**request, learning_rate={opt: rates[opt] for opt in changed} or None,
                        hyperparameters=hyperparameters or None, agent=agent)

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Numpy arrays: the estimator, each rule's smoothed signal, the values in force, the rounds,
        the generator and the plotted history."""
        out = {f"estimator.{k}": v for k, v in self.estimator.state_dict().items()}
        if self.batch is not None:
            out.update({f"batch.{k}": v for k, v in self.batch.state_dict().items()})
        for name, rule in self.knobs.items():
            out.update({f"knob.{name}.{k}": v for k, v in rule.state_dict().items()})
        out.update({f"value.{k}": np.asarray(v, np.float64) for k, v in self.values.items()})
        out.update({f"history.{k}": np.asarray(s.values(), np.float64).reshape(-1, 2)
                    for k, s in self.history.items()})
        out.update(self.cost.state_dict())
        out["rounds"], out["rng"] = np.asarray(self.rounds, np.int64), rng_to_array(self.rng)
        out["b_simple"] = np.asarray(self.estimator.b_simple, np.float64)
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load :meth:`state_dict`'s arrays (checked first: on an error nothing has changed)."""
        estimator = GradientNoiseScale(self.estimator.smooth)
        estimator.load_state_dict({k[len("estimator."):]: v for k, v in state.items() if k.startswith("estimator.")})
        parts: list[tuple[Any, dict[str, Any]]] = []
        if self.batch is not None:
            parts.append((self.batch, {k[len("batch."):]: v for k, v in state.items() if k.startswith("batch.")}))
        for name, rule in self.knobs.items():
            prefix = f"knob.{name}."
            parts.append((rule, {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}))
        missing = [type(r).__name__ for r, part in parts if set(part) != {"mean", "count"}]
        if missing or "rounds" not in state or "rng" not in state:
            raise ValueError(f"adaptive state does not match this callback's rules (missing {missing or 'rounds/rng'})")
        values = {k[len("value."):]: float(np.asarray(v)) for k, v in state.items() if k.startswith("value.")}
        if not all(math.isfinite(v) for v in values.values()):
            raise ValueError(f"adaptive state holds non-finite values: {values}")
        rng = np.random.default_rng()
        rng_from_array(rng, state["rng"])
        cost = StepCost(self.cost.smooth)
        cost.load_state_dict(state)
        for rule, part in parts:
            rule.load_state_dict(part)
        self.estimator, self.values, self.rounds, self.rng = estimator, values, int(np.asarray(state["rounds"])), rng
        self.cost = cost
        for name, series in self.history.items():
            series.points.clear()
            for e, v in np.asarray(state.get(f"history.{name}", np.zeros((0, 2)))).reshape(-1, 2):
                series.add(int(e), float(v))
