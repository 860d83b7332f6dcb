"""The leftovers check (tests/leftovers.py, behind the no_leftovers fixture): it catches this process's leaks
and ignores what other processes on the machine create in /dev/shm meanwhile."""
import multiprocessing
import subprocess
import sys
from multiprocessing import shared_memory

import pytest

from tests.leftovers import Created, assert_nothing_left

NEIGHBOUR = """
import sys
from multiprocessing import shared_memory
block = shared_memory.SharedMemory(create=True, size=64)
print(block.name, flush=True)
sys.stdin.readline()
block.close()
block.unlink()
"""


def test_a_block_or_semaphore_this_process_leaves_is_caught_and_a_freed_one_is_not():
    with Created() as created:
        kept = shared_memory.SharedMemory(create=True, size=64)
        freed = shared_memory.SharedMemory(create=True, size=64)
        lock = multiprocessing.get_context("forkserver").Lock()
    try:
        freed.close()
        freed.unlink()
        assert created.blocks() == [kept.name.lstrip("/"), freed.name.lstrip("/")]
        sems = [n for n in created.names if n.startswith("sem.")]
        assert len(sems) == 1 and created.left() == [kept.name.lstrip("/"), *sems]
        with pytest.raises(AssertionError, match="left in /dev/shm by this test: .*" + kept.name.lstrip("/")):
            assert_nothing_left(created)
    finally:
        kept.close()
        kept.unlink()
    with pytest.raises(AssertionError, match="left in /dev/shm by this test: .*sem"):
        assert_nothing_left(created)  # the lock's semaphore, while the lock lives
    del lock  # its semaphore is unlinked when it is collected
    assert_nothing_left(created)


def test_a_child_process_left_alive_is_caught():
    ctx = multiprocessing.get_context("forkserver")
    with Created() as created:
        stop = ctx.Event()
        child = ctx.Process(target=stop.wait, args=(30,))
        child.start()
    try:
        with pytest.raises(AssertionError, match="child processes left by this test"):
            assert_nothing_left(created)
    finally:
        stop.set()
        child.join(30)
    del stop, child
    assert_nothing_left(created)


def test_another_process_creating_a_block_meanwhile_is_not_blamed():
    with Created() as created:
        proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        try:
            theirs = proc.stdout.readline().strip().lstrip("/")
            assert created.left([theirs]) == [theirs]  # the neighbour's block is in /dev/shm
            assert_nothing_left(created)
        finally:
            proc.communicate("\n", timeout=30)
    assert proc.returncode == 0
    later = shared_memory.SharedMemory(create=True, size=64)  # after the record stopped: not recorded
    try:
        assert later.name.lstrip("/") not in created.names
    finally:
        later.close()
        later.unlink()
