"""Writing files the crash-safe way: a temporary file beside the target, fsync, one atomic rename.

Temporary files are created with ``os.open(..., 0o666)``, so the process umask applies to them
exactly as to any other new file (``tempfile.mkstemp`` would make them 0600, and the renamed file
would keep that mode). A file that replaces an existing one takes over that file's permissions.

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> write_atomically(os.path.join(d, "a.txt"), lambda f: f.write(b"hello"))
    >>> open(os.path.join(d, "a.txt"), "rb").read(), os.listdir(d)
    (b'hello', ['a.txt'])
"""
from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from typing import IO, Any

__all__ = ["create_temp", "write_atomically", "fsync_dir", "keep_mode", "remove_quietly"]

TEMP_PREFIX = ".marl_note-tmp-"


def create_temp(directory: str, prefix: str = TEMP_PREFIX, suffix: str = "") -> tuple[int, str]:
    """A new, empty file in ``directory`` opened for writing: ``(fd, path)``, mode ``0o666 & ~umask``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(64):
        path = os.path.join(directory, f"{prefix}{secrets.token_hex(8)}{suffix}")
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file in {directory}")


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
