"""The pool's Ray backend: the same actors as Ray actors, transitions and weights through the object store.

``DecentralizedTrainer(..., actors=N, pool={"backend": "ray", "address": None})`` turns it on.
:class:`RayPool` offers the learner's loop what :class:`~marl_note.contrib.pool.pool.Pool` does
(``wait_rounds``, ``feed``, ``publish``, ``lag``, ``close``), with no shared memory:

- each actor is a Ray actor running the process actor's collecting code
  (:class:`~marl_note.contrib.pool.actor.RoundRunner`); a round is one call of its ``round``
  method, whose return value (the round's report and its transitions as numpy columns) travels
  through Ray's object store; the learner keeps ``ROUNDS_AHEAD`` calls queued per actor, so the
  actors collect while the learner trains;
- a publication is ``ray.put`` of the learner's acting state (its numpy weights, counters and
  exploration state); each round call carries the newest version and its reference, and an actor
  fetches the weights only when the version moved;
- an actor's exception reaches the learner as :class:`~marl_note.contrib.pool.pool.ActorError`
  with the actor's traceback, and so does a dead actor (Ray's error); an actor whose round has run
  for ``actor_timeout`` seconds since it could start (its previous round came back, or the call was
  made, whichever is later) raises it as stuck, while the other actors' rounds keep coming.

Ray is imported here only, when a :class:`RayPool` is built: :func:`start_ray` (``ray.init(address)``)
if Ray is not initialised yet (and ``ray.shutdown()`` at :meth:`RayPool.close` in that case); a Ray the
caller initialised is used as it is and left running. A Ray the pool starts runs its workers at the
learner's priority, as the process actors are: Ray's default (niceness 15) leaves actors a few percent
of a core against any other job on a shared machine (:func:`start_ray`).

Example (the options only; a run starts Ray):
    >>> from marl_note.contrib.pool.options import PoolOptions
    >>> PoolOptions(actors=2, backend="ray", address="ray://head-node:10001").address
    'ray://head-node:10001'
"""
from __future__ import annotations

import importlib
import os
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from marl_note.contrib.pool.actor import ActorConfig, RoundRunner, transition_columns_of
from marl_note.contrib.pool.league import LeaguePublisher
from marl_note.contrib.pool.options import PoolOptions
from marl_note.contrib.pool.pool import (
    ROUNDS_AHEAD,
    ActorError,
    ActorPlan,
    Feeding,
    check_pool,
    columns_to_transitions,
)
from marl_note.contrib.pool.shell import on_policy
from marl_note.types import Transitions

__all__ = ["RayPool", "import_ray", "start_ray"]

# Ray reads its settings from RAY_<name> variables when it starts its processes
NICENESS_VARIABLE = "RAY_worker_niceness"


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ImportError('pool backend "ray" needs Ray: pip install "marl_note[ray]"') from exc


def start_ray(address: str | None = None, **options: Any) -> None:
    """``ray.init(address, **options)`` as the pool calls it when Ray is not initialised: no dashboard,
    no log forwarding, and a local Ray's worker processes at the caller's priority.

    Ray starts its workers at niceness 15 (``RAY_worker_niceness``), below the driver. The pool's
    actors are its whole collection, so on a machine shared with other jobs they got a few percent of
    a core: beside two one-thread jobs on 2 cores, a 2-actor CartPole run took 7.3 s at niceness 15
    and 1.7 s at 0 (medians; idle 0.95 s and 0.88 s; ``bench/bench_ray_niceness.py``).
    A ``RAY_worker_niceness`` the caller set is kept; a cluster at ``address`` keeps its own setting.

    Example (the setting only; a call starts Ray):
        >>> NICENESS_VARIABLE
        'RAY_worker_niceness'
    """
    ray = import_ray()
    unset = NICENESS_VARIABLE not in os.environ
    if unset:
        os.environ[NICENESS_VARIABLE] = "0"  # read by the processes ray.init starts
    try:
        ray.init(address=address, **{"include_dashboard": False, "log_to_driver": False, **options})
    finally:
        if unset:
            os.environ.pop(NICENESS_VARIABLE, None)


class _Published:
    """An actor's view of one learner's weights: the newest version it was sent, fetched on read."""

    def __init__(self) -> None:
        self.version, self.ref = -1, None

    def offer(self, version: int, ref: Any) -> None:
        self.version, self.ref = version, ref

    def read(self, newer_than: int) -> tuple[dict[str, np.ndarray], int] | None:
        if self.version == newer_than or self.ref is None:
            return None
        return import_ray().get(self.ref), self.version


