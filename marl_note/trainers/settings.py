"""The run settings and their one owner: callbacks request changes, the run loop applies them.

A running :class:`~marl_note.trainers.DecentralizedTrainer` has settings that may change between
update rounds: its ``batch_size`` and ``update_freq``, and each learner's learning rates and
adjustable hyperparameters (``agent.hyperparameters()``: ``eps``, ``tau``, ``gamma``, ``alpha``,
``beta``, ``window_size``, ...). A callback or hook asks for a change with
``trainer.request(...)``; :class:`RunSettings` checks the request at once (an unknown setting or a
bad value raises, naming it, and nothing is queued) and keeps it until the run loop applies every
pending change at one point of its cycle: after a collection chunk's ``on_collect_end`` callbacks,
before that chunk's update round (requests made in ``on_train_begin`` are applied before the first
chunk). In a distributed run only rank 0 runs callbacks; the run loop broadcasts rank 0's changes
once per round and every rank applies the same ones, so the ranks keep taking equal steps.

Each applied change is logged once: it joins the run's series (``settings/<name>``, drawn on the
plot), the returned statistics (``stats["setting_changes"]``: ``episodes``, ``env_steps``,
``setting``, ``learner``, ``old``, ``new``) and the metrics of the next update that the callbacks
see (``settings/<name>``, e.g. written by the TensorBoard callback).

Example:
    >>> import gymnasium as gym
    >>> from marl_note.agents.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
    >>> settings = RunSettings(batch_size=32, update_freq=100)
    >>> settings.start([agent], ["agent_0/"])
    >>> settings.request(batch_size=64, learning_rate=1e-2)
    >>> changes = settings.apply(settings.pending())
    >>> settings.batch_size, agent.learning_rates(), [c["setting"] for c in changes]
    (64, {'optimizer': 0.01}, ['batch_size', 'agent_0/lr.optimizer'])
    >>> settings.request(hyperparameters={"epsilon": 0.1})
    Traceback (most recent call last):
    ...
    KeyError: "cannot request hyperparameter 'epsilon' of DQN: its adjustable hyperparameters are ['eps', 'gamma', \
'window_size']"
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from marl_note.agents.base import Tunable
from marl_note.validation import MAX_COUNT, positive_float, positive_int

__all__ = ["RunSettings"]

# a pending change: (learner index or None for the trainer's own settings, name, value)
Change = tuple[int | None, str, float]


class RunSettings:
    """The trainer's ``batch_size`` and ``update_freq`` and the queue of requested changes.

    ``check_batch`` (default none) is an extra check of a requested batch size, e.g. that it splits
    evenly over the ranks of a distributed run. See the module docstring for the cycle.

    Example:
        >>> settings = RunSettings(batch_size=32, update_freq=100)
        >>> settings.request(update_freq=50)
        Traceback (most recent call last):
        ...
        RuntimeError: trainer.request() changes the settings of a run in progress (call it from a callback or hook \
during train()); outside a run set trainer.batch_size / trainer.update_freq, or the agent's set_learning_rate / \
set_hyperparameter
        >>> settings.start([], [])
        >>> settings.request(update_freq=50)
        >>> settings.apply(settings.pending()), settings.update_freq
        ([{'setting': 'update_freq', 'learner': None, 'old': 100.0, 'new': 50.0}], 50)
    """

    def __init__(self, batch_size: int, update_freq: int, check_batch: Callable[[int], Any] | None = None):
        self.batch_size = positive_int("batch_size", batch_size, maximum=MAX_COUNT)
        self.update_freq = positive_int("update_freq", update_freq, maximum=MAX_COUNT)
        self.check_batch = check_batch
        self.learners: list[Any] = []
        self.labels: list[str] = []
        self.running = False
        self._pending: dict[tuple[int | None, str], float] = {}

    # -- a run ---------------------------------------------------------------------------------------
    def start(self, learners: Sequence[Any], labels: Sequence[str]) -> None:
        """A run begins with these learners (``labels``: each one's prefix in logs); nothing is pending."""
        self.learners, self.labels = list(learners), list(labels)
        self._pending.clear()
        self.running = True

    def stop(self) -> None:
        """The run ended: requests made after it are refused; unapplied ones are dropped."""
        self.running = False
        self._pending.clear()

    # -- requests ------------------------------------------------------------------------------------
    def request(self, *, batch_size: Any = None, update_freq: Any = None, learning_rate: Any = None,
                hyperparameters: Mapping[str, Any] | None = None, agent: Any = None) -> None:
        """Queue changes (see ``DecentralizedTrainer.request``); everything is checked before anything is queued."""
        if not self.running:
            raise RuntimeError("trainer.request() changes the settings of a run in progress (call it from a "
                               "callback or hook during train()); outside a run set trainer.batch_size / "
                               "trainer.update_freq, or the agent's set_learning_rate / set_hyperparameter")
        changes: list[Change] = []
        if batch_size is not None:
            changes.append((None, "batch_size", float(self.checked_batch_size(batch_size))))
        if update_freq is not None:
            changes.append((None, "update_freq", float(positive_int("update_freq", update_freq,
                                                                    "env steps per chunk", MAX_COUNT))))
        if learning_rate is not None or hyperparameters is not None or agent is not None:
            changes.extend(self._agent_changes(self._learner_index(agent), learning_rate, hyperparameters))
        for owner, name, value in changes:
            self._pending[(owner, name)] = value

    def checked_batch_size(self, value: Any) -> int:
        batch = positive_int("batch_size", value, "rows per gradient step", MAX_COUNT)
        if self.check_batch is not None:
            self.check_batch(batch)
        return batch

    def _learner_index(self, agent: Any) -> int:
        if agent is None:
            if len(self.learners) != 1:
                raise ValueError(f"this run has {len(self.learners)} learners: pass agent= to say whose "
                                 f"learning_rate or hyperparameters to change")
            return 0
        for index, learner in enumerate(self.learners):
            if learner is agent:
                return index
        raise ValueError(f"agent= must be one of this run's learners (trainer.learners), got a "
                         f"{type(agent).__name__} that does not learn in this run")

    def _agent_changes(self, index: int, learning_rate: Any, hyperparameters: Any) -> list[Change]:
        agent = self.learners[index]
        who = type(agent).__name__
        if not isinstance(agent, Tunable):
            raise TypeError(f"{who} has no adjustable settings (learning_rates(), set_learning_rate(), "
                            f"hyperparameters(), set_hyperparameter()): it cannot take a requested change")
        out: list[Change] = []
        if learning_rate is not None:
            rates = agent.learning_rates()
            if isinstance(learning_rate, Mapping):
                unknown = [n for n in learning_rate if n not in rates]
                if unknown:
                    raise KeyError(f"cannot request the learning rate of {who}'s optimizer {unknown[0]!r}: "
                                   f"its optimizers are {list(rates)}")
                wanted = dict(learning_rate)
            else:
                wanted = dict.fromkeys(rates, learning_rate)
            out += [(index, f"lr.{n}", positive_float(f"learning_rate of {n}", lr)) for n, lr in wanted.items()]
        if hyperparameters is not None:
            if not isinstance(hyperparameters, Mapping):
                raise TypeError(f"hyperparameters must be a dict {{name: value}}, got {type(hyperparameters).__name__}")
            known = agent.hyperparameters()
            for name, value in hyperparameters.items():
                if name not in known:
                    raise KeyError(f"cannot request hyperparameter {name!r} of {who}: its adjustable "
                                   f"hyperparameters are {sorted(known)}")
                out.append((index, str(name), _finite(name, value)))
        return out

    def pending(self) -> list[Change]:
        """The queued changes in the order they were first requested (the queue is emptied)."""
        out = [(index, name, value) for (index, name), value in self._pending.items()]
        self._pending.clear()
        return out

    # -- applying ------------------------------------------------------------------------------------
    def apply(self, changes: Sequence[Change]) -> list[dict[str, Any]]:
        """Apply ``changes`` (this rank's own, or rank 0's); returns those that changed a value, as
        ``{"setting", "learner", "old", "new"}`` (``learner``: its index, None for the trainer's)."""
        done = []
        for index, name, value in changes:
            if index is None:
                old = float(getattr(self, name))
                setattr(self, name, int(value))
                new = float(int(value))
            else:
                agent: Any = self.learners[index]
                if name.startswith("lr."):
                    optimizer = name[len("lr."):]
                    old = float(agent.learning_rates()[optimizer])
                    new = float(agent.set_learning_rate(value, optimizer)[optimizer])
                else:
                    old = float(agent.hyperparameters()[name])
                    new = float(agent.set_hyperparameter(name, value))
            if new != old:
                label = "" if index is None else self.labels[index] if index < len(self.labels) else f"learner{index}/"
                done.append({"setting": f"{label}{name}", "learner": index, "old": old, "new": new})
        return done


def _finite(name: str, value: Any) -> float:
    try:
        if isinstance(value, (str, bytes, bool)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"hyperparameter {name} must be a number, got {type(value).__name__}") from None
    if not math.isfinite(number):
        raise ValueError(f"hyperparameter {name} must be finite, got {value!r}")
    return number
