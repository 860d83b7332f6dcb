"""Test helpers shared by the agent and run checkpoint tests."""
import contextlib
import os
import signal
import subprocess
import sys

from marl_note.agents.checkpoints import read_checkpoint, write_checkpoint


def rewrite_checkpoint(path, edit_arrays=None, edit_manifest=None):
    """Change a checkpoint's content through the library's own writer (so its checksums are valid).

    ``edit_arrays(arrays)`` and ``edit_manifest(manifest)`` change the read dicts in place; the
    fields the writer fills in itself (format, array names, checksums, arrays file) are dropped.
    """
    manifest, arrays = read_checkpoint(path)
    if edit_arrays:
        edit_arrays(arrays)
    if edit_manifest:
        edit_manifest(manifest)
    for key in ("format", "arrays", "checksum", "arrays_sha256", "arrays_file"):
        manifest.pop(key, None)
    write_checkpoint(path, manifest, arrays)


# --------------------------------------------------------------------------- other processes writing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a save (``write_checkpoint(argv[1])``) killed with SIGKILL just before its argv[2]-th rename
KILLED_SAVE = r"""
import os, signal, sys
import numpy as np
from marl_note.agents.checkpoints import write_checkpoint
real, calls = os.replace, []
def replace(*args):
    calls.append(args)
    if len(calls) == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)
os.replace = replace
write_checkpoint(sys.argv[1], {"v": "killed"}, {"a": np.full(3, 9.0)})
"""

# ``write_atomically(argv[1])`` (the way the CheckpointManager writes its index) killed half way through
KILLED_WRITE = r"""
import os, signal, sys
from marl_note.atomic_files import write_atomically
def write(f):
    f.write(b"half of it")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
write_atomically(sys.argv[1], write)
"""

# a save paused after writing and fsyncing its first temporary file, until a line arrives on stdin:
# ``write_checkpoint(argv[1])`` or, with argv[2] == "file", ``write_atomically(argv[1])``
PAUSED_SAVE = r"""
import os, sys
import numpy as np
from marl_note.agents.checkpoints import write_checkpoint
from marl_note.atomic_files import write_atomically
real = os.fsync
def fsync(fd):
    real(fd)
    os.fsync = real
    print("paused", flush=True)
    sys.stdin.readline()
os.fsync = fsync
if sys.argv[2] == "file":
    write_atomically(sys.argv[1], lambda f: f.write(b"written while paused"))
else:
    write_checkpoint(sys.argv[1], {"v": "live"}, {"a": np.ones(2)})
"""


def run_killed(code, *args):
    """Run ``code`` in a new Python process that kills itself with SIGKILL (checked)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")[-2000:]


@contextlib.contextmanager
def paused_save(target, kind="checkpoint"):
    """A save of ``target`` in another live process, paused half way while the ``with`` block runs; then it
    goes on (``proc.returncode`` tells how it ended). The process never outlives the block."""
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_SAVE, str(target), kind], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"paused\n", "the writer did not start"
        yield proc
        _, err = proc.communicate(b"\n", timeout=120)
        assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
