"""The actor pool as the trainer's experience source: :class:`ActorPool`.

``DecentralizedTrainer(env, ..., source=ActorPool(actors=N, sync_every=K, **shard_options))``. A
chunk is the actors' round reports summing to ``update_freq`` env steps (the actors keep
collecting while the learner updates and tests); then every shard is drained into its learner's own
replay (``observe``: n-step, prioritized replay, augmentation and the exploration schedule work
as in the synchronous trainer), the learners update, and a learner that took ``sync_every``
gradient steps since its last publication publishes its acting state to the actors. The policy
lag (the learner's gradient steps minus the weight version its actors last acted with) is
recorded as ``policy_lag`` with each learner's update metrics. While the actors run, the learner's
PyTorch threads are capped (``learner_threads``, :mod:`marl_note.agents.threads`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from marl_note.agents.threads import limit_framework_threads
from marl_note.contrib.pool.league import check_matchmaker
from marl_note.contrib.pool.options import PoolOptions
from marl_note.contrib.pool.pool import Pool
from marl_note.trainers.collector import CollectStats

__all__ = ["ActorPool"]


class ActorPool:
    """An :class:`~marl_note.trainers.source.ExperienceSource` whose train envs live in actor processes.

    ``actors``: the number of actor processes; ``sync_every``: gradient steps between publications
    of a learner's acting state; ``shard_options``: :class:`~marl_note.contrib.pool.options.PoolOptions`
    (``window_size``, ``clearing_freq`` with ``window_size_``, ``random``, ``num_store``,
    ``shard_capacity``, ``actor_timeout``, ``backend``, ``address``, ``learner_threads``). An actor's
    error is raised in the trainer with its traceback.

    Example:
        >>> source = ActorPool(actors=2, sync_every=4, window_size=100)
        >>> source.options.actors, source.options.window_size, source.name
        (2, 100, 'pool')
    """

    name = "pool"

    def __init__(self, actors: int, sync_every: int = 1, **shard_options: Any):
        self.options = PoolOptions.build(actors, sync_every, shard_options)
        self.pool: Pool | None = None
        self.events: Any = None
        self.lag_sum, self.lag_count = 0.0, 0
        self._restore_threads: Any = None
        self.trainer: Any = None

    def check(self, trainer: Any, matchmaker: Any = None) -> None:
        if trainer.processes is not None:
            raise ValueError("the actor pool already steps the train envs in its actor processes; "
                             "leave processes=None")
        if trainer.distributed.distributed:
            raise ValueError("the actor pool and distributed= cannot be combined yet: run the actor pool in one "
                             "process")
        check_matchmaker(matchmaker)

    def start(self, trainer: Any, seats: Sequence[Any], learn: Sequence[bool], explore: Sequence[bool],
              seed: int | None, events: Any, matchmaker: Any = None) -> list[Any]:
        self.trainer = trainer  # its collect_limit (a budget) is asked while the learner waits for rounds
        learners: list[Any] = []
        for agent, ln in zip(seats, learn):
            if ln and not any(agent is a for a in learners):
                learners.append(agent)
        self.events = events if any(events.hooks().values()) else None
        self.lag_sum, self.lag_count = 0.0, 0
        pool_class: Any = Pool
        if self.options.backend == "ray":
            from marl_note.contrib.pool.ray_backend import RayPool  # imports Ray, which only this backend needs
            pool_class = RayPool
        cap = self.options.learner_thread_cap()  # the actors' cores are not the learner's
        self._restore_threads = limit_framework_threads(cap) if cap is not None else None
        self.pool = pool_class(trainer, list(seats), learners, list(explore), list(learn), self.options, seed,
                               matchmaker=matchmaker)
        return self.pool.learners

    def collect(self, env_steps: int) -> CollectStats:
        pool = self.pool
        assert pool is not None, "start() first"
        stats = CollectStats()
        league = pool.league
        limit = self.trainer.collect_limit if self.trainer is not None else None
        stop = None if limit is None else (lambda steps: bool(limit("train", steps)))
        for _, actor, steps, agent_steps, returns, lengths, _, _, tags, _ in pool.wait_rounds(env_steps, stop):
            stats.env_steps += steps
            stats.agent_steps += agent_steps
            stats.episodes += len(returns)
            stats.returns.extend(np.asarray(r, np.float64) for r in returns)
            stats.lengths.extend(lengths)
            tags = [league.tag_name(tag) for tag in tags] if league is not None else tags
            stats.tags.extend(tags)
            if self.events is not None:
                for r, n, tag in zip(returns, lengths, tags):
                    self.events.begin(actor)
                    self.events.end(actor, np.asarray(r, np.float64), n, tag)
        pool.feed()
        return stats

    def after_collect(self) -> None:
        assert self.pool is not None
        self.pool.publish_league()  # the opponent pool's new snapshots and PFSP probabilities

    def update(self, index: int, learner: Any, batch_size: int) -> dict[str, Any]:
        pool = self.pool
        assert pool is not None
        before = pool.lag(index)  # synchronous: the lag of the data this update learns from
        metrics = dict(learner.update(batch_size) or {})
        if pool.synchronous:  # every weight change reaches the next round
            if learner.updates != pool.published[index]:
                pool.publish(index)
        elif learner.updates - pool.published[index] >= pool.options.sync_every:
            pool.publish(index)
        lag = before if pool.synchronous else pool.lag(index)
        metrics["policy_lag"] = lag
        self.lag_sum, self.lag_count = self.lag_sum + lag, self.lag_count + 1
        return metrics

    def after_update(self) -> None:
        assert self.pool is not None
        self.pool.release()

    def close(self) -> dict[str, Any]:
        """What the run's statistics report about the pool (read before the pool closes), then close it."""
        pool = self.pool
        if pool is None:
            return {}
        try:
            return {"actors": len(pool.procs), "transitions_per_actor": pool.rows_per_actor.tolist(),
                    "evicted": pool.evicted(), "actor_frameworks": sorted(pool.frameworks),
                    "published_versions": list(pool.published),
                    "league_versions": pool.league_versions.tolist(),
                    "learner_threads": self.options.learner_thread_cap(),
                    "mean_policy_lag": self.lag_sum / self.lag_count if self.lag_count else float("nan")}
        finally:
            pool.close()
            self.pool = None
            if self._restore_threads is not None:
                self._restore_threads()
                self._restore_threads = None
