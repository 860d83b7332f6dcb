"""One training run's loop: the chunk / update / test cycle of ``DecentralizedTrainer.train``.

The trainer owns the envs, the settings and the argument checks; :class:`RunLoop` is what one
``train()`` call carries from its first chunk to its summary.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from marl_note.agents.base import Agent, JointLearner, LearningAgent
from marl_note.agents.schedule import stop_updates_when
from marl_note.trainers.callbacks import CallbackList, stop_value
from marl_note.trainers.collector import CollectStats
from marl_note.trainers.evaluation import evaluate_against, use_baseline
from marl_note.trainers.run_state import RunState, run_summary
from marl_note.trainers.series import Recorder

__all__ = ["RunLoop"]


@dataclass
class RunLoop:
    """One ``train()`` call of a :class:`~marl_note.trainers.DecentralizedTrainer`: its checked seats
    and masks, the state its loop carries, and the loop itself (collect a chunk, update every
    learner, test when due; then the summary). The trainer checks the arguments and builds it.
    """

    trainer: Any
    seats: list[Agent]
    test_seats: list[Agent]
    learn: list[bool]
    explore: list[bool]
    callbacks: CallbackList
    run: RunState
    baseline: Any
    opponents: dict[str, Agent] | None
    test_agents_given: bool
    checkpoint_path: str | None
    source: Any = None  # the ExperienceSource of this run (marl_note.trainers.source)
    learners: list[Any] = field(default_factory=list)  # the source's distinct learners, in seat order
    source_stats: dict[str, Any] = field(default_factory=dict)  # what the source reported when it closed
    recorder: Recorder | None = None  # the run's series for the plot
    started: float = 0.0  # perf_counter() at the start, less the training time of a resumed run
    baseline_on: bool | None = None  # decided at the first test
    stopped: bool = False  # by stop_fn
    batches: int = 0  # learner update calls of this train(), counted for the batch events
    chunk_env_steps: int = 0  # env steps of the last collection chunk (gradient steps per env step are logged)
    # wall seconds of this train() in each phase (the statistics' ``time_split``; pool mode: waiting for actors)
    phase_seconds: dict[str, float] = field(default_factory=lambda: {"collect": 0.0, "update": 0.0, "test": 0.0})
    last_metrics: dict[str, float] = field(default_factory=dict)
    last_test: dict[str, Any] = field(default_factory=dict)
    setting_changes: list[dict[str, Any]] = field(default_factory=list)  # applied requests, in order
    announce: dict[str, float] = field(default_factory=dict)  # changes the next update's callbacks see once

    def loop(self, progress: bool) -> None:
        """Collect ``update_freq`` env steps, update every learner, test when due; until the budget is spent."""
        from marl_note.trainers.progress import Progress  # tqdm lives there

        t, run, recorder = self.trainer, self.run, self.recorder
        assert recorder is not None  # set by _prepare
        dist = t.distributed
        budget = t.progress_budget or {}
        bar = Progress(t.episodes_per_train, enabled=progress and dist.is_chief,
                       env_steps=budget.get("env_steps"), minutes=budget.get("minutes"))
        limit = t.collect_limit
        if bar.enabled:  # refresh the display during a chunk too, not only at its end
            def ticking(kind: str, env_steps: int) -> bool:
                if kind == "train":
                    bar.tick(run.env_steps + env_steps)
                return limit is not None and limit(kind, env_steps)

            t.collect_limit = ticking
        self.started = time.perf_counter() - run.training_time
        round_steps = 0
        try:
            self._apply_settings()  # what on_train_begin requested (a resumed run's adapted settings)
            # rank 0 decides whether to go on; every rank checks it took rank 0's gradient steps
            while dist.lockstep(run.episodes < t.episodes_per_train and not self.stopped and not t.stop_training,
                                round_steps):
                clock = time.perf_counter()
                self._collect_chunk()
                clock = self._phase("collect", clock)
                with self._update_limit(limit):
                    round_steps = self._update_learners()
                clock = self._phase("update", clock)
                due = run.episodes >= run.next_test or run.episodes >= t.episodes_per_train or t.stop_training
                if due and dist.is_chief:
                    self._periodic_test()
                    self._phase("test", clock)
                recent = self.recent_returns()
                train_reward = t._metric(recent, self.learn) if len(recent) and not self.baseline_on else None
                recorder.chunk(run.episodes, train_reward)
                if self.baseline_on and len(recent):  # self-play: the learner's own return in each seat it holds
                    recorder.seat_rewards(run.episodes, {seat: float(recent[:, i].mean()) for i, seat in
                                                         enumerate(t.spec.possible_agents) if self.learn[i]})
                bar.update(run.episodes, env_steps=run.env_steps, train_reward=train_reward,
                           test_metric=run.history[-1][1] if run.history else None,
                           best=run.best if run.history else None,
                           **{k: v for k, v in self.last_metrics.items() if k in ("loss", "eps", "epsilon")})
        finally:
            t.collect_limit = limit
            bar.close()
            self.source_stats = self.source.close()
        run.training_time = time.perf_counter() - self.started

    def _update_limit(self, limit: Any) -> Any:
        """The run's limit asked inside the learners' updates too (``limit("update", 0)``: a wall-time budget
        ends a long update between gradient steps). Not in a distributed run: its ranks must take the same
        gradient steps, and each would see its own clock."""
        if limit is None or self.trainer.distributed.distributed:
            return contextlib.nullcontext()
        return stop_updates_when(lambda: limit("update", 0))

    def _phase(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.phase_seconds[name] += now - since
        return now

    def _collect_chunk(self) -> None:
        run = self.run
        if self.trainer.train_fn is not None:
            self.trainer.train_fn(run.episodes, run.env_steps)
        chunk_env_steps = self.trainer.update_freq
        stats: CollectStats = self.source.collect(chunk_env_steps)
        self.chunk_env_steps = stats.env_steps
        run.env_steps += stats.env_steps
        run.agent_steps += stats.agent_steps
        run.episodes += stats.episodes
        run.recent_returns = (run.recent_returns + [r.tolist() for r in stats.returns])[-100:]
        self.callbacks.fire("on_collect_end", self.trainer, stats, run.episodes)
        self.source.after_collect()
        self._apply_settings()  # what the callbacks requested, before this chunk's updates
        first_chunk = run.env_steps == stats.env_steps
        if first_chunk and run.episodes >= self.trainer.episodes_per_train > 1:
            warnings.warn(f"the first collection chunk (update_freq={chunk_env_steps} env steps) already "
                          f"finished {run.episodes} episodes, the whole budget of episodes_per_train="
                          f"{self.trainer.episodes_per_train}: the agents are updated once per chunk, so this run "
                          f"updates them only once. Lower update_freq.", stacklevel=4)

    def _apply_settings(self) -> None:
        """Apply the pending requests of the run settings (:mod:`marl_note.trainers.settings`), rank 0's on
        every rank (callbacks run on rank 0 alone, and ranks that differed in a batch size, learning rate or
        hyperparameter would no longer take equal steps), and log each change once."""
        t, run = self.trainer, self.run
        changes = t.settings.pending()
        if t.distributed.distributed:
            changes = t.distributed.broadcast(changes)
        for change in t.settings.apply(changes):
            change = {"episodes": run.episodes, "env_steps": run.env_steps, **change}
            self.setting_changes.append(change)
            self.announce[f"settings/{change['setting']}"] = change["new"]
            if self.recorder is not None:
                self.recorder.add(f"settings/{change['setting']}", run.episodes, change["new"], "knobs")

    def _update_learners(self) -> int:
        """One update round; returns its gradient steps (each learner samples this rank's share of the batch)."""
        learners: list[LearningAgent | JointLearner] = self.learners
        assert self.recorder is not None  # set by _prepare
        batch_size = self.trainer.distributed.shard_batch(self.trainer.batch_size)
        steps = 0
        for index, learner in enumerate(learners):
            self.callbacks.fire("on_batch_begin", self.trainer, self.batches,
                             {"learner": index, "episodes": self.run.episodes, "env_steps": self.run.env_steps})
            metrics = self.source.update(index, learner, batch_size)
            logged = metrics if "gradient_steps" not in metrics else {  # the update accounting, recorded too
                **metrics, "gradient_steps_per_env_step": metrics["gradient_steps"] / max(1, self.chunk_env_steps)}
            self.recorder.update(index, self.run.episodes, logged, self.trainer.batch_size)
            steps += int(metrics.get("gradient_steps", 0))
            self.run.updates += int(metrics.get("gradient_steps", 0))
            self.last_metrics = {k: float(cast(Any, v)) for k, v in metrics.items() if np.isscalar(v)}
            if self.announce:  # the settings changed since the last update: logged once, with this one
                metrics = {**metrics, **self.announce}
                self.announce = {}
            self.callbacks.fire("on_batch_end", self.trainer, self.batches, metrics)
            self.callbacks.fire("on_update_end", self.trainer, metrics, self.run.episodes)
            self.batches += 1
        self.source.after_update()
        return steps

    def _periodic_test(self) -> None:
        """Test, record the metric (and a new best), ask ``stop_fn``, save the checkpoint."""
        run = self.run
        next_test_episode = (run.episodes // self.trainer.test_freq + 1) * self.trainer.test_freq
        run.next_test = next_test_episode
        if self.trainer.test_fn is not None:
            self.trainer.test_fn(run.episodes, run.env_steps)
        if self.baseline_on is None:
            given = self.test_seats if self.test_agents_given else None
            self.baseline_on = use_baseline(self.baseline, self.seats, given, self.recent_returns())
            if self.baseline_on and self.recorder is not None:
                # the training reward recorded before this first test was the mean over the training seats,
                # which self-play against itself makes meaningless (a flat 0 in a zero-sum game): drop it
                self.recorder.series.pop("train_reward", None)
        if self.baseline_on and self.opponents is not None:
            result = evaluate_against(self.trainer, self.seats[0], self.opponents, self.trainer.episodes_per_test)
        else:
            result = self.trainer.test(self.test_seats, learning_mask=self.learn)
        self.last_test = result
        metric = result["reward"]
        run.history.append((run.episodes, metric))
        if metric > run.best:
            run.best, run.best_episode = metric, run.episodes
            if self.trainer.save_best_fn is not None:
                self.trainer.save_best_fn(run.episodes)
        self.callbacks.fire("on_test_end", self.trainer, result, run.episodes)  # the run already holds this test
        if self.recorder is not None:
            self.recorder.callbacks(self.callbacks.plot_series())
        if self.trainer.stop_fn is not None and stop_value(self.trainer.stop_fn(metric, run.episodes)):
            self.stopped = True
        if self.checkpoint_path is not None:
            run.training_time = time.perf_counter() - self.started
            self.trainer.save_checkpoint(self.checkpoint_path)

    def recent_returns(self) -> np.ndarray:
        """The last training episodes' returns as ``[episodes, num_agents]``."""
        return np.asarray(self.run.recent_returns, dtype=np.float64).reshape(-1, self.trainer.spec.num_agents)

    def summarise(self, plot: bool) -> dict[str, Any]:
        """Final checkpoint and ``save_last_fn``, the returned statistics, ``on_train_end``, the plot."""
        if self.recorder is not None:
            self.recorder.callbacks(self.callbacks.plot_series())
        if self.checkpoint_path is not None:
            self.trainer.save_checkpoint(self.checkpoint_path)
        chief = self.trainer.distributed.is_chief
        if self.trainer.save_last_fn is not None and chief:
            self.trainer.save_last_fn()
        out = run_summary(self.run, stopped=self.stopped, tested_against_baseline=bool(self.baseline_on),
                          last_test=self.last_test)
        out["stopped_by_stop_training"] = bool(self.trainer.stop_training)
        out["time_split"] = {f"{k}_s": round(v, 3) for k, v in self.phase_seconds.items()}
        out["setting_changes"] = [dict(c) for c in self.setting_changes]
        self.callbacks.fire("on_train_end", self.trainer, out)
        if self.source_stats:  # after the callbacks, as before: an OpponentPool's own "pool" entry gives way
            out[self.source.name] = dict(self.source_stats)
        self.trainer.distributed.barrier()  # every rank returns once rank 0 has saved
        if plot and self.run.history and chief:
            from marl_note.trainers.plot import plot_run, run_title

            title = run_title(self.trainer.env_name, [type(learner).__name__ for learner in self.learners],
                              self.trainer.seed)
            out["plot_path"] = plot_run(self.run, self.trainer.plot_path, title=title)
            print(f"marl_note: wrote the training plot to {out['plot_path']}")
        return out
