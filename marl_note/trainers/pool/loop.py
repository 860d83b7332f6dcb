"""The learner's loop in pool mode: a :class:`~marl_note.trainers.run_loop.RunLoop` whose chunks come
from actor processes.

A chunk is the actors' round reports summing to ``update_freq`` env steps (the actors keep
collecting while the learner updates and tests); then every shard is drained into its learner's own
replay (``observe``: n-step, prioritized replay, augmentation and the exploration schedule work
as in the synchronous trainer), the learners update, and a learner that took ``sync_every``
gradient steps since its last publication publishes its acting state to the actors. The policy
lag (the learner's gradient steps minus the weight version its actors last acted with) is
recorded as ``policy_lag`` with each learner's update metrics. While the actors run, the learner's
PyTorch threads are capped (``learner_threads``, :mod:`marl_note.agents.threads`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from marl_note.agents.threads import limit_framework_threads
from marl_note.trainers.collector import CollectStats
from marl_note.trainers.pool.league import check_matchmaker
from marl_note.trainers.pool.pool import Pool
from marl_note.trainers.run_loop import RunLoop

__all__ = ["PoolRunLoop", "check_pool_run"]


def check_pool_run(matchmaker: Any) -> None:
    """Refuse, before any work, what the pool trainer does not support: a matchmaker other than an OpponentPool."""
    check_matchmaker(matchmaker)


@dataclass
class PoolRunLoop(RunLoop):
    """A run whose train envs live in the pool's actor processes (see the module docstring)."""

    pool: Pool | None = None
    events: Any = None  # EpisodeEvents, when a callback has an episode event
    lag_sum: float = 0.0
    lag_count: int = 0

    @property
    def learners(self) -> list[Any]:
        assert self.pool is not None
        return self.pool.learners

    def start(self, options: Any, seed: int | None, events: Any, matchmaker: Any = None) -> None:
        """Start the actors (the last step of ``train()``'s preparation)."""
        learners: list[Any] = []
        for agent, ln in zip(self.seats, self.learn):
            if ln and not any(agent is a for a in learners):
                learners.append(agent)
        self.events = events
        pool_class: Any = Pool
        if options.backend == "ray":
            from marl_note.trainers.pool.ray_backend import RayPool  # imports Ray, which only this backend needs
            pool_class = RayPool
        self.pool = pool_class(self.trainer, self.seats, learners, self.explore, self.learn, options, seed,
                               matchmaker=matchmaker)

    def loop(self, progress: bool) -> None:
        assert self.pool is not None
        cap = self.pool.options.learner_thread_cap()  # the actors' cores are not the learner's
        restore_threads = limit_framework_threads(cap) if cap is not None else None
        try:
            super().loop(progress)
        finally:
            self._final = self.pool_stats()
            self.pool.close()
            if restore_threads is not None:
                restore_threads()

    def _collect_chunk(self) -> None:
        t, run, pool = self.trainer, self.run, self.pool
        assert pool is not None
        if t.train_fn is not None:
            t.train_fn(run.episodes, run.env_steps)
        stats = CollectStats()
        league = pool.league
        for _, actor, env_steps, agent_steps, returns, lengths, _, _, tags, _ in pool.wait_rounds(t.update_freq):
            stats.env_steps += env_steps
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
        run.env_steps += stats.env_steps
        run.agent_steps += stats.agent_steps
        run.episodes += stats.episodes
        run.recent_returns = (run.recent_returns + [r.tolist() for r in stats.returns])[-100:]
        self.callbacks.fire("on_collect_end", t, stats, run.episodes)
        pool.publish_league()  # the opponent pool's new snapshots and PFSP probabilities

    def _update_learners(self) -> int:
        pool, recorder = self.pool, self.recorder
        assert pool is not None and recorder is not None
        steps = 0
        for index, learner in enumerate(pool.learners):
            self.callbacks.fire("on_batch_begin", self.trainer, self.batches,
                                {"learner": index, "episodes": self.run.episodes, "env_steps": self.run.env_steps})
            before = pool.lag(index)  # synchronous: the lag of the data this update learns from
            metrics = dict(learner.update(self.trainer.batch_size) or {})
            if pool.synchronous:  # every weight change reaches the next round
                if learner.updates != pool.published[index]:
                    pool.publish(index)
            elif learner.updates - pool.published[index] >= pool.options.sync_every:
                pool.publish(index)
            lag = before if pool.synchronous else pool.lag(index)
            metrics["policy_lag"] = lag
            self.lag_sum, self.lag_count = self.lag_sum + lag, self.lag_count + 1
            recorder.update(index, self.run.episodes, metrics, self.trainer.batch_size)
            self.run.updates += int(metrics.get("gradient_steps", 0))
            steps += int(metrics.get("gradient_steps", 0))
            self.last_metrics = {k: float(cast(Any, v)) for k, v in metrics.items() if np.isscalar(v)}
            self.callbacks.fire("on_batch_end", self.trainer, self.batches, metrics)
            self.callbacks.fire("on_update_end", self.trainer, metrics, self.run.episodes)
            self.batches += 1
        pool.release()
        return steps

    def pool_stats(self) -> dict[str, Any]:
        """What the run's statistics report about the pool (read before the pool closes)."""
        assert self.pool is not None
        return {"actors": len(self.pool.procs), "transitions_per_actor": self.pool.rows_per_actor.tolist(),
                "evicted": self.pool.evicted(), "actor_frameworks": sorted(self.pool.frameworks),
                "published_versions": list(self.pool.published),
                "league_versions": self.pool.league_versions.tolist(),
                "learner_threads": self.pool.options.learner_thread_cap(),
                "mean_policy_lag": self.lag_sum / self.lag_count if self.lag_count else float("nan")}

    def summarise(self, plot: bool) -> dict[str, Any]:
        out = super().summarise(plot)
        out["pool"] = getattr(self, "_final", None) or {}
        return out
