"""Writing files the crash-safe way: a temporary file beside the target, fsync, one atomic rename.

Temporary files are created with ``os.open(..., 0o666)``, so the process umask applies to them
exactly as to any other new file (``tempfile.mkstemp`` would make them 0600, and the renamed file
would keep that mode). A file that replaces an existing one takes over that file's permissions.

A temporary file is named ``<prefix><host>-<pid>-<random>[suffix]`` (``<host>``: 8 hex digits of a
hash of this machine's host name; ``<pid>``: the writing process). A process killed mid-write
leaves its temporary behind; :func:`remove_stale_temps` removes such leftovers, and only those:
a file whose name has exactly this pattern (or the ``<prefix><random>`` pattern of versions that
did not record the writer) and that is *stale*, meaning

- its writer is this process, which no longer writes it (a failed write that could not clean up);
- or its writer ran on this machine and no process with its pid is running any more (POSIX only:
  ``os.kill(pid, 0)``; a pid that a new process has taken counts as running);
- or it was last modified more than :data:`STALE_AFTER_S` (one hour) ago: the rule for
  temporaries written on another machine (a shared file system), of a process that is still
  running, and without a recorded writer.

So a save still in progress in another live process on this machine keeps its temporary files.
Limit: two machines (or containers with separate process-id namespaces) sharing one host name
and one directory could take each other's running writers for dead ones.

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> write_atomically(os.path.join(d, "a.txt"), lambda f: f.write(b"hello"))
    >>> open(os.path.join(d, "a.txt"), "rb").read(), os.listdir(d)
    (b'hello', ['a.txt'])
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["create_temp", "release_temp", "write_atomically", "fsync_dir", "keep_mode", "remove_quietly",
           "remove_stale_temps", "is_stale_temp", "STALE_AFTER_S"]

TEMP_PREFIX = ".marl_note-tmp-"
OUR_PREFIX = ".marl_note-"  # every temporary file of the library starts with it
STALE_AFTER_S = 3600.0  # a temporary untouched for this long is a leftover, whoever wrote it
_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]
# <prefix><host>-<pid>-<random><suffix>, or <prefix><random><suffix> (written before names carried the writer)
_TEMP_NAME = re.compile(r"\.marl_note-[a-z]+-(?:(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-)?[0-9a-f]{16}"
                        r"(?:\.[A-Za-z0-9]{1,8})?")
_writing: set[str] = set()  # absolute paths of the temporary files this process is writing now


def create_temp(directory: str, prefix: str = TEMP_PREFIX, suffix: str = "") -> tuple[int, str]:
    """A new, empty file in ``directory`` opened for writing: ``(fd, path)``, mode ``0o666 & ~umask``.

    Its name records this process (see the module doc); until :func:`release_temp` (or the
    rename or removal that ends the write), :func:`remove_stale_temps` in this process leaves it alone.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(64):
        path = os.path.join(directory, f"{prefix}{_HOST}-{os.getpid()}-{secrets.token_hex(8)}{suffix}")
        try:
            fd = os.open(path, flags, 0o666)
        except FileExistsError:
            continue
        _writing.add(os.path.abspath(path))
        return fd, path
    raise FileExistsError(f"could not create a temporary file in {directory}")


def release_temp(path: str) -> None:
    """Mark the temporary ``path`` of :func:`create_temp` as no longer being written (renamed or removed)."""
    _writing.discard(os.path.abspath(path))


def is_stale_temp(path: str, now: float | None = None) -> bool:
    """Whether ``path`` is a temporary file of ours that no live write owns (see the module doc).

    Example:
        >>> import os, tempfile
        >>> fd, tmp = create_temp(tempfile.mkdtemp()); os.close(fd)
        >>> is_stale_temp(tmp)  # this process is still writing it
        False
        >>> release_temp(tmp); is_stale_temp(tmp)
        True
    """
    m = _TEMP_NAME.fullmatch(os.path.basename(path))
    if m is None:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if m["host"] == _HOST:
        pid = int(m["pid"])
        if pid == os.getpid():
            return os.path.abspath(path) not in _writing
        if not _running(pid):
            return True
    return (time.time() if now is None else now) - st.st_mtime > STALE_AFTER_S


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (True where that cannot be told)."""
    if pid <= 0 or os.name == "nt":  # os.kill(pid, 0) on Windows would terminate the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # PermissionError: another user's process
        return True
    return True


def remove_stale_temps(directory: str, prefix: str = OUR_PREFIX, suffix: str = "") -> list[str]:
    """Remove the stale temporary files of ours directly in ``directory`` whose names start with
    ``prefix`` and end with ``suffix``; return their names. Nothing else is touched (other names,
    directories, links, and temporaries a live process is writing stay); errors are ignored.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    now = time.time()
    for name in sorted(names):
        if name.startswith(prefix) and name.endswith(suffix) and is_stale_temp(os.path.join(directory, name), now):
            try:
                remove_quietly(os.path.join(directory, name))
            except OSError:
                continue
            removed.append(name)
    return removed


def write_atomically(path: str, write: Callable[[IO[bytes]], Any], prefix: str = TEMP_PREFIX,
                     suffix: str = "") -> None:
    """Make ``path`` hold what ``write(file)`` writes; at any crash point it holds the old or the new file.

    The temporary file is removed if anything fails before the rename.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = create_temp(directory, prefix, suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        keep_mode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    finally:
        release_temp(tmp)
    fsync_dir(directory)


def fsync_dir(directory: str) -> None:
    """Make renames inside ``directory`` durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def keep_mode(old: str, new: str) -> None:
    """Give ``new`` the permission bits of ``old`` when ``old`` is an existing regular file."""
    try:
        st = os.stat(old)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        os.chmod(new, stat.S_IMODE(st.st_mode))


def remove_quietly(path: str) -> None:
    """Remove ``path`` if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
