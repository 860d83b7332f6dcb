"""Errors of :class:`~marl_note.envs.subproc.SubprocVectorEnv` and the check of its time bound."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["WorkerError", "EnvTimeoutError", "RemoteError", "Expired", "check_timeout"]


class WorkerError(RuntimeError):
    """An exception raised inside a worker process whose original could not be sent back."""


class EnvTimeoutError(TimeoutError):
    """Worker processes did not answer a ``call`` ("reset", "step", "start") within ``timeout`` s.

    ``env_indices`` and ``pids`` name the env each stuck worker was working on (all its envs if it was
    between envs) and the worker's pid; those workers have been killed and the vector env closed.

    Example:
        >>> err = EnvTimeoutError("env 3 did not finish step", env_indices=[3], pids=[4242], call="step", timeout=60.0)
        >>> isinstance(err, TimeoutError), err.env_indices, err.call
        (True, [3], 'step')
    """

    def __init__(self, message: str, env_indices: list[int], pids: list[int | None], call: str, timeout: float):
        super().__init__(message)
        self.env_indices, self.pids, self.call, self.timeout = env_indices, pids, call, timeout


def check_timeout(name: str, value: Any) -> float | None:
    """``value`` as a timeout in seconds (a positive finite number) or None; ValueError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds or None (no bound), got {value!r}")
    return float(value)


class Expired(Exception):
    """Internal: a deadline passed while waiting for a worker."""


class RemoteError(Exception):
    """Internal: a worker reported an exception; ``reraise`` raises it for the user."""

    def __init__(self, proc: int, env_index: int | None, exc: BaseException | None, text: str):
        super().__init__(text)
        self.proc, self.env_index, self.exc, self.text = proc, env_index, exc, text

    def reraise(self) -> None:
        where = f"env {self.env_index}" if self.env_index is not None else "setup"
        note = f"raised in SubprocVectorEnv worker process {self.proc} ({where}); worker traceback:\n{self.text}"
        if self.exc is not None and not isinstance(self.exc, KeyboardInterrupt):
            exc = self.exc
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(note)
                raise exc
            raise WorkerError(f"{type(exc).__name__}: {exc}\n{note}") from exc
        raise WorkerError(note)