class _Columns:
    """An actor's writes for one learner, kept as columns until the round returns them."""

    def __init__(self, config: ActorConfig):
        self.stream_offset = config.env_offset * config.spec.num_agents
        self.order = 0
        self.parts: list[dict[str, np.ndarray]] = []

    def __call__(self, t: Transitions) -> None:
        self.parts.append(transition_columns_of(t, self.stream_offset, self.order))
        self.order += len(t)

    def take(self) -> list[dict[str, np.ndarray]]:
        parts, self.parts = self.parts, []
        return parts


class RayActor:
    """The body of one Ray actor (wrapped by ``ray.remote`` in :class:`RayPool`)."""

    def __init__(self, payload: bytes, published: list[tuple[int, list[Any]]]):
        config: ActorConfig = cloudpickle.loads(payload)
        rng = np.random.default_rng([config.index, 0 if config.seed is None else config.seed])
        self.sources = [_Published() for _ in range(len(config.shells) + (config.league is not None))]
        for source, (version, holder) in zip(self.sources, published):  # the first weights and league
            source.offer(version, holder[0])
        self.columns = [_Columns(config) for _ in config.shells]
        self.runner = RoundRunner(config, self.sources, self.columns, rng)

    def round(self, published: list[tuple[int, list[Any]]]) -> tuple[tuple, list[list[dict[str, np.ndarray]]]]:
        """Collect one round acting with ``published`` (per learner: version, [weights reference]);
        an exception is returned as ``("error", actor, traceback)``, as the process actor reports it."""
        try:
            for source, (version, holder) in zip(self.sources, published):
                source.offer(version, holder[0])
            report = self.runner.round()
        except Exception:  # noqa: BLE001 - reported to the learner, which raises it with this traceback
            return ("error", self.runner.config.index, traceback.format_exc()), []
        return report, [c.take() for c in self.columns]

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.runner.close()


