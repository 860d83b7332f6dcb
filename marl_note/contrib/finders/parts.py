"""The pieces of :mod:`marl_note.contrib.finders.finders`: the search callbacks, the agent snapshot that puts
an agent back after a search, the trainer a finder builds, and building and checking OptFinder's
candidates. numpy only, no framework import.

Example:
    >>> loss_value({"gradient_steps": 2, "critic_loss": 0.5, "actor_loss": -1.0}, None)
    ('critic_loss', 0.5)
    >>> loss_value({"gradient_steps": 0}, None) is None  # a round without a gradient step
    True
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.base import Acting, JointLearner, Saveable
from marl_note.agents.copies import TrainingSnapshot as Snapshot
from marl_note.agents.copies import rebuild
from marl_note.contrib.finders.results import smooth
from marl_note.trainers.trainer import DecentralizedTrainer

__all__ = ["LOSS_KEYS", "DEFAULTS", "LR_DEFAULTS", "SearchDone", "Snapshot", "LRSearch", "LossRecorder",
           "split_agent_or_factory", "make_trainer", "seats_of", "train_once", "loss_value", "checked_metric",
           "check_loss_key", "accepted_names", "check_candidates", "rebuild", "weights_of", "start_from"]

LOSS_KEYS = ("loss", "critic_loss", "value_loss")  # the update metric a search reads, first found
DEFAULTS = {"num_train_envs": 1, "num_test_envs": 1, "seed": 0}
LR_DEFAULTS = {**DEFAULTS, "episodes_per_train": 1000, "test_freq": 10**9, "episodes_per_test": 1}


class SearchDone(Exception):
    """Raised by a search callback to end its training run at once."""


# --------------------------------------------------------------------------- shared pieces

def split_agent_or_factory(obj: Any, who: str, signature: str) -> tuple[Any, Callable | None]:
    if isinstance(obj, (Acting, JointLearner)):
        return obj, None
    if callable(obj):
        return None, obj
    raise TypeError(f"{who} takes an agent or a factory {signature}, got {type(obj).__name__}")


def make_trainer(env: Any, kwargs: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[DecentralizedTrainer, bool]:
    """``(trainer, built here)``: ``env`` itself when it is a trainer, else a new one."""
    if isinstance(env, DecentralizedTrainer):
        if kwargs:
            raise TypeError(f"got a DecentralizedTrainer and trainer arguments {sorted(kwargs)}: set them on the "
                            f"trainer, or pass the env instead of the trainer")
        return env, False
    return DecentralizedTrainer(env, **{**defaults, **kwargs}), True


def seats_of(agent: Acting | JointLearner, trainer: DecentralizedTrainer) -> list[Any]:
    return list(agent.seat_agents()) if isinstance(agent, JointLearner) else [agent] * trainer.spec.num_agents


def train_once(trainer: DecentralizedTrainer, agent: Any, callback: Any, progress: bool) -> dict[str, Any]:
    seats = seats_of(agent, trainer)
    return trainer.train(seats, learning_mask=[1] * len(seats), plot=False, progress=progress, callbacks=[callback])


def loss_value(metrics: Mapping[str, Any], loss_key: str | None) -> tuple[str, float] | None:
    """``(key, loss)`` of an update round, None for a round without a gradient step."""
    keys = [loss_key] if loss_key is not None else list(LOSS_KEYS)
    for key in keys:
        if key in metrics:
            return key, float(metrics[key])
    if metrics.get("gradient_steps"):
        wanted = f"loss {loss_key!r}" if loss_key is not None else f"loss among {LOSS_KEYS}"
        raise KeyError(f"the update metrics hold no {wanted}; they hold {sorted(metrics)}: pass loss_key= one of them")
    return None


def checked_metric(metric: Any) -> str:
    if metric not in ("loss", "reward"):
        raise ValueError(f"metric must be 'loss' (per update round) or 'reward' (per training episode), got {metric!r}")
    return metric


def check_loss_key(loss_key: Any) -> str | None:
    if loss_key is not None and not isinstance(loss_key, str):
        raise TypeError(f"loss_key must be the name of an update metric (a str) or None, got {type(loss_key).__name__}")
    return loss_key


# --------------------------------------------------------------------------- search callbacks

class LRSearch:
    """The callback of one search: records points, raises the learning rate, stops the run."""

    def __init__(self, agent: Any, names: list[str], lrs: np.ndarray, metric: str, loss_key: str | None,
                 diverge: float, collapse: float, smoothing: float):
        self.agent, self.names, self.lrs, self.metric, self.loss_key = agent, names, lrs, metric, loss_key
        self.diverge, self.collapse, self.smoothing = diverge, collapse, smoothing
        self.index = 0  # of the learning rate in force
        self.points: list[tuple[float, float]] = []
        self.best = math.nan
        self.stop_reason = "budget"

    def on_update_end(self, trainer: Any, metrics: Mapping[str, Any], episodes: int) -> None:
        if self.metric != "loss":
            return
        found = loss_value(metrics, self.loss_key)
        if found is not None:
            self.loss_key, loss = found
            self._record(loss)
            self._advance(trainer, 1)

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        if self.metric != "reward":
            return
        for returns in stats.returns:  # every episode of the chunk ran at the rate in force during it
            self._record(float(np.mean(returns)))
        self._advance(trainer, len(stats.returns))

    def _record(self, value: float) -> None:
        self.points.append((float(self.lrs[self.index]), value))
        if not math.isfinite(value):
            self._stop("non-finite")
        now = float(smooth([v for _, v in self.points], self.smoothing)[-1])
        if self.metric == "loss":
            self.best = now if math.isnan(self.best) else min(self.best, now)
            if len(self.points) >= 3 and now - self.best > (self.diverge - 1.0) * abs(self.best):
                self._stop("diverged")
        else:
            self.best = now if math.isnan(self.best) else max(self.best, now)
            if len(self.points) >= 3 and self.best - now > (1.0 - self.collapse) * abs(self.best):
                self._stop("collapsed")
        if len(self.points) >= len(self.lrs):
            self._stop("done")

    def _advance(self, trainer: Any, steps: int) -> None:
        """The next rate, requested from the trainer: in force from the next update round on."""
        if steps:
            self.index = min(self.index + steps, len(self.lrs) - 1)
            lr = float(self.lrs[self.index])
            trainer.request(learning_rate=dict.fromkeys(self.names, lr), agent=self.agent)

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        raise SearchDone(reason)


class LossRecorder:
    """OptFinder's callback: the loss of every update round that took a gradient step."""

    def __init__(self, loss_key: str | None):
        self.loss_key = loss_key
        self.losses: list[float] = []

    def on_update_end(self, trainer: Any, metrics: Mapping[str, Any], episodes: int) -> None:
        found = loss_value(metrics, self.loss_key)
        if found is not None:
            self.loss_key, loss = found
            self.losses.append(loss)


