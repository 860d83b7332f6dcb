"""The learner's side of the pool: actor processes, their shards and boards, and their lifetime.

:class:`Pool` creates, per learner, a :class:`~marl_note.contrib.pool.board.WeightBoard` and one
:class:`~marl_note.replay.shared.SharedRing` shard per actor, and starts the actor processes
(forkserver where the platform has it, else spawn). The learner's loop then calls
:meth:`Pool.wait_rounds` (the actors' round reports, bounded; every actor's liveness and pulse are
checked on every report and every 50 ms without one, so a dead or stuck actor raises
:class:`ActorError`),
:meth:`Pool.drain` (every shard's new rows as Transitions per learner) and :meth:`Pool.publish`
(a learner's acting state as a new version). :meth:`Pool.close` stops the actors and unlinks
every block; it is idempotent, runs on every exit path of a run and, as a last resort, at
interpreter exit.
"""
from __future__ import annotations

import math
import queue
import signal
import time
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from marl_note.agents.base import RemoteActing
from marl_note.contrib.pool.actor import ActorConfig, Pulse, actor_main
from marl_note.contrib.pool.board import WeightBoard
from marl_note.contrib.pool.league import LeaguePublisher
from marl_note.contrib.pool.options import PoolOptions
from marl_note.contrib.pool.shell import on_policy, shell_refusal
from marl_note.contrib.pool.stderr import StderrTails
from marl_note.envs.main_guard import main_not_reimported
from marl_note.envs.subproc_pool import start_context
from marl_note.replay.buffer import transition_specs
from marl_note.replay.shared import SharedRing
from marl_note.types import Transitions

__all__ = ["Pool", "ActorError", "ActorPlan", "check_pool", "columns_to_transitions"]


ROUNDS_AHEAD = 2  # rounds an actor may collect beyond those the learner consumed


class ActorError(RuntimeError):
    """An actor failed: the message holds its traceback, or its exit code and the end of its stderr
    (it died without one), or how long it has been silent (stuck for ``actor_timeout``)."""


def shard_specs(spec: Any, seat: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    """The shard columns for transitions of ``seat`` (from the env spec)."""
    try:
        base = transition_specs(spec.observation_space(seat), spec.action_space(seat))
        specs: dict[str, tuple[tuple[int, ...], Any]] = dict(base)
    except TypeError as exc:
        raise TypeError(f"the pool trainer stores Box/Discrete/MultiBinary/MultiDiscrete spaces in its shards: "
                        f"{exc}") from exc
    specs["stream"] = ((), np.int64)
    specs["order"] = ((), np.int64)
    if spec.has_action_mask:
        n = int(spec.action_space(seat).n)
        specs["mask"] = ((n,), bool)
        specs["next_mask"] = ((n,), bool)
    return specs


_ACTOR_MODULES = ["marl_note.contrib.pool.actor", "marl_note.trainers.collector", "marl_note.agents.dqn",
                  "marl_note.agents.ddpg", "marl_note.agents.sac", "marl_note.agents.ppo"]  # numpy only


def _preload_actor(ctx: Any) -> None:
    """Have a forkserver that is not running yet import what an actor needs once, before it forks."""
    if ctx.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver
    current = list(getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None) or [])
    wanted = current + [m for m in _ACTOR_MODULES if m not in current]
    if wanted != current:
        try:
            ctx.set_forkserver_preload(wanted)
        except Exception:  # noqa: BLE001 - an optimisation only
            pass


def _stop(procs: list[Any], stop: Any, results: Any, shms: list[Any], stuck: set[int], tails: StderrTails) -> None:
    """Stop the actors (ask, then terminate, then kill; each bounded; a ``stuck`` one is not asked) and
    unlink every block."""
    for i in stuck:  # it cannot hear the stop: do not wait for it
        if procs[i].is_alive():
            procs[i].kill()
    stop.set()
    deadline = time.monotonic() + 3.0
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        try:  # an actor cannot exit while its queue feeder still holds items: keep reading
            results.get(timeout=0.05)
        except (queue.Empty, OSError, EOFError, ValueError):
            pass
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=1.0)
        if p.is_alive():
            p.kill()
        p.join(timeout=1.0)
    for shm in shms:
        shm.unlink()
    shms.clear()
    results.cancel_join_thread()
    results.close()
    tails.close()


def _stderr_tail(tail: str) -> str:
    """The end of an actor's stderr, for its error message."""
    tail = tail.strip()
    return f"; the end of its stderr:\n{tail}" if tail else "; it wrote nothing to stderr"


def check_pool(trainer: Any, learners: list[Any], options: PoolOptions) -> None:
    """Refuse, before any actor starts, more actors than train envs and agents without an acting shell."""
    if options.actors > trainer.num_train_envs:
        raise ValueError(f"actors={options.actors} exceeds num_train_envs={trainer.num_train_envs}: each "
                         f"actor needs at least one train env")
    for agent in learners:
        reason = shell_refusal(agent)
        if reason is not None:
            raise TypeError(reason)


