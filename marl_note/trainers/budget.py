"""A run's budget: env steps and/or wall-clock minutes, checked inside collection, whichever runs out first.

:class:`Budget` is a trainer callback (``callbacks=[Budget(env_steps=50_000)]``). It hands the trainer
a collection limit (:meth:`~marl_note.trainers.DecentralizedTrainer.limit_collection`), asked after
every step of the envs, so a training chunk stops where the budget runs out instead of at its end,
and the final test ends at the latest :data:`TEST_SLACK` of the wall-time budget after it, or after
as many env steps as the env-step budget, with the episodes it finished. The same limit is asked
before every gradient step of an update (:func:`~marl_note.agents.schedule.stop_updates_when`), so
a long update (PPO's epochs over a pixel rollout) ends with the wall-time budget too: a run stops
within 5% of its wall time (the saving aside; one gradient step is the finest grain), and an env
whose episodes never end under a poor policy still stops. The progress display counts against the same budget.

Example:
    >>> from marl_note.agents.numpy import DQN
    >>> from marl_note.trainers import DecentralizedTrainer
    >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=50,
    ...                                episodes_per_train=10_000, episodes_per_test=2, seed=0)
    >>> dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
    >>> stats = trainer.train([dqn], learning_mask=[1], callbacks=[Budget(env_steps=300)], plot=False,
    ...                       progress=False)
    >>> stats["stopped_by_budget"], 300 <= stats["num_collected_steps"] < 310
    ('env_steps', True)
"""
from __future__ import annotations

import time
from typing import Any

__all__ = ["Budget", "TEST_SLACK"]

TEST_SLACK = 0.03  # the share of a wall-time budget that a test may run past it


class Budget:
    """A trainer callback that ends training once ``env_steps`` env steps or ``minutes`` have been spent.

    Example:
        >>> budget = Budget(env_steps=1000)
        >>> budget.env_steps, budget.minutes
        (1000, None)
        >>> budget.limit("train", 999), budget.limit("train", 1000), budget.limit("test", 1000)
        (False, True, True)
    """

    def __init__(self, env_steps: int | None = None, minutes: float | None = None):
        if env_steps is not None and (isinstance(env_steps, bool) or not isinstance(env_steps, int) or env_steps < 1):
            raise ValueError(f"Budget(env_steps=...) must be a positive integer or None, got {env_steps!r}")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))
                                    or not minutes > 0):
            raise ValueError(f"Budget(minutes=...) must be a positive number or None, got {minutes!r}")
        self.env_steps, self.minutes = env_steps, minutes
        self.steps, self.started = 0, time.perf_counter()
        self.stopped_by: str | None = None

    def on_train_begin(self, trainer: Any) -> None:
        self.steps, self.started, self.stopped_by = 0, time.perf_counter(), None
        trainer.limit_collection(self.limit, env_steps=self.env_steps, minutes=self.minutes)

    def limit(self, kind: str, env_steps: int) -> bool:
        """The run's limit: True once a collection of ``kind`` (``"train"``/``"test"``) that has taken
        ``env_steps`` env steps so far must end, or (``"update"``) once an update must end its gradient
        steps: the wall-time budget is spent (an env-step budget never cuts an update)."""
        elapsed = time.perf_counter() - self.started
        if kind == "update":
            return self.minutes is not None and elapsed >= 60 * self.minutes
        if kind == "train":
            return bool((self.env_steps is not None and self.steps + env_steps >= self.env_steps)
                        or (self.minutes is not None and elapsed >= 60 * self.minutes))
        return bool((self.minutes is not None and elapsed >= 60 * self.minutes * (1 + TEST_SLACK))
                    or (self.env_steps is not None and env_steps >= self.env_steps))

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        self.steps += int(stats.env_steps)
        if self.env_steps is not None and self.steps >= self.env_steps:
            self.stopped_by = "env_steps"
        elif self.minutes is not None and time.perf_counter() - self.started >= 60 * self.minutes:
            self.stopped_by = "minutes"
        if self.stopped_by is not None:
            trainer.stop_training = True

    def on_train_end(self, trainer: Any, stats: dict[str, Any]) -> None:
        stats["stopped_by_budget"] = self.stopped_by
