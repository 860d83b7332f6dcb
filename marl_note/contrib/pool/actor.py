"""The actor process of the pool trainer: steps its envs, acts with published numpy copies, fills shards.

Each actor owns a slice of the train envs (an in-process vector env) and a
:class:`~marl_note.trainers.collector.Collector` whose learning seats are :class:`ActorSeat` s: a
framework-free acting shell (:mod:`marl_note.agents.acting_shell`) that reloads the learner's
board whenever its version moved, and whose ``observe`` writes the closed transitions into the
actor's shard (:class:`~marl_note.replay.shared.SharedRing`) instead of a replay buffer. After each
round (``num_store`` episodes, or a share of ``update_freq`` env steps) it reports the round's
counters and finished episodes on the result queue, and starts a round only when the learner
has granted it (``credits``: the learner consumed all but ``ROUNDS_AHEAD`` of its rounds);
anything it raises is reported there as ``("error", actor, traceback)`` before the process exits.
Its :class:`Pulse` moves at every env step and every wait, so the learner tells a stuck actor (in
its env or its agent) from a busy one; its stderr goes to a pipe the learner reads
(:mod:`~marl_note.contrib.pool.stderr`). No framework is imported here.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np

from marl_note.agents.base import PerEnvAgent
from marl_note.contrib.pool.board import WeightBoard
from marl_note.contrib.pool.stderr import redirect
from marl_note.replay.shared import SharedRing
from marl_note.types import Transitions

__all__ = ["ActorConfig", "ActorSeat", "Pulse", "RoundRunner", "actor_main", "transition_columns_of"]


@dataclass
class ActorConfig:
    """Everything one actor process is started with (sent with cloudpickle)."""

    index: int
    env_fn: Any
    num_envs: int
    env_offset: int  # the global index of this actor's first env
    spec: Any
    seats: list[Any]  # per seat: ("learner", k) | ("fixed", agent)
    shells: list[Any]  # per learner k: its acting shell
    explore: list[bool]
    learn: list[bool]
    boards: list[Any]  # per learner: a WeightBoard handle
    rings: list[list[Any]]  # [actor][learner]: SharedRing handles (every actor's, for random=True)
    options: Any  # PoolOptions
    round_steps: int
    seed: int | None
    check_finite: bool
    league: Any = None  # a LeagueConfig when an OpponentPool matchmakes (its source: the last of the boards)


def transition_columns_of(t: Transitions, stream_offset: int, order: int) -> dict[str, np.ndarray]:
    """The shard columns of a batch of transitions (streams made global, rows numbered from ``order``)."""
    cols = {"obs": np.asarray(t.obs), "act": np.asarray(t.act), "rew": np.asarray(t.rew),
            "next_obs": np.asarray(t.next_obs), "terminated": np.asarray(t.terminated),
            "truncated": np.asarray(t.truncated),
            "stream": np.asarray(t.stream if t.stream is not None else np.zeros(len(t), np.int64)) + stream_offset,
            "order": order + np.arange(len(t), dtype=np.int64)}
    if t.mask is not None:
        cols["mask"], cols["next_mask"] = np.asarray(t.mask), np.asarray(t.next_mask)
    return cols


class Pulse:
    """An actor's heartbeat: its counter in a shared array (``counts[index]``), moved at every env step and
    every wait. The learner raises when one stays still for ``actor_timeout`` (:meth:`Pool.wait_rounds`)."""

    def __init__(self, counts: Any, index: int):
        self.counts, self.index = counts, index

    def __call__(self) -> None:
        self.counts[self.index] += 1


class _PulsingEnvs:
    """A vector env whose ``reset`` and ``step`` move the actor's pulse first (the rest is the env's)."""

    def __init__(self, venv: Any, pulse: Any):
        self._venv, self._pulse = venv, pulse

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        self._pulse()
        return self._venv.reset(*args, **kwargs)

    def step(self, actions: Any) -> Any:
        self._pulse()
        return self._venv.step(actions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._venv, name)


class ActorSeat:
    """A learning seat inside an actor: acts with the shell, sends what it observes to a shard."""

    def __init__(self, shell: Any, board: WeightBoard, write: Any):
        self.shell, self.board, self.write = shell, board, write
        self.version = -1
        self.accepts_env_ids = isinstance(shell, PerEnvAgent) and bool(shell.accepts_env_ids)

    def refresh(self) -> None:
        got = self.board.read(newer_than=self.version)
        if got is not None:
            state, self.version = got
            self.shell.remote.load(state, self.version)

    def act(self, obs: Any, mask: Any = None, explore: bool = False, **kwargs: Any) -> np.ndarray:
        self.refresh()
        return self.shell.act(obs, mask, explore=explore, **kwargs)

    def observe(self, transitions: Transitions) -> None:
        self.write(transitions)


class _Writer:
    """One learner's shard writes of one actor: its own shard, or a random one weighted by 1/len."""

    def __init__(self, config: ActorConfig, k: int, rings: list[list[SharedRing]], locks: Any, stop: Any,
                 rng: np.random.Generator, pulse: Any):
        self.config, self.k, self.rings, self.locks, self.stop, self.rng = config, k, rings, locks, stop, rng
        self.pulse = pulse
        self.order = 0
        opts = config.options
        self.evict = opts.window_size
        self.stream_offset = config.env_offset * config.spec.num_agents

    def __call__(self, t: Transitions) -> None:
        opts, me = self.config.options, self.config.index
        cols = transition_columns_of(t, self.stream_offset, self.order)
        self.order += len(t)
        target = me
        if opts.random:
            sizes = np.array([len(r[self.k]) for r in self.rings], np.float64)
            p = 1.0 / (1.0 + sizes)
            target = int(self.rng.choice(len(p), p=p / p.sum()))
        lock = self.locks[target][self.k] if opts.random else None
        if lock is not None and not self._lock(lock):
            return  # asked to stop while another actor held the shard
        try:
            self.rings[target][self.k].write(cols, evict=self.evict, timeout=opts.actor_timeout,
                                             alive=self._waiting)
        finally:
            if lock is not None:
                lock.release()

    def _waiting(self) -> bool:
        """While the shard has no room: alive (the pulse moves), unless asked to stop."""
        self.pulse()
        return _running(self.stop)

    def _lock(self, lock: Any) -> bool:
        """Acquire a shard's lock (``random``), the pulse moving meanwhile; False: asked to stop first."""
        while not lock.acquire(timeout=0.05):
            if not self._waiting():
                return False
        return True

    def clear(self) -> None:
        """``clearing_freq``: evict the oldest ``window_size_`` rows of this actor's own shard."""
        ring = self.rings[self.config.index][self.k]
        lock = self.locks[self.config.index][self.k] if self.config.options.random else None
        if lock is not None and not self._lock(lock):
            return
        try:
            ring.evict_oldest(self.config.options.window_size_)
        finally:
            if lock is not None:
                lock.release()


