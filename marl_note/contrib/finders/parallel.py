"""``ParallelFinder``: :class:`~marl_note.contrib.finders.finders.OptFinder`'s candidates trained side by side,
one worker process per candidate.

Each worker (a fresh ``spawn`` interpreter: no framework state is inherited) runs an
``OptFinder(factory, [candidate]).find(env, ...)`` with the same trainer arguments (same seed, same
budget) and sends back a numpy/JSON-only row: the candidate, its score, the best and mean test
metric, the final loss and the wall time. The factory, env and arguments reach the workers through
cloudpickle, so lambdas and closures work. Nothing of a framework crosses back, so the parent needs
no framework either, and the workers do not re-run the user's script (no main guard is needed). Workers
are bounded by ``timeout`` (all of them are terminated when it runs out or when a worker fails or
dies) and the executor is always shut down.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import cloudpickle
import numpy as np

from marl_note.agents.base import Acting
from marl_note.contrib.finders.parts import check_candidates, check_loss_key, checked_metric
from marl_note.contrib.finders.results import OptFinderResult
from marl_note.envs.main_guard import main_not_reimported
from marl_note.validation import positive_float, positive_int

__all__ = ["ParallelFinder"]


def _train_candidate(payload: bytes) -> dict[str, Any]:
    """Worker: one candidate's OptFinder run; returns plain numbers, lists and dicts only."""
    from marl_note.contrib.finders.finders import OptFinder

    factory, index, candidate, env, metric, loss_key, tail, trainer_kwargs = cloudpickle.loads(payload)
    start = time.perf_counter()
    row = OptFinder(factory, [candidate]).find(env, metric, loss_key=loss_key, tail=tail, **trainer_kwargs).rows[0]
    tests = [float(m) for _, m in row["test_history"]]
    losses = [float(x) for x in row["losses"]]
    return {"index": index, "candidate": dict(candidate), "score": float(row["score"]),
            "diverged": bool(row["diverged"]), "error": row["error"], "episodes": row["episodes"],
            "gradient_steps": row["gradient_steps"], "losses": losses,
            "test_history": [(int(e), float(m)) for e, m in row["test_history"]],
            "best_reward": max(tests) if tests else math.nan,
            "final_loss": float(np.mean(losses[-tail:])) if losses else math.nan,
            "time_s": time.perf_counter() - start, "same_init": None}


def _shutdown(executor: ProcessPoolExecutor) -> None:
    """Stop every worker now (a finished search, a timeout or an error): terminate, then join.

    The executor's manager thread also joins the workers (and reaps one that died), and two threads
    reaping one child race: the loser sees the child as still running until the winner records its
    exit code. So the manager thread is joined last, after which every worker has a recorded exit."""
    table = getattr(executor, "_processes", None)  # the dict object, which the manager thread keeps using
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=True)
    processes = list((table or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(timeout=5.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)
    if manager is not None:
        manager.join(timeout=10.0)
    for proc in list((table or {}).values()):  # one the manager thread started while shutting down
        if proc not in processes:
            proc.kill()
            proc.join(timeout=5.0)


class ParallelFinder:
    """Train each candidate (constructor overrides) in its own process and rank them as ``OptFinder`` does.

    ``factory(trainer, **candidate) -> agent`` builds each candidate's agent (seed it for the same
    initial weights); ``processes`` workers run at once (default: one per candidate, at most the
    CPU count). ``find`` returns an :class:`~marl_note.contrib.finders.results.OptFinderResult`
    whose rows also hold ``best_reward`` (the best test metric), ``final_loss`` (mean of the last
    ``tail`` update rounds' losses) and ``time_s``; ``best_agent`` is None (agents stay in their
    workers: rebuild the best with ``factory`` and ``result.best``). Bad candidates and arguments
    are refused in the parent, before any process starts.

    Example:
        >>> finder = ParallelFinder(lambda trainer, lr=1e-3: None, [{"lr": 1e-3}, {"lr": 1e-2}], processes=2)
        >>> finder.processes, finder.candidates
        (2, [{'lr': 0.001}, {'lr': 0.01}])
        >>> ParallelFinder(lambda trainer: None, [{"lr": 1e-3}])
        Traceback (most recent call last):
        ...
        TypeError: candidate 0 {'lr': 0.001} has unknown argument(s) ['lr']: <lambda> takes []
    """

    def __init__(self, factory: Callable[..., Any], candidates: Sequence[Mapping[str, Any]],
                 processes: int | None = None, timeout: float = 3600.0):
        if not callable(factory) or isinstance(factory, Acting):
            raise TypeError(f"ParallelFinder takes a factory factory(trainer, **candidate) -> agent, "
                            f"got {type(factory).__name__}")
        self.factory = factory
        self.candidates = check_candidates(candidates, None, factory)
        default = min(len(self.candidates), os.cpu_count() or 1)
        self.processes = default if processes is None else positive_int("processes", processes, "worker processes")
        self.timeout = positive_float("timeout", timeout, "seconds the whole search may take")
        self.result: OptFinderResult | None = None

    def find(self, env: Any, metric: str = "reward", *, loss_key: str | None = None, tail: int = 10,
             **trainer_kwargs: Any) -> OptFinderResult:
        """Train every candidate in the workers and rank them (reward: mean test metric, higher first;
        loss: final loss, lower first; a diverged candidate last)."""
        metric = checked_metric(metric)
        loss_key = check_loss_key(loss_key)
        tail = positive_int("tail", tail, "update rounds averaged for the final loss")
        if "progress" in trainer_kwargs:
            raise TypeError("ParallelFinder has no progress bar (the workers run side by side)")
        payloads = [cloudpickle.dumps((self.factory, i, cand, env, metric, loss_key, tail, trainer_kwargs))
                    for i, cand in enumerate(self.candidates)]
        # a fresh interpreter per worker that neither re-runs the user's script (so it needs no main
        # guard) nor inherits framework state; a worker that dies breaks the executor at once
        executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
        try:
            with main_not_reimported():  # the workers start at submit
                pending = [executor.submit(_train_candidate, p) for p in payloads]
            deadline = time.monotonic() + self.timeout
            rows = []
            for i, job in enumerate(pending):
                try:
                    rows.append(job.result(timeout=max(0.0, deadline - time.monotonic())))
                except FuturesTimeout:
                    raise TimeoutError(f"ParallelFinder: candidate {i} {self.candidates[i]} did not finish within "
                                       f"timeout={self.timeout:g} s; every worker was stopped") from None
                except BrokenProcessPool as exc:
                    raise RuntimeError(f"ParallelFinder: the worker of candidate {i} {self.candidates[i]} died "
                                       f"(killed, or out of memory); every worker was stopped") from exc
        finally:
            _shutdown(executor)
        order = sorted(range(len(rows)), key=lambda i: (math.isnan(rows[i]["score"]),
                                                        -rows[i]["score"] if metric == "reward" else rows[i]["score"]))
        self.result = OptFinderResult(metric, [{"rank": r + 1, **rows[i]} for r, i in enumerate(order)])
        return self.result
