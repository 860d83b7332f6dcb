import os

import pytest

# torch reads this when it is imported: a test module that imports torch lazily (inside a fixture
# or a test) starts on one intra-op thread too, and so do CLI subprocesses the tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _one_torch_thread(request):
    """Every test runs torch on one intra-op thread (faster on 2 shared cores); restored afterwards.

    torch is touched only when a test module already imported it, so the numpy-only tests never
    import it.
    """
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_leftovers():
    """The test leaves no child process, and no shared-memory block or semaphore it created, behind.

    Only what this process creates during the test is checked (tests.leftovers.Created), so another job's
    segments appearing in /dev/shm meanwhile cannot fail it. Yields the Created record."""
    from tests.leftovers import Created, assert_nothing_left

    with Created() as created:
        yield created
    assert_nothing_left(created)