def _running(stop: Any) -> bool:
    """Neither asked to stop nor orphaned (a killed learner cannot ask)."""
    parent = mp.parent_process()
    return not stop.is_set() and (parent is None or parent.is_alive())


def _no_pulse() -> None:
    pass


def actor_main(payload: bytes, results: Any, stop: Any, locks: Any, credits: Any, pulse: Any = None,
               stderr: Any = None) -> None:
    """Process entry: run rounds until ``stop`` is set; report rounds and any error on ``results``.

    ``pulse``: the actor's :class:`Pulse`; ``stderr``: the write end of the pipe its stderr goes to
    (:mod:`~marl_note.contrib.pool.stderr`)."""
    redirect(stderr)
    pulse = pulse if pulse is not None else _no_pulse
    pulse()
    index = -1
    boards: list[WeightBoard] = []
    rings: list[list[SharedRing]] = []
    try:
        config: ActorConfig = cloudpickle.loads(payload)
        index = config.index
        pulse()
        _run(config, results, stop, locks, credits, boards, rings, pulse)
    except BaseException:  # reported to the learner, which raises it with this traceback
        results.put(("error", index, traceback.format_exc()))
    finally:
        for board in boards:
            board.close()
        for row in rings:
            for ring in row:
                ring.close()


class RoundRunner:
    """One actor's collecting, shared by the process and the Ray backend: its slice of the envs, a
    collector whose learning seats act with ``sources[k]`` (anything with ``read(newer_than)``, like
    a :class:`WeightBoard`) and send what they observe to ``writers[k]`` (a callable taking
    Transitions); ``pulse`` (if any) is called before every env reset and step. :meth:`round`
    collects one round and returns its report."""

    def __init__(self, config: ActorConfig, sources: list[Any], writers: list[Any], rng: np.random.Generator,
                 pulse: Any = None):
        from marl_note.envs.vector import SyncVectorEnv
        from marl_note.trainers.collector import Collector

        self.config = config
        self.learners = [ActorSeat(shell, sources[k], writers[k]) for k, shell in enumerate(config.shells)]
        for seat in self.learners:  # every actor explores with its own stream
            seat.shell.rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
        seats = [self.learners[ref] if kind == "learner" else ref for kind, ref in config.seats]
        for seat in self.learners:
            seat.refresh()
        self.league = None
        if config.league is not None:  # self-play against the learner's published opponent pool
            from marl_note.contrib.pool.league import ActorLeague

            k = config.league.learner
            self.league = ActorLeague(config.league, sources[len(config.shells)], self.learners[k],
                                      config.shells[k], rng, turn=config.index)
        self.venv = SyncVectorEnv([config.env_fn] * config.num_envs)
        envs: Any = self.venv if pulse is None else _PulsingEnvs(self.venv, pulse)
        try:
            self.collector = Collector(envs, config.spec, seats, explore=config.explore, learn=config.learn,
                                       matchmaker=self.league, check_finite=config.check_finite)
            self.collector.reset(seed=None if config.seed is None else config.seed + config.env_offset)
        except BaseException:
            self.venv.close()
            raise

    def round(self) -> tuple:
        """Collect one round; ``("round", actor, env_steps, agent_steps, returns, lengths, versions,
        frameworks imported, episode tags, league version)``."""
        opts = self.config.options
        if opts.num_store is not None:
            stats = self.collector.collect(n_episodes=opts.num_store)
        else:
            stats = self.collector.collect(n_steps=self.config.round_steps)
        self.collector.flush()
        return ("round", self.config.index, stats.env_steps, stats.agent_steps,
                [r.tolist() for r in stats.returns], stats.lengths,
                [seat.version for seat in self.learners],
                sorted(m for m in ("torch", "tensorflow") if m in sys.modules), stats.tags,
                -1 if self.league is None else self.league.version)

    def close(self) -> None:
        self.venv.close()


def _run(config: ActorConfig, results: Any, stop: Any, locks: Any, credits: Any, boards: list[WeightBoard],
         rings: list[list[SharedRing]], pulse: Any) -> None:
    boards.extend(WeightBoard.attach(h) for h in config.boards)
    rings.extend([SharedRing.attach(h) for h in row] for row in config.rings)
    rng = np.random.default_rng([config.index, 0 if config.seed is None else config.seed])
    writers = [_Writer(config, k, rings, locks, stop, rng, pulse) for k in range(len(config.shells))]
    runner = RoundRunner(config, boards, writers, rng, pulse)
    try:
        rounds = 0
        opts = config.options
        while _running(stop):
            if rounds >= credits[config.index]:  # the learner has not consumed our earlier rounds yet
                pulse()
                time.sleep(0.005)  # a short nap: the learner shares the cores
                continue
            report = runner.round()
            rounds += 1
            if opts.clearing_freq is not None and rounds % opts.clearing_freq == 0:
                for w in writers:
                    w.clear()
            results.put(report)
    finally:
        runner.close()