class ActorPlan:
    """What each actor is started with (both backends): its envs, seats, acting shells and options."""

    def __init__(self, trainer: Any, seats: list[Any], learners: list[RemoteActing], explore: list[bool],
                 learn: list[bool], options: PoolOptions, seed: int | None):
        self.trainer, self.spec, self.options, self.seed = trainer, trainer.spec, options, seed
        self.explore, self.learn, self.learners = list(explore), list(learn), learners
        index = {id(a): k for k, a in enumerate(learners)}
        self.seat_refs: list[Any] = []
        self.learner_seat: dict[int, str] = {}
        for name, agent, ln in zip(trainer.spec.possible_agents, seats, learn):
            if ln:
                self.seat_refs.append(("learner", index[id(agent)]))
                self.learner_seat.setdefault(index[id(agent)], name)
            elif id(agent) in index:
                self.seat_refs.append(("learner", index[id(agent)]))
            else:
                self.seat_refs.append(("fixed", agent))

    def shard_specs(self, k: int) -> dict[str, tuple[tuple[int, ...], Any]]:
        return shard_specs(self.spec, self.learner_seat[k])

    def configs(self, boards: list[Any], rings: list[list[Any]], league: LeaguePublisher | None = None
                ) -> list[ActorConfig]:
        """One config per actor; the train envs are split over the actors as evenly as possible."""
        t, opts = self.trainer, self.options
        shells = [a.remote.shell() for a in self.learners]
        splits = np.array_split(np.arange(t.num_train_envs), opts.actors)
        round_steps = max(1, math.ceil(t.update_freq / opts.actors))
        return [ActorConfig(index=i, env_fn=t.env_fn, num_envs=len(envs), env_offset=int(envs[0]), spec=self.spec,
                            seats=self.seat_refs, shells=shells, explore=self.explore, learn=self.learn,
                            boards=boards, rings=rings, options=opts, round_steps=round_steps, seed=self.seed,
                            check_finite=t.check_finite,
                            league=None if league is None else league.config(self.spec.num_agents))
                for i, envs in enumerate(splits)]


def columns_to_transitions(parts: list[dict[str, np.ndarray]], reorder: bool) -> Transitions:
    """Shard columns of several writes as one Transitions (``reorder``: restore each stream's order)."""
    cols = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    if reorder:  # rows of one stream may sit in several shards: restore their order
        keep = np.lexsort((cols["order"], cols["stream"]))
        cols = {name: c[keep] for name, c in cols.items()}
    return Transitions(obs=cols["obs"], act=cols["act"], rew=cols["rew"], next_obs=cols["next_obs"],
                       terminated=cols["terminated"], truncated=cols["truncated"],
                       mask=cols.get("mask"), next_mask=cols.get("next_mask"), stream=cols["stream"])


class Feeding:
    """What both pool backends share: draining what the actors sent into the learners, and the lag.

    A backend sets ``learners``, ``versions`` (``[actor, learner]`` weight versions the actors
    last acted with), ``league`` (a :class:`LeaguePublisher` or None) and ``league_versions`` (per
    actor, the league version it last acted with), and implements ``drain() -> [Transitions | None
    per learner]`` and ``put_league(arrays, version)``.
    """

    learners: list[Any]
    versions: np.ndarray
    league: LeaguePublisher | None = None
    league_versions: np.ndarray
    frameworks: set[str]
    reported: set[int]  # actors that reported a round
    held: list[int]  # reports whose round grants wait for every actor's first report (granted)
    options: PoolOptions
    synchronous: bool = False  # an on-policy learner (PPO): one round per actor per update, lag 0

    def more_rounds(self, got: list[tuple], env_steps: int, reported: set[int]) -> bool:
        """Whether a chunk needs more round reports than ``got``: synchronous, one from every actor;
        else until they sum to ``env_steps`` env steps (at least one, and one from every actor before
        the first chunk ends)."""
        if self.synchronous:
            return len(got) < self.options.actors
        return sum(r[2] for r in got) < env_steps or not got or len(reported) < self.options.actors

    def granted(self, actor: int) -> list[int]:
        """Asynchronous mode: the actors that may start one more round now that ``actor`` reported one
        (each report grants its actor a round). Until every actor has reported, the grants are held back:
        an actor slow to start must not leave the others collecting the run ahead of the learner in one
        first chunk, with no weights, league or callbacks in between (``ROUNDS_AHEAD`` bounds every
        actor from the first round on)."""
        if self.synchronous:
            return []
        self.held.append(actor)
        if len(self.reported) < self.options.actors:
            return []
        grants, self.held = self.held, []
        return grants

    def release(self) -> None:
        """Synchronous mode: let every actor collect its next round (after the learners published)."""
        raise NotImplementedError

    def put_league(self, arrays: dict[str, np.ndarray], version: int) -> None:
        raise NotImplementedError

    def publish_league(self) -> None:
        """Publish the opponent pool's snapshots and draw probabilities if they moved (self-play runs)."""
        if self.league is not None:
            arrays = self.league.changed()
            if arrays is not None:
                self.put_league(arrays, self.league.version)

    def heard(self, report: tuple) -> None:
        """Note what a round report says about the weights and the league its actor acted with."""
        self.versions[report[1]] = report[6]
        self.league_versions[report[1]] = report[9]
        self.frameworks.update(report[7])

    def drain(self) -> list[Transitions | None]:
        raise NotImplementedError

    def feed(self) -> int:
        """Drain what the actors sent into each learner (``observe``); returns the number of rows."""
        total = 0
        for learner, batch in zip(self.learners, self.drain()):
            if batch is not None:
                learner.observe(batch)
                total += len(batch)
        return total

    def lag(self, k: int) -> float:
        """Learner ``k``'s gradient steps minus the mean weight version its actors last acted with."""
        return float(self.learners[k].updates - self.versions[:, k].mean())


