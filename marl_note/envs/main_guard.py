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

import multiprocessing as mp
import os
import sys
from types import FrameType

__all__ = ["MissingMainGuardError", "check_not_reimporting_main", "reimporting_main", "GUARD_EXIT_CODE",
           "WORKER_NAME_PREFIX", "GUARD_ADVICE"]

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