# --------------------------------------------------------------------------- OptFinder's candidates

def accepted_names(target: Callable, skip: int) -> set[str] | None:
    """Keyword names ``target`` takes after its first ``skip`` parameters (None: any, it has ``**kwargs``)."""
    params = list(inspect.signature(target).parameters.values())[skip:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def check_candidates(candidates: Any, agent: Any, factory: Callable | None) -> list[dict[str, Any]]:
    """OptFinder's candidates as dicts, unknown argument names refused (when the signature tells)."""
    if isinstance(candidates, (str, bytes, Mapping)) or not isinstance(candidates, Sequence):
        raise TypeError(f"candidates must be a list of dicts of constructor arguments, e.g. [{{'lr': 1e-3}}, "
                        f"{{'lr': 1e-4}}], got {type(candidates).__name__}")
    if not candidates:
        raise ValueError("candidates is empty: give at least one dict of constructor arguments to try")
    if factory is None:
        if not isinstance(agent, Saveable):
            raise TypeError(f"OptFinder builds candidates from an agent's recorded constructor arguments "
                            f"(agent.config); {type(agent).__name__} has none: pass a factory(trainer, **candidate)")
        target, name = type(agent).__init__, type(agent).__name__
    else:
        target, name = factory, getattr(factory, "__name__", "factory")
    accepted = accepted_names(target, 1)  # after self / the trainer
    out = []
    for i, cand in enumerate(candidates):
        if not isinstance(cand, Mapping) or not all(isinstance(k, str) for k in cand):
            raise TypeError(f"candidate {i} must be a dict of constructor arguments by name, got {cand!r}")
        unknown = sorted(set(cand) - accepted) if accepted is not None else []
        if unknown:
            raise TypeError(f"candidate {i} {dict(cand)} has unknown argument(s) {unknown}: {name} takes "
                            f"{sorted(accepted or ())}")
        out.append(dict(cand))
    return out


def weights_of(agent: Any) -> dict[str, np.ndarray] | None:
    if not isinstance(agent, Saveable):
        return None
    state = agent.state_dict()
    return {k: np.array(state[k], copy=True) for k in agent.param_keys(state)}


def start_from(agent: Any, reference: Mapping[str, np.ndarray] | None) -> bool:
    """Load ``reference`` weights into ``agent`` when they fit it exactly; whether they did."""
    own = weights_of(agent)
    if reference is None or own is None or own.keys() != reference.keys() or any(
            np.shape(own[k]) != np.shape(reference[k]) for k in own):
        return False
    agent.load_state_dict({**agent.state_dict(), **reference})
    return True