class Pool(Feeding):
    """Actor processes acting for ``learners`` (distinct learning agents) over the trainer's env.

    ``seats``/``explore``/``learn`` are the checked seats of the run. The train envs
    (``trainer.num_train_envs``) are split over the actors as evenly as possible.
    """

    def __init__(self, trainer: Any, seats: list[Any], learners: list[Any], explore: list[bool],
                 learn: list[bool], options: PoolOptions, seed: int | None, matchmaker: Any = None):
        check_pool(trainer, learners, options)
        self.options, self.learners, self.spec = options, learners, trainer.spec
        self.league = None if matchmaker is None else LeaguePublisher(matchmaker, learners)
        self.league_versions = np.full(options.actors, -1, np.int64)
        self.synchronous = any(on_policy(a) for a in learners)
        ctx = start_context(None)  # forkserver where there is one: no re-import of the user's __main__
        _preload_actor(ctx)
        self.results = ctx.Queue()
        ahead = 1 if self.synchronous else ROUNDS_AHEAD
        self.credits = ctx.RawArray("q", [ahead] * options.actors)  # rounds each actor may start
        self.stop = ctx.Event()
        self.pulses = ctx.RawArray("q", options.actors)  # each actor's heartbeat counter (Pulse)
        self.tails = StderrTails(options.actors, ctx)
        self.procs: list[Any] = []
        self._shms: list[Any] = []
        self._stuck: set[int] = set()
        self.rows_per_actor = np.zeros(options.actors, np.int64)
        self.versions = np.full((options.actors, len(learners)), -1, np.int64)
        self.published = [-1] * len(learners)
        self.reported = set()
        self.held = []
        self.frameworks: set[str] = set()  # frameworks an actor reported imported (none expected)
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.stop, self.results, self._shms,
                                           self._stuck, self.tails)
        try:
            self.boards = [self._own(WeightBoard.create(a.remote.state())) for a in learners]
            for k in range(len(learners)):
                self.publish(k)
            if self.league is not None:
                self.boards.append(self._own(WeightBoard.create(self.league.state())))
                self.publish_league()
            plan = ActorPlan(trainer, seats, learners, explore, learn, options, seed)
            options.check_shards_fit([plan.shard_specs(k) for k in range(len(learners))])  # before creating one
            self.rings = [[self._own(SharedRing.create(plan.shard_specs(k), options.shard_capacity))
                           for k in range(len(learners))] for _ in range(options.actors)]
            self.locks = [[ctx.Lock() for _ in learners] for _ in range(options.actors)] if options.random else None
            for config in plan.configs(boards=[b.handle for b in self.boards],
                                       rings=[[r.handle for r in row] for row in self.rings], league=self.league):
                i = config.index
                args = (cloudpickle.dumps(config), self.results, self.stop, self.locks, self.credits,
                        Pulse(self.pulses, i), self.tails.writer(i))
                proc = ctx.Process(target=actor_main, args=args, daemon=True, name=f"marl_note-actor-{i}")
                with main_not_reimported():
                    proc.start()
                self.procs.append(proc)
            self.tails.started()
            now = time.monotonic()
            self._heard = [(0, now)] * options.actors  # per actor: its pulse count, and when it last moved
        except BaseException:
            self.close()
            raise

    def _own(self, block: Any) -> Any:
        self._shms.append(block)
        return block

    # -- the learner's loop ----------------------------------------------------------------------
    def publish(self, k: int) -> None:
        """Publish learner ``k``'s acting state; its version is the learner's gradient step count."""
        agent = self.learners[k]
        self.boards[k].publish(agent.remote.state(), version=int(agent.updates))
        self.published[k] = int(agent.updates)

    def put_league(self, arrays: dict[str, np.ndarray], version: int) -> None:
        self.boards[-1].publish(arrays, version)

    def wait_rounds(self, env_steps: int, stop: Callable[[int], bool] | None = None) -> list[tuple]:
        """Round reports until they sum to ``env_steps`` env steps (at least one report, and one from
        every actor before the first chunk ends); bounded by ``actor_timeout`` without a report. On every
        report and every 50 ms without one, every actor is checked: an error it reported, its death
        (its exit code and the end of its stderr) or its pulse standing still for ``actor_timeout``
        (stuck in its env or agent) raise :class:`ActorError`; and ``stop(env steps reported so far)``
        (the trainer's collection limit: a budget) is asked, True ending the wait with the reports so
        far (none, if the budget ran out before any), so a wall-time budget holds within 50 ms of the
        learner's wait."""
        got: list[tuple] = []
        steps = 0
        deadline = time.monotonic() + self.options.actor_timeout
        while self.more_rounds(got, env_steps, self.reported):
            if stop is not None and stop(steps):
                break
            self.check_actors()
            try:
                msg = self.results.get(timeout=0.05)
            except queue.Empty:
                self.feed()  # an actor may be waiting for room in its shard
                if time.monotonic() > deadline:
                    raise ActorError(f"no round from any actor for {self.options.actor_timeout} s "
                                     f"(actor_timeout); the actors are alive and stepping their envs, but none "
                                     f"finished a round") from None
                continue
            if msg[0] == "error":
                raise ActorError(f"actor {msg[1]} failed:\n{msg[2]}")
            got.append(msg)
            steps += int(msg[2])
            self.reported.add(msg[1])
            for i in self.granted(msg[1]):
                self.credits[i] += 1
            self.heard(msg)
            deadline = time.monotonic() + self.options.actor_timeout
        return got

    def release(self) -> None:
        if self.synchronous:
            for i in range(self.options.actors):
                self.credits[i] += 1

    def check_actors(self) -> None:
        """Raise :class:`ActorError` if an actor died or its pulse has not moved for ``actor_timeout``."""
        now = time.monotonic()
        for i, p in enumerate(self.procs):
            if not p.is_alive():
                self._died(i, p)
            count = self.pulses[i]
            seen, since = self._heard[i]
            if count != seen:
                self._heard[i] = (count, now)
            elif now - since > self.options.actor_timeout:
                self._stuck.add(i)
                tail = _stderr_tail(self.tails.tail(i, wait=0))
                raise ActorError(f"actor {i} (pid {p.pid}) has been silent for {self.options.actor_timeout} s "
                                 f"(actor_timeout): no env step and no wait since then, so it is stuck in its "
                                 f"env or its agent; it is stopped with the others{tail}")

    def _died(self, i: int, p: Any) -> None:
        """Raise for actor ``i``, found dead: with the traceback it reported, if one comes within half a
        second, else with its exit code and the end of its stderr."""
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # its traceback may still be on the way (the others' rounds too)
            try:
                msg = self.results.get(timeout=max(0.0, deadline - time.monotonic()))
            except (queue.Empty, OSError, EOFError, ValueError):
                break
            if msg[0] == "error":
                raise ActorError(f"actor {msg[1]} failed:\n{msg[2]}")
        code = p.exitcode
        how = ""
        if code is not None and code < 0:
            try:
                how = f" ({signal.Signals(-code).name})"
            except ValueError:
                pass
        raise ActorError(f"actor {i} (pid {p.pid}) died with exit code {code}{how} without a traceback; the "
                         f"other actors are stopped{_stderr_tail(self.tails.tail(i))}")

    def drain(self) -> list[Transitions | None]:
        """Per learner: every shard's new rows, in each actor's write order, as one Transitions (or None)."""
        out: list[Transitions | None] = []
        for k in range(len(self.learners)):
            parts = []
            for i, row in enumerate(self.rings):
                cols = row[k].drain()
                self.rows_per_actor[i] += len(cols["rew"])
                if len(cols["rew"]):
                    parts.append(cols)
            if not parts:
                out.append(None)
                continue
            out.append(columns_to_transitions(parts, reorder=self.options.random))
        return out

    def evicted(self) -> int:
        return int(sum(r.evicted for row in self.rings for r in row)) if self._shms else 0

    def close(self) -> None:
        """Stop every actor and unlink every shared block (idempotent)."""
        self._finalizer()
        # release the semaphores (the locks', the queue's, the event's) now, not when the last reference
        # goes: an ActorError's traceback holds this pool for as long as the error is kept
        self.locks = self.results = self.stop = None