class RayPool(Feeding):
    """Ray actors acting for ``learners`` over the trainer's env (same arguments as ``Pool``)."""

    def __init__(self, trainer: Any, seats: list[Any], learners: list[Any], explore: list[bool],
                 learn: list[bool], options: PoolOptions, seed: int | None, matchmaker: Any = None):
        check_pool(trainer, learners, options)
        self.synchronous = any(on_policy(a) for a in learners)
        self.league = None if matchmaker is None else LeaguePublisher(matchmaker, learners)
        self.league_versions = np.full(options.actors, -1, np.int64)
        self._league_ref: list[tuple[int, list[Any]]] = []
        ray = self.ray = import_ray()
        self.options, self.learners, self.spec = options, learners, trainer.spec
        self.rows_per_actor = np.zeros(options.actors, np.int64)
        self.versions = np.full((options.actors, len(learners)), -1, np.int64)
        self.published = [-1] * len(learners)
        self._refs: list[Any] = [None] * len(learners)
        self.reported = set()
        self.held = []
        self.frameworks: set[str] = set()
        self.procs: list[Any] = []  # the actor handles
        self._inflight: list[deque] = [deque() for _ in range(options.actors)]  # (round call, when made)
        self._returned = [time.monotonic()] * options.actors  # when each actor's last round came back
        self._pending: list[list[dict[str, np.ndarray]]] = [[] for _ in learners]
        started = not ray.is_initialized()
        if started:
            start_ray(options.address)
        self._finalizer = weakref.finalize(self, _stop, ray, self.procs, started)
        try:
            for k in range(len(learners)):
                self.publish(k)
            self.publish_league()
            plan = ActorPlan(trainer, seats, learners, explore, learn, options, seed)
            remote = ray.remote(num_cpus=1, max_restarts=0)(RayActor)
            for config in plan.configs(boards=[], rings=[], league=self.league):
                self.procs.append(remote.remote(cloudpickle.dumps(config), self._published()))
            self._wait_started()
            self._returned = [time.monotonic()] * options.actors
            for i in range(options.actors):
                for _ in range(1 if self.synchronous else ROUNDS_AHEAD):
                    self._submit(i)
        except BaseException:
            self.close()
            raise

    def _wait_started(self) -> None:
        """Every actor built (its worker started, its envs made), so that no actor starts rounds ahead of
        the others; bounded by ``actor_timeout``."""
        pending = [actor.ready.remote() for actor in self.procs]
        done, waiting = self.ray.wait(pending, num_returns=len(pending), timeout=self.options.actor_timeout)
        if waiting:
            raise ActorError(f"{len(waiting)} Ray actor(s) did not start within actor_timeout="
                             f"{self.options.actor_timeout} s; are there enough CPUs in the Ray cluster for "
                             f"{len(self.procs)} actors (one CPU each)?")
        for i, ref in enumerate(pending):
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                raise ActorError(f"actor {i} failed to start:\n{exc}") from None

    def _published(self) -> list[tuple[int, list[Any]]]:
        """Per learner ``(version, [reference])`` (nested: not resolved by Ray), then the league's if any."""
        return [(v, [ref]) for v, ref in zip(self.published, self._refs)] + self._league_ref

    def _submit(self, i: int) -> None:
        self._inflight[i].append((self.procs[i].round.remote(self._published()), time.monotonic()))

    # -- the learner's loop ----------------------------------------------------------------------
    def publish(self, k: int) -> None:
        """Put learner ``k``'s acting state in the object store; the next round calls carry it."""
        agent = self.learners[k]
        self._refs[k] = self.ray.put(agent.remote.state())
        self.published[k] = int(agent.updates)

    def put_league(self, arrays: dict[str, np.ndarray], version: int) -> None:
        self._league_ref = [(version, [self.ray.put(arrays)])]

    def wait_rounds(self, env_steps: int, stop: Callable[[int], bool] | None = None) -> list[tuple]:
        """Round reports until they sum to ``env_steps`` env steps (at least one, and one from every actor
        before the first chunk ends); bounded by ``actor_timeout`` without a report; an actor's error
        raises :class:`ActorError` with its traceback. ``stop`` as :meth:`Pool.wait_rounds`'s."""
        got: list[tuple] = []
        steps = 0
        deadline = time.monotonic() + self.options.actor_timeout
        while self.more_rounds(got, env_steps, self.reported):
            if stop is not None and stop(steps):
                break
            self.check_actors()
            heads = {q[0][0]: i for i, q in enumerate(self._inflight) if q}
            ready, _ = self.ray.wait(list(heads), num_returns=1, timeout=0.05)
            if not ready:
                if time.monotonic() > deadline:
                    raise ActorError(f"no round from any Ray actor for {self.options.actor_timeout} s "
                                     f"(actor_timeout); are there enough CPUs in the Ray cluster for "
                                     f"{len(self.procs)} actors (one CPU each)?")
                continue
            i = heads[ready[0]]
            self._inflight[i].popleft()
            self._returned[i] = time.monotonic()
            try:
                report, columns = self.ray.get(ready[0])
            except self.ray.exceptions.RayError as exc:
                raise ActorError(f"actor {i} failed:\n{exc}") from None  # it died, or could not start
            if report[0] == "error":
                raise ActorError(f"actor {report[1]} failed:\n{report[2]}")
            self.reported.add(i)
            for j in self.granted(i):
                self._submit(j)
            for k, parts in enumerate(columns):
                self._pending[k].extend(parts)
                self.rows_per_actor[i] += sum(len(p["rew"]) for p in parts)
            got.append(report)
            steps += int(report[2])
            self.heard(report)
            deadline = time.monotonic() + self.options.actor_timeout
        return got

    def release(self) -> None:
        if self.synchronous:
            for i in range(len(self.procs)):
                self._submit(i)

    def check_actors(self) -> None:
        """Raise :class:`ActorError` for an actor whose oldest round call has not returned ``actor_timeout``
        seconds after it could start (the later of the call and the return of the actor's previous round;
        it starts no later than that, so a slow learner never makes an actor look stuck)."""
        now, timeout = time.monotonic(), self.options.actor_timeout
        for i, calls in enumerate(self._inflight):
            if not calls:
                continue
            ref, made = calls[0]
            if now - max(made, self._returned[i]) > timeout and not self.ray.wait([ref], timeout=0)[0]:
                raise ActorError(f"actor {i} has been in one round for more than {timeout} s (actor_timeout): it "
                                 f"is stuck in its env or its agent; it is killed with the others")

    def drain(self) -> list[Transitions | None]:
        """Per learner: the transitions of the rounds received since the last drain (or None)."""
        out: list[Transitions | None] = []
        for k in range(len(self.learners)):
            parts, self._pending[k] = [p for p in self._pending[k] if len(p["rew"])], []
            out.append(columns_to_transitions(parts, reorder=False) if parts else None)
        return out

    def evicted(self) -> int:
        return 0  # no shards: nothing is evicted

    def close(self) -> None:
        """Kill every actor (and shut Ray down if this pool started it); idempotent."""
        self._finalizer()


def _stop(ray: Any, actors: list[Any], started: bool) -> None:
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    actors.clear()
    if started and ray.is_initialized():
        ray.shutdown()
