"""Smoke run of bench/bench_dqn_collect.py: the bench's collection alone repeats its transitions exactly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _run(seed: int, *extra: str, steps: int = 256) -> dict:
    # a subprocess: the script imports bench_sb3_dqn.py, which blocks TensorFlow's import for its process
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_dqn_collect.py"), "--steps", str(steps),
                           "--seed", str(seed), "--json", *extra], capture_output=True, text=True, timeout=120,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bench_dqn_collect_repeats_the_same_transitions_for_a_seed():
    first, again, other = _run(0), _run(0), _run(1)
    assert first["env_steps"] == again["env_steps"] == 256 and first["episodes"] > 0
    assert first["fingerprint"] == again["fingerprint"] != other["fingerprint"]
    assert first["cpu_us"] > 0 and first["wall_us"] > 0


def test_a_recipes_collection_repeats_the_same_transitions_for_a_seed():
    # connect four's self-play recipe: 16 envs, one learner in both seats, 3-step returns
    first, again, other = (_run(seed, "--recipe", "connect_four_v3", steps=480) for seed in (0, 0, 1))
    assert first["env_steps"] >= 480 and first["episodes"] > 0
    assert first["fingerprint"] == again["fingerprint"] != other["fingerprint"]
