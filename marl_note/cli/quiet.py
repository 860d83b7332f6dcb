"""A command's terminal without the frameworks' start-up logs.

TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL`` when its C++ runtime loads, but some of its start-up lines
are written before that setting is read: since TensorFlow 2.21 the lines logged before
``absl::InitializeLog()`` (on CPUs where oneDNN is on by default, "oneDNN custom operations are on",
twice, each after absl's own "All log messages before absl::InitializeLog() ..." line) reach the
terminal at any level. So :func:`quiet_frameworks` also reads what the first ``import tensorflow``
writes to file descriptor 2 and passes on every line except the C++ log lines that the level in force
hides (``TF_CPP_MIN_LOG_LEVEL``: the user's, else 2: INFO and WARNING hidden, errors shown) and absl's
notice before them. Python's own warnings and anything else printed during the import pass unchanged.

Example:
    >>> start_up_noise("I0000 00:00:1795911187.700748    4095 port.cc:153] oneDNN custom operations are on.", 2)
    True
    >>> start_up_noise("E0000 00:00:1795911187.700748    4095 cuda_dnn.cc:8] Unable to register cuDNN", 2)
    False
    >>> start_up_noise("UserWarning: something of the user's", 2)
    False
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

__all__ = ["quiet_frameworks", "start_up_noise"]

DEFAULT_LEVEL = 2  # TF_CPP_MIN_LOG_LEVEL unless the user set one: INFO and WARNING hidden
# glog/absl's prefix: severity, MMDD, time, thread, file:line]
_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ [^ \]]+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
_ABSL_NOTICE = "All log messages before absl::InitializeLog() is called are written to STDERR"
_CPU_GUARD_TAIL = "rebuild TensorFlow with the appropriate compiler flags"  # the second line of cpu_feature_guard's


def start_up_noise(line: str, level: int) -> bool:
    """True for a line of TensorFlow's C++ start-up logging that ``TF_CPP_MIN_LOG_LEVEL=level`` hides."""
    if level < 1:
        return False
    if _ABSL_NOTICE in line or _CPU_GUARD_TAIL in line:
        return True
    found = _LOG_LINE.match(line)
    return found is not None and _SEVERITY[found.group(1)] < level


def _level() -> int:
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LEVEL))
    except ValueError:
        return DEFAULT_LEVEL


class _QuietLoader(importlib.abc.Loader):
    """Runs a module's import with file descriptor 2 read into a file, then writes back what is not noise."""

    def __init__(self, loader: Any):
        self.loader = loader

    def __getattr__(self, name: str) -> Any:  # the rest of the interface (resources, source): the wrapped loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 2)
            try:
                self.loader.exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                caught.seek(0)
                level = _level()
                kept = [line for line in caught.read().decode("utf-8", "replace").splitlines(keepends=True)
                        if not start_up_noise(line, level)]
                if kept:
                    sys.stderr.write("".join(kept))
                    sys.stderr.flush()


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds the top-level modules ``names`` as the path finder does, their loaders wrapped in :class:`_QuietLoader`."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


@contextlib.contextmanager
def quiet_frameworks(quiet: bool = True, modules: tuple[str, ...] = ("tensorflow",)) -> Iterator[None]:
    """Within the block, a TensorFlow imported for the first time prints no C++ INFO/WARNING start-up
    lines (``TF_CPP_MIN_LOG_LEVEL=2`` unless the user set it; the lines written before TensorFlow reads
    it are filtered out of the import's standard error), and the ``absl`` and ``tensorflow`` Python
    loggers only errors; the environment, the loggers and the import system are restored afterwards.
    ``modules``: the top-level modules whose first import is filtered so."""
    if not quiet:
        yield
        return
    set_level = "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    if set_level:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = str(DEFAULT_LEVEL)  # read by TensorFlow's C++ runtime when it loads
    loggers = [logging.getLogger(name) for name in ("absl", "tensorflow")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    finder = _QuietFinder(tuple(name for name in modules if name not in sys.modules))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if set_level:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
