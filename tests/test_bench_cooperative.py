"""bench/bench_cooperative.py: the training budget in env steps holds for envs of any episode length."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cooperative", ROOT / "bench" / "bench_cooperative.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pursuit_trains_the_asked_env_steps_not_eight_times_more(bench):
    """pursuit's env has no ``max_cycles`` attribute: the bench once assumed 25-step episodes there."""
    pytest.importorskip("pettingzoo.sisl")
    trainer = bench.trainer_for(bench.make_env("pursuit_v5", 200), 200, 2000, 0, 400, 1)
    try:
        assert trainer.episodes_per_train * 200 == 2000
    finally:
        trainer.close()
