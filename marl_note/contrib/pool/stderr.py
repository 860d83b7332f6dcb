"""The actors' stderr: passed on to the learner's, each actor's last bytes kept for its error message.

Each actor process writes its stderr (file descriptor 2) into a pipe of its own. One thread of the
learner copies what arrives to the learner's stderr, as the actors' output appeared before, and
keeps each actor's last :data:`TAIL` bytes, so that an actor that dies without a traceback (killed,
``os._exit``, a crash in native code) is reported with what it wrote last. POSIX only: elsewhere
the actors keep the learner's stderr and their tails stay empty.

Example (the learner writes into actor 0's pipe itself here; its bytes are copied to stderr too):
    >>> import multiprocessing as mp, os
    >>> tails = StderrTails(1, mp.get_context("spawn"))
    >>> os.write(tails.writer(0).fileno(), b"an actor's last words\\n")
    22
    >>> tails.started()  # closes the learner's write ends: with no actor holding one, the pipe ends
    >>> tails.tail(0)
    "an actor's last words\\n"
    >>> tails.close()
"""
from __future__ import annotations

import os
import selectors
import threading
from typing import Any

__all__ = ["StderrTails", "TAIL"]

TAIL = 2000  # bytes of an actor's stderr kept for its error message


class StderrTails:
    """One pipe per actor for its stderr (:meth:`writer` goes to the actor, which calls :func:`redirect`)."""

    def __init__(self, actors: int, ctx: Any):
        self.enabled = os.name == "posix"
        self._tails = [bytearray() for _ in range(actors)]
        self._ended = [threading.Event() for _ in range(actors)]
        self._pipes: list[tuple[Any, Any]] = [ctx.Pipe(duplex=False) if self.enabled else (None, None)
                                              for _ in range(actors)]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def writer(self, actor: int) -> Any:
        """The write end of ``actor``'s pipe, for its process arguments (None where not enabled)."""
        return self._pipes[actor][1]

    def started(self) -> None:
        """Every actor started: close the learner's copies of the write ends and start copying."""
        if not self.enabled or self._thread is not None:
            return
        for _, w in self._pipes:
            w.close()
        self._thread = threading.Thread(target=self._copy, name="marl_note-actor-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            for i, (r, _) in enumerate(self._pipes):
                selector.register(r.fileno(), selectors.EVENT_READ, i)
            while selector.get_map() and not self._stop.is_set():
                for key, _ in selector.select(timeout=0.1):
                    i = key.data
                    try:
                        data = os.read(key.fd, 65536)
                    except OSError:
                        data = b""
                    if not data:  # the actor (and whatever inherited its stderr) exited
                        selector.unregister(key.fd)
                        self._ended[i].set()
                        continue
                    with self._lock:
                        tail = self._tails[i]
                        tail += data
                        del tail[:-TAIL]
                    _write_all(2, data)
        finally:
            selector.close()

    def tail(self, actor: int, wait: float = 0.5) -> str:
        """The last bytes ``actor`` wrote to stderr (decoded), after waiting up to ``wait`` seconds for
        the end of its pipe (a dead actor's last writes may still be on the way)."""
        if self._thread is not None:
            self._ended[actor].wait(wait)
        with self._lock:
            return self._tails[actor].decode(errors="replace")

    def close(self) -> None:
        """Stop copying (after the actors stopped: what they wrote last is copied first) and close the pipes."""
        if self._thread is not None:
            for ended in self._ended:
                ended.wait(0.5)
            self._stop.set()
            self._thread.join(timeout=2.0)
        for r, w in self._pipes:
            for end in (r, w):
                if end is not None:
                    end.close()
        self._pipes = [(None, None)] * len(self._pipes)


def redirect(writer: Any) -> None:
    """In an actor process: send file descriptor 2 (and ``sys.stderr``) to ``writer``, the pipe's write end."""
    if writer is None:
        return
    import sys

    sys.stderr.flush()
    os.dup2(writer.fileno(), 2)
    writer.close()


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # the learner's stderr is closed: the tail is still kept
        pass
