"""Stop a script without the ``if __name__ == "__main__":`` guard from re-running in worker processes.

A process started with the "forkserver" or "spawn" method imports its parent's main script again (as
``__mp_main__``) before it runs its target, so a script without the guard runs its body once more in
every worker: it would build trainers, train and write files there. marl_note's entry points call
:func:`check_not_reimporting_main` first. In such a re-import it stops the process before the body
goes any further: an env worker of :class:`~marl_note.envs.subproc.SubprocVectorEnv` exits with
:data:`GUARD_EXIT_CODE` (the parent turns that into :class:`MissingMainGuardError`), any other
process raises :class:`MissingMainGuardError` itself.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["MissingMainGuardError", "check_not_reimporting_main", "reimporting_main", "GUARD_EXIT_CODE",
           "WORKER_NAME_PREFIX", "GUARD_ADVICE", "main_not_reimported"]

WORKER_NAME_PREFIX = "marl_note-env-worker"  # process name of SubprocVectorEnv workers
GUARD_EXIT_CODE = 86  # exit status of a worker stopped by the check
GUARD_ADVICE = ('put the code that builds and trains the trainer (or the vector env) under '
                '`if __name__ == "__main__":`, as multiprocessing requires of any script that starts '
                'worker processes')


class MissingMainGuardError(RuntimeError):
    """A script without the ``if __name__ == "__main__":`` guard started env worker processes.

    Example:
        >>> issubclass(MissingMainGuardError, RuntimeError)
        True
    """


def reimporting_main() -> bool:
    """Whether this process is a multiprocessing child still importing its parent's main script.

    Example:
        >>> reimporting_main()  # the main process, or a worker past its start-up
        False
    """
    # the standard library sets `_inheriting` while a child unpickles its start-up data and
    # imports the main script; the frame check also covers a main script run as `__mp_main__` anywhere
    if getattr(mp.process.current_process(), "_inheriting", False):
        return True
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def check_not_reimporting_main(what: str) -> None:
    """Stop here if :func:`reimporting_main`; ``what`` names the object being created."""
    if not reimporting_main():
        return
    name = mp.current_process().name
    if name.startswith(WORKER_NAME_PREFIX):
        os._exit(GUARD_EXIT_CODE)  # the parent reports it; nothing of the script's body runs further
    raise MissingMainGuardError(
        f"{what} was created while process {name!r} (pid {os.getpid()}) imports the main script of its "
        f"parent: the script has no `if __name__ == \"__main__\":` guard, so each worker process runs it "
        f"again; {GUARD_ADVICE}")


@contextlib.contextmanager
def main_not_reimported() -> Iterator[None]:
    """Start processes without them importing the user's main script (nor the framework it imports).

    For children that get everything by value (cloudpickle) and whose entry point is a marl_note
    module: the spawn/forkserver preparation step that re-runs ``__main__`` is skipped by hiding the
    main module's file and spec while the processes start, so such children need no main guard.

    Example:
        >>> import sys
        >>> with main_not_reimported():
        ...     getattr(sys.modules["__main__"], "__spec__", None) is None
        True
    """
    main = sys.modules.get("__main__")
    keys = ("__file__", "__spec__")
    saved: dict[str, Any] = {k: main.__dict__[k] for k in keys if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)
