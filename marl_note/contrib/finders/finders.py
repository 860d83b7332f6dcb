"""Learning-rate and optimiser searches (the original ``LRFinder`` / ``OptFinder``), each one
:class:`~marl_note.trainers.trainer.DecentralizedTrainer` run with a callback: no second training loop.

- :class:`LRFinder` raises the learning rate geometrically from ``start_lr`` to ``end_lr`` over
  ``num`` points, one point per update round (``metric="loss"``) or per finished training episode
  (``metric="reward"``), stops early when the loss diverges or the return collapses, and then puts
  the agent back exactly as it was.
- :class:`OptFinder` trains one fresh agent per candidate (constructor overrides such as
  ``{"lr": 1e-3}`` or ``{"actor_lr": 1e-4, "critic_lr": 1e-3}``) from the same initial weights,
  with the same trainer seed and budget, and ranks them.

The agent sits in every seat of the env (a MADDPG in its ``seat_agents()``) and learns in all of
them. ``env`` is a :class:`DecentralizedTrainer` (used as it is) or anything it accepts as an env,
with its keyword arguments (``update_freq``, ``batch_size``, ``episodes_per_train``, ...) after
the finder's own; unless given, a finder's trainer has one train and one test env and ``seed=0``.

Example (a learning-rate range test of DQN on CartPole; the agent is unchanged afterwards):
    >>> import gymnasium as gym, numpy as np
    >>> from marl_note.agents.torch import DQN
    >>> env = gym.make("CartPole-v1")
    >>> agent = DQN(env.observation_space, env.action_space, hidden_sizes=(16,), learning_starts=64, seed=0)
    >>> before = agent.state_dict()
    >>> result = LRFinder(agent).find("CartPole-v1", start_lr=1e-4, end_lr=1e-1, num=8, update_freq=16,
    ...                               batch_size=32)
    >>> len(result), float(result.lrs[0]), result.stop_reason
    (8, 0.0001, 'done')
    >>> all(np.array_equal(before[k], v) for k, v in agent.state_dict().items())
    True
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.base import Tunable
from marl_note.contrib.finders.parts import (
    DEFAULTS,
    LOSS_KEYS,
    LR_DEFAULTS,
    LossRecorder,
    LRSearch,
    SearchDone,
    Snapshot,
    check_candidates,
    check_loss_key,
    checked_metric,
    make_trainer,
    rebuild,
    split_agent_or_factory,
    start_from,
    train_once,
    weights_of,
)
from marl_note.contrib.finders.results import LRFinderResult, OptFinderResult
from marl_note.trainers.trainer import DecentralizedTrainer
from marl_note.types import NonFiniteError
from marl_note.validation import positive_float, positive_int

__all__ = ["LRFinder", "OptFinder", "LOSS_KEYS"]


class LRFinder:
    """Learning-rate range test: train while the learning rate grows geometrically, record the curve.

    ``LRFinder(agent)`` searches with ``agent`` and afterwards puts it back exactly as it was (its
    ``state_dict()`` and replay contents are snapshotted and loaded back, and the transitions it
    held outside them restored; the search works on the agent itself, not on a copy), even when
    the search fails. ``LRFinder(factory)`` calls ``factory(trainer)`` for a throwaway agent
    instead. The agent needs ``learning_rates()`` / ``set_learning_rate()`` (every built-in agent
    and ``RL`` subclass has them). ``find`` returns (and keeps as ``finder.result``) an
    :class:`~marl_note.contrib.finders.results.LRFinderResult` with the curve, ``suggestion()`` and
    ``plot(path)``.

    Example (every optimiser of a DDPG searched together, the actor's rate kept):
        >>> import gymnasium as gym
        >>> from marl_note.agents.tf import DDPG
        >>> env = gym.make("Pendulum-v1")
        >>> finder = LRFinder(lambda trainer: DDPG(env.observation_space, env.action_space, hidden_sizes=(16,),
        ...                                        learning_starts=50, seed=0))
        >>> result = finder.find("Pendulum-v1", 1e-5, 1e-2, num=4, optimizer="critic_optimizer", update_freq=25)
        >>> result.loss_key, result.optimizers, len(result)
        ('critic_loss', ('critic_optimizer',), 4)
        >>> LRFinder(env).find("Pendulum-v1", start_lr=1e-2, end_lr=1e-3)
        Traceback (most recent call last):
        ...
        TypeError: LRFinder takes an agent or a factory factory(trainer) -> agent, got TimeLimit
    """

    def __init__(self, agent_or_factory: Any):
        self.agent, self.factory = split_agent_or_factory(agent_or_factory, "LRFinder", "factory(trainer) -> agent")
        self.result: LRFinderResult | None = None

    def find(self, env: Any, start_lr: float = 1e-6, end_lr: float = 1.0, num: int = 50, metric: str = "loss", *,
             optimizer: str | Sequence[str] | None = None, loss_key: str | None = None, diverge: float = 4.0,
             collapse: float = 0.5, smoothing: float = 0.8, progress: bool = False,
             **trainer_kwargs: Any) -> LRFinderResult:
        """Search learning rates ``geomspace(start_lr, end_lr, num)`` in one training run.

        - ``metric="loss"``: one point per update round that took a gradient step (its mean
          ``loss_key``: default the first of ``loss``, ``critic_loss``, ``value_loss``); stops
          when the smoothed loss exceeds ``diverge`` times its lowest value.
        - ``metric="reward"``: one point per finished training episode (its return, averaged over
          the seats), at the rate in force while its last chunk ran (episodes finishing in the same
          chunk share it: use one train env and a small ``update_freq`` for one rate per episode);
          stops when the smoothed return falls below ``collapse`` times its best.

        ``optimizer``: the optimiser(s) to search (names of ``agent.learning_rates()``; default all,
        set to the same rate). ``smoothing`` in [0, 1) weighs the past in the moving average
        (0: none). A NaN/inf step the agent refuses ends the search (``"non-finite"``). Without an
        explicit ``episodes_per_train`` the run is capped at 1000 episodes. Bad arguments raise
        before any env or agent is built.
        """
        start_lr = positive_float("start_lr", start_lr, "the first learning rate")
        end_lr = positive_float("end_lr", end_lr, "the last learning rate")
        if start_lr >= end_lr:
            raise ValueError(f"start_lr ({start_lr:g}) must be below end_lr ({end_lr:g}): the search raises the "
                             f"learning rate from start_lr to end_lr")
        if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 2:
            raise ValueError(f"num must be an integer >= 2 (the learning rates tried), got {num!r}")
        metric = checked_metric(metric)
        diverge = positive_float("diverge", diverge, "the loss growth over its best that stops the search")
        if diverge <= 1.0:
            raise ValueError(f"diverge must be > 1 (a multiple of the best loss), got {diverge}")
        collapse = positive_float("collapse", collapse, "the fraction of the best return that stops the search")
        if collapse >= 1.0:
            raise ValueError(f"collapse must be in (0, 1) (a fraction of the best return), got {collapse}")
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be a number in [0, 1), got {smoothing!r}")
        loss_key = check_loss_key(loss_key)
        lrs = np.geomspace(start_lr, end_lr, int(num))
        trainer, owned = make_trainer(env, trainer_kwargs, LR_DEFAULTS)
        try:
            agent = self.agent if self.factory is None else self.factory(trainer)
            if not isinstance(agent, Tunable):
                raise TypeError(f"LRFinder needs an agent with learning_rates() and set_learning_rate() (every "
                                f"built-in agent and RL subclass has them), got {type(agent).__name__}")
            names = list(agent.learning_rates()) if optimizer is None else \
                [optimizer] if isinstance(optimizer, str) else list(optimizer)
            search = LRSearch(agent, names, lrs, metric, loss_key, diverge, float(collapse), float(smoothing))
            snapshot = Snapshot(agent) if self.factory is None else None
            try:
                agent.set_learning_rate(float(lrs[0]), names)  # checks the names before anything changes
                train_once(trainer, agent, search, progress)
            except SearchDone:
                pass
            except NonFiniteError:
                search.points.append((float(lrs[search.index]), math.nan))
                search.stop_reason = "non-finite"
            finally:
                if snapshot is not None:
                    snapshot.restore(agent)
        finally:
            if owned:
                trainer.close()
        self.result = LRFinderResult(metric, np.array([p[0] for p in search.points]),
                                     np.array([p[1] for p in search.points]), float(smoothing), search.stop_reason,
                                     tuple(names), search.loss_key if metric == "loss" else None)
        return self.result


class OptFinder:
    """Train each candidate setting for the same budget from the same start and rank them.

    ``OptFinder(agent, candidates)`` builds each candidate as ``agent``'s class with ``agent``'s
    recorded constructor arguments (``agent.config``) and the candidate's overrides, and starts it
    from ``agent``'s current weights (``agent`` itself is not trained). ``OptFinder(factory,
    candidates)`` calls ``factory(trainer, **candidate)`` and starts every candidate from the first
    one's weights. A candidate whose architecture differs keeps its own initial weights (its row
    says ``same_init=False``). Every candidate is built, and so checked, before any training; an
    unknown argument name is refused at construction. Each then trains in one
    ``DecentralizedTrainer`` run with the same trainer (same seed, same budget).

    ``find`` returns (and keeps as ``finder.result``) an
    :class:`~marl_note.contrib.finders.results.OptFinderResult`: rows in rank order, ``best``,
    ``best_agent``, ``table()`` and ``plot(path)``.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> env = gym.make("CartPole-v1")
        >>> agent = DQN(env.observation_space, env.action_space, hidden_sizes=(16,), learning_starts=32, seed=0)
        >>> finder = OptFinder(agent, [{"lr": 1e-3}, {"lr": 1e-2, "double": False}])
        >>> result = finder.find("CartPole-v1", episodes_per_train=4, update_freq=16, episodes_per_test=2)
        >>> sorted(row["index"] for row in result.rows), result.rows[0]["same_init"]
        ([0, 1], True)
        >>> OptFinder(agent, [{"learning_rate": 1e-3}])
        Traceback (most recent call last):
        ...
        TypeError: candidate 0 {'learning_rate': 0.001} has unknown argument(s) ['learning_rate']: DQN takes [...]
    """

    def __init__(self, agent_or_factory: Any, candidates: Sequence[Mapping[str, Any]]):
        self.agent, self.factory = split_agent_or_factory(agent_or_factory, "OptFinder",
                                                     "factory(trainer, **candidate) -> agent")
        self.candidates = check_candidates(candidates, self.agent, self.factory)
        self.result: OptFinderResult | None = None

    def find(self, env: Any, metric: str = "reward", *, loss_key: str | None = None, tail: int = 10,
             progress: bool = False, **trainer_kwargs: Any) -> OptFinderResult:
        """Train every candidate, rank them and return the result.

        ``metric="reward"``: the mean of the run's test metrics (the trainer tests every
        ``test_freq`` episodes and at the end), higher first. ``metric="loss"``: the mean loss
        (``loss_key``, as for :class:`LRFinder`) over the last ``tail`` update rounds, lower first.
        A candidate stopped by a NaN/inf step ranks last (score NaN, ``diverged``).
        """
        metric = checked_metric(metric)
        loss_key = check_loss_key(loss_key)
        tail = positive_int("tail", tail, "update rounds averaged for the final loss")
        trainer, owned = make_trainer(env, trainer_kwargs, DEFAULTS)
        try:
            agents = [self._build(trainer, i, cand) for i, cand in enumerate(self.candidates)]
            reference = weights_of(self.agent if self.agent is not None else agents[0])
            rows: list[dict[str, Any]] = []
            for i, (cand, agent) in enumerate(zip(self.candidates, agents)):
                row = {"index": i, "candidate": cand, "same_init": start_from(agent, reference)}
                row.update(self._run(trainer, agent, metric, loss_key, tail, progress))
                rows.append(row)
        finally:
            if owned:
                trainer.close()
        order = sorted(range(len(rows)), key=lambda i: (math.isnan(rows[i]["score"]),
                                                        -rows[i]["score"] if metric == "reward" else rows[i]["score"]))
        ranked = [{"rank": r + 1, **rows[i]} for r, i in enumerate(order)]
        self.result = OptFinderResult(metric, ranked, best_agent=agents[order[0]])
        return self.result

    def _build(self, trainer: DecentralizedTrainer, i: int, cand: Mapping[str, Any]) -> Any:
        try:
            return rebuild(self.agent, cand) if self.factory is None else self.factory(trainer, **cand)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"OptFinder candidate {i} {dict(cand)}: {exc}") from exc

    @staticmethod
    def _run(trainer: DecentralizedTrainer, agent: Any, metric: str, loss_key: str | None, tail: int,
             progress: bool) -> dict[str, Any]:
        recorder = LossRecorder(loss_key)
        try:
            stats = train_once(trainer, agent, recorder, progress)
        except NonFiniteError as exc:
            return {"score": math.nan, "diverged": True, "error": str(exc), "episodes": None,
                    "gradient_steps": None, "losses": recorder.losses, "test_history": []}
        if metric == "reward":
            score = float(stats["reward_metric_stats"].get("mean", math.nan))
        else:
            score = float(np.mean(recorder.losses[-tail:])) if recorder.losses else math.nan
        return {"score": score, "diverged": False, "error": None, "episodes": stats["num_collected_episodes"],
                "gradient_steps": stats["num_gradient_steps"], "losses": recorder.losses,
                "test_history": stats["test_history"]}
