"""Smoke run of bench/bench_budget.py: it runs the command line with a budget and reports the overshoot."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_budget_times_the_trainer_of_a_run_with_minutes():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_budget.py"), "--envs", "cartpole",
                           "--minutes", "0.04", "--idle-only"], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    row = re.search(r"idle\s+cartpole\s+budget\s+2\.4 s: train\s+([\d.]+) s \(overshoot ([+-][\d.]+)%\)", proc.stdout)
    assert row, proc.stdout
    assert float(row.group(1)) >= 2.4  # the run trained for its whole budget
    assert "idle: the largest overshoot" in proc.stdout


def test_bench_budget_refuses_an_unknown_env():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_budget.py"), "--envs", "nope"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0 and "--envs: unknown ['nope']" in proc.stderr
