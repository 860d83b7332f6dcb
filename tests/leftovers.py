"""What a test leaves behind in /dev/shm: only the blocks and semaphores this process created.

Other jobs on the machine (other test runs, other developers) create and remove their own entries in
/dev/shm at any time, so a before/after listing of the folder can blame a test for a neighbour's
segment. :class:`Created` records the names this process creates, as it creates them
(``SharedMemory(create=True)`` and every named ``multiprocessing`` semaphore: locks, queues,
events), and :meth:`Created.left` says which of them are still there. Importable by a script a
test runs in a subprocess (no pytest needed).
"""
import multiprocessing
import os
from multiprocessing import shared_memory, synchronize

SHM = "/dev/shm"


class Created:
    """Records the shared-memory blocks and semaphores created in this process between
    :meth:`start` and :meth:`stop` (a context manager too).
    """

    def __init__(self):
        self.names: list[str] = []
        self._saved = None

    def start(self) -> "Created":
        shm_init, sem_init = shared_memory.SharedMemory.__init__, synchronize.SemLock.__init__
        names = self.names

        def shm(block, name=None, create=False, size=0, **kwargs):
            shm_init(block, name, create, size, **kwargs)
            if create:
                names.append(block._name.lstrip("/"))

        def sem(lock, *args, **kwargs):
            sem_init(lock, *args, **kwargs)
            if lock._semlock.name is not None:  # None: unlinked at once (the fork start method)
                names.append("sem." + lock._semlock.name.lstrip("/"))

        self._saved = shm_init, sem_init
        shared_memory.SharedMemory.__init__ = shm
        synchronize.SemLock.__init__ = sem
        return self

    def stop(self) -> None:
        if self._saved is not None:
            shared_memory.SharedMemory.__init__, synchronize.SemLock.__init__ = self._saved
            self._saved = None

    def __enter__(self) -> "Created":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def blocks(self) -> list[str]:
        """The shared-memory blocks recorded (not the semaphores)."""
        return [n for n in self.names if not n.startswith("sem.")]

    def left(self, names=None) -> list[str]:
        """Those of ``names`` (default: every recorded name) still in /dev/shm."""
        return [n for n in (self.names if names is None else names) if os.path.exists(os.path.join(SHM, n))]


def assert_nothing_left(created: Created) -> None:
    """No child process of this process is alive, and no name ``created`` recorded is in /dev/shm."""
    children = multiprocessing.active_children()
    assert not children, f"child processes left by this test: {children}"
    left = created.left()
    assert left == [], f"left in /dev/shm by this test: {left}"
