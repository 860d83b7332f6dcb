"""Where a run's experience comes from: the :class:`ExperienceSource` seam and the in-process source.

The trainer's loop (:class:`~marl_note.trainers.run_loop.RunLoop`) collects a chunk of
``update_freq`` env steps, updates every learner once, and tests when due. How the chunk is
collected is the source's business:

- :class:`CollectorSource` (the default): the train envs step in this process (or in env worker
  processes, ``processes=N``) through one :class:`~marl_note.trainers.collector.Collector`;
- :class:`marl_note.contrib.pool.ActorPool`: actor processes own the train envs, act with published
  copies of the policies and write into shared-memory shards the learner drains.

A source stores every learning seat's transitions in its learner during :meth:`~ExperienceSource.collect`
and runs each learner's update in :meth:`~ExperienceSource.update` (where it may publish weights and
add metrics such as ``policy_lag``); the loop owns the counters, the callbacks and the tests.

Example:
    >>> from marl_note.agents import RandomAgent
    >>> from marl_note.trainers import DecentralizedTrainer
    >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=10,
    ...                                episodes_per_train=2, test_freq=2, episodes_per_test=2, seed=0,
    ...                                source=CollectorSource())
    >>> isinstance(trainer.source, ExperienceSource)
    True
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from marl_note.trainers.collector import Collector, CollectStats
from marl_note.trainers.seats import joint_learner_of

__all__ = ["ExperienceSource", "CollectorSource"]


@runtime_checkable
class ExperienceSource(Protocol):
    """The seam between the trainer's loop and whatever steps the train envs.

    ``name`` keys the source's statistics in the run's returned statistics (when it has any).
    """

    name: str

    def check(self, trainer: Any, matchmaker: Any = None) -> None:
        """Refuse, before any work, a trainer setting or a matchmaker this source cannot serve."""

    def start(self, trainer: Any, seats: Sequence[Any], learn: Sequence[bool], explore: Sequence[bool],
              seed: int | None, events: Any, matchmaker: Any = None) -> list[Any]:
        """Begin a run; return the distinct learners (in seat order) that :meth:`update` will be asked about.

        ``events`` (:class:`~marl_note.trainers.callbacks.EpisodeEvents`) is told of every episode's
        start and end.
        """

    def collect(self, env_steps: int) -> CollectStats:
        """Step the train envs for (at least) ``env_steps`` env steps and store every learning seat's
        transitions in its learner; return the chunk's counters and finished episodes."""

    def after_collect(self) -> None:
        """The chunk's ``on_collect_end`` callbacks have run (an opponent pool's new snapshots are known)."""

    def update(self, index: int, learner: Any, batch_size: int) -> dict[str, Any]:
        """Run learner ``index``'s update with ``batch_size`` and return its metrics."""

    def after_update(self) -> None:
        """Every learner of the round has updated."""

    def close(self) -> dict[str, Any]:
        """End the run (on every exit path); return the source's statistics for the run's summary."""


class CollectorSource:
    """The default source: one :class:`~marl_note.trainers.collector.Collector` over the trainer's train envs.

    The envs are the trainer's (built once, reused by later ``train()`` calls); in a distributed run
    every rank collects on its own envs and each learner is prepared for synchronous gradient steps.

    Example:
        >>> source = CollectorSource()
        >>> source.name, source.close()
        ('collector', {})
    """

    name = "collector"

    def __init__(self) -> None:
        self.collector: Collector | None = None
        self.trainer: Any = None

    def check(self, trainer: Any, matchmaker: Any = None) -> None:
        return None

    def start(self, trainer: Any, seats: Sequence[Any], learn: Sequence[bool], explore: Sequence[bool],
              seed: int | None, events: Any, matchmaker: Any = None) -> list[Any]:
        hooks = events.hooks()
        # a joint learner gets the env's global state in its rows (JointTransitions.state)
        joint = any(ln and joint_learner_of(seat) is not None for seat, ln in zip(seats, learn))
        self.collector = Collector(trainer.train_envs(state=joint), trainer.spec, list(seats),
                                   explore=list(explore), learn=list(learn), matchmaker=matchmaker,
                                   check_finite=trainer.check_finite, episode_begin=hooks["episode_begin"],
                                   episode_end=hooks["episode_end"])
        self.collector.reset(seed=trainer.distributed.rank_seed(seed))
        self.trainer = trainer  # its collect_limit (a budget) is asked during each chunk
        for learner in self.collector.learners:  # rank 0's weights; gradients averaged from here on
            trainer.distributed.prepare(learner)
        return list(self.collector.learners)

    def collect(self, env_steps: int) -> CollectStats:
        assert self.collector is not None, "start() first"
        limit = self.trainer.collect_limit
        stats = self.collector.collect(n_steps=env_steps,
                                       stop=None if limit is None else lambda steps: limit("train", steps))
        self.collector.flush()
        return stats

    def after_collect(self) -> None:
        return None

    def update(self, index: int, learner: Any, batch_size: int) -> dict[str, Any]:
        return dict(learner.update(batch_size) or {})

    def after_update(self) -> None:
        return None

    def close(self) -> dict[str, Any]:
        return {}
