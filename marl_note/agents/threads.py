"""How many threads the frameworks and numpy's BLAS use: one intra-op thread by default, more on request.

The networks of a multi-agent run are small (a few 64-unit layers), so PyTorch's and TensorFlow's
intra-op threads gain nothing in a gradient step and lose a great deal when the cores are busy:
a parallel region waits for every thread, and a thread that another process has descheduled holds
up the step. Measured on the shared 2-core VM (``bench/bench_threads.py``, ``docs/benchmarks.md``),
one thread is several times faster per env step under load and no slower idle. So
:class:`~marl_note.trainers.DecentralizedTrainer` (``threads="auto"``, its default), the command
line (``--threads N``), the zoo and the examples run with :data:`DEFAULT_THREADS`;
``threads=N`` asks for more and ``threads=None`` leaves the frameworks' own defaults alone.

:func:`use_threads` sets the threads of the frameworks already imported (it never imports one, so
the trainer may call it; the calls themselves live in ``agents/torch/threads.py`` and
``agents/tf/threads.py``) and of numpy's BLAS (:mod:`marl_note.agents.blas`: the numpy backend's
products and every backend's numpy acting run there). TensorFlow fixes its thread pools when its
runtime starts, before any TF agent exists: only a caller that sets them first (the command line
does, before building agents) changes them; later, :func:`use_threads` reports the count TensorFlow keeps.

In a pool run (``DecentralizedTrainer(actors=N)``) the actors take cores too:
:func:`limit_framework_threads` caps the learner's PyTorch and BLAS threads and returns the function that
restores them (measured here, 2 cores, 2 actors, a 64-64 DQN on CartPole: 1.7 ms per gradient step
against 1.1 ms with one thread).

Example:
    >>> check_threads("auto"), check_threads(None), check_threads(4)
    (1, None, 4)
    >>> restore = limit_framework_threads(1)
    >>> restore()  # back to what it was (a no-op when no framework was capped)
    >>> describe_threads({"torch": 1, "numpy": 1})
    '1 thread (torch, numpy)'
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from marl_note.agents.blas import blas_threads, set_blas_threads

__all__ = ["DEFAULT_THREADS", "check_threads", "describe_threads", "limit_framework_threads", "use_threads",
           "usable_cores"]

DEFAULT_THREADS = 1  # intra-op threads of a run unless asked otherwise (see the module docstring)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform reports it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def check_threads(threads: Any) -> int | None:
    """``threads`` of a trainer or the command line as a count: ``"auto"`` is :data:`DEFAULT_THREADS`, None
    (the frameworks' defaults) stays None, else a positive integer; anything else raises naming it."""
    if threads is None:
        return None
    if isinstance(threads, str) and threads == "auto":
        return DEFAULT_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be 'auto', None or a positive integer, got {threads!r}")
    return int(threads)


def use_threads(threads: int | None, backend: str | None = None,
                interop: bool = False) -> tuple[dict[str, int], Callable[[], None]]:
    """Set ``threads`` intra-op threads in every framework already imported (and in ``backend``,
    ``"torch"`` or ``"tf"``, which is imported if it is not yet) and in numpy's BLAS (``"numpy"``);
    with ``interop`` PyTorch's inter-op pool too where it may still change. Returns
    ``{framework: threads in effect}`` and the function that restores PyTorch's and the BLAS's counts
    (TensorFlow's pools cannot change back). ``threads=None`` changes nothing and reports the counts
    in effect."""
    effect: dict[str, int] = {}
    restores: list[Callable[[], None]] = []
    if backend == "torch" or sys.modules.get("torch") is not None:
        from marl_note.agents.torch import threads as torch_threads

        if threads is not None:
            restores.append(torch_threads.set_threads(threads, interop=interop))
        effect["torch"] = torch_threads.threads()
    if backend == "tf" or sys.modules.get("tensorflow") is not None:
        from marl_note.agents.tf import threads as tf_threads

        if threads is not None:
            tf_threads.set_threads(threads)
        effect["tensorflow"] = tf_threads.threads() or usable_cores()  # 0: TensorFlow's default, one per core
    if threads is not None:
        restores.append(set_blas_threads(threads))
    blas = blas_threads()
    if blas is not None:
        effect["numpy"] = blas

    def restore() -> None:
        for undo in restores:
            undo()
    return effect, restore


def describe_threads(effect: Mapping[str, int]) -> str:
    """``{framework: threads}`` in words, for a run's header: ``"1 thread (torch)"``."""
    if not effect:
        return "no framework threads"
    counts = sorted(set(effect.values()))
    if len(counts) == 1:
        return f"{counts[0]} thread{'s' if counts[0] > 1 else ''} ({', '.join(effect)})"
    return ", ".join(f"{n} thread{'s' if n > 1 else ''} ({name})" for name, n in effect.items())


def limit_framework_threads(threads: int) -> Callable[[], None]:
    """Cap PyTorch's intra-op threads (if PyTorch is imported) and numpy's BLAS threads at ``threads``
    where they use more; returns the function that sets them back (call it once the actors have stopped)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    restores: list[Callable[[], None]] = []
    blas = blas_threads()
    if blas is not None and blas > threads:
        restores.append(set_blas_threads(threads))
    if sys.modules.get("torch") is not None:
        from marl_note.agents.torch import threads as torch_threads

        if torch_threads.threads() > threads:
            restores.append(torch_threads.set_threads(threads))

    def restore() -> None:
        for undo in restores:
            undo()
    return restore
