"""Smoke run of bench/bench_numpy_step.py: the numpy/torch step ratios and the tree-against-tree mode (this tree
against itself: the same weights after the same calls, and the step cut into its phases)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_numpy_step_quick_run_prints_ratios_and_compares_trees():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_numpy_step.py"), "--quick", "--only",
                           "step,against", "--against", str(ROOT)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out.count("numpy/torch") == 2, out  # the DQN step, default and dueling
    assert "the same weights and optimiser state after 80 calls each: True" in out, out
    phases = [line.split()[:-2] for line in out.splitlines() if line.startswith("    ")]
    assert ["clipping", "+", "Adam", "(step)"] in phases and ["loss", "+", "backward"] in phases, out
