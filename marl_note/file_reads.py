"""Reading files that name data: regular files only, and never more bytes than a stated limit.

A checkpoint's manifest, a run record or a recipe is data handed to us by whoever wrote the file.
:func:`read_regular` is the one way such a file is read: it opens without blocking (a FIFO cannot
hang the reader), refuses anything that is not a regular file after following links (a link to
``/dev/zero``, a device, a socket, a directory), and refuses a file larger than ``limit`` before
reading it, so a hostile file costs neither memory nor time.

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "run.json"); _ = open(p, "w").write("{}")
    >>> read_regular(p, limit=100)
    b'{}'
    >>> os.mkfifo(os.path.join(d, "pipe"))
    >>> read_regular(os.path.join(d, "pipe"), limit=100)
    Traceback (most recent call last):
    ...
    marl_note.file_reads.FileRefused: ... is a FIFO, not a regular file; refusing to read it
"""
from __future__ import annotations

import os
import stat

__all__ = ["FileRefused", "read_regular", "check_regular", "JSON_LIMIT"]

JSON_LIMIT = 16 << 20  # manifests, run records and recipes are kilobytes; 16 MiB is far beyond any real one

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


class FileRefused(ValueError):
    """A file that is not a regular file, or is larger than the reader's limit."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_regular(path: str | os.PathLike, limit: int | None = None) -> int:
    """The size of ``path`` if it is a regular file (links followed) of at most ``limit`` bytes, else FileRefused.

    Nothing is opened, so a FIFO or a device is refused without touching it.
    """
    where = os.fspath(path)
    st = os.stat(where)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{where} is {_kind(st.st_mode)}, not a regular file; refusing to read it")
    if limit is not None and st.st_size > limit:
        raise FileRefused(f"{where} holds {st.st_size:,} bytes, more than the {limit:,} this reader takes; "
                          f"refusing to read it")
    return int(st.st_size)


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file ``path``, or FileRefused when it is anything else or over ``limit`` bytes.

    The file is opened with ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so a
    path swapped for a FIFO or a device between the check and the read is refused too; at most
    ``limit + 1`` bytes are ever read (a file that grows while it is read is refused).
    Missing files raise FileNotFoundError as ``open`` does.
    """
    where = os.fspath(path)
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{where} is {_kind(st.st_mode)}, not a regular file; refusing to read it")
        if st.st_size > limit:
            raise FileRefused(f"{where} holds {st.st_size:,} bytes, more than the {limit:,} this reader takes; "
                              f"refusing to read it")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused(f"{where} grew past {limit:,} bytes while it was read; refusing it")
    return data
