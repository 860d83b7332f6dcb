"""Smoke runs of the numpy backend's races: bench/bench_sb3_dqn.py (against SB3) and bench/bench_numpy_selfplay.py."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_bench_sb3_dqn_smoke_runs_both_libraries_to_the_same_counts(tmp_path):
    pytest.importorskip("stable_baselines3")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_sb3_dqn.py"), "--smoke", "--seeds", "0"],
                          capture_output=True, text=True, timeout=300, env={**ENV, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.glob("SB3-*"))  # SB3's logger, given to the model, leaves no folder behind
    rows = re.findall(r"seed 0 (sb3|marl_note numpy) +target NOT reached at (\d+) env steps \((\d+) gradient steps",
                      proc.stdout)
    # the mapped schedule: the first 128 gradient steps after the rollout that ends at env step 1024, in both
    assert sorted(rows) == [("marl_note numpy", "1024", "128"), ("sb3", "1024", "128")], proc.stdout
    assert "marl_note numpy / sb3: wall" in proc.stdout


def test_bench_numpy_selfplay_smoke_runs_and_names_each_backend(monkeypatch, capsys):
    """Through its ``main`` in this process (a subprocess only added the interpreter's and torch's start-up;
    bench_sb3_dqn.py stays one: it blocks TensorFlow's import for the rest of its process)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_numpy_selfplay
    finally:
        sys.path.remove(str(ROOT / "bench"))
    monkeypatch.setattr(sys, "argv", ["bench_numpy_selfplay.py", "--smoke"])
    bench_numpy_selfplay.main()
    stdout = capsys.readouterr().out
    assert re.search(r"seed 0 numpy +wall .* 400 env steps", stdout), stdout
    assert re.search(r"seed 0 torch +wall .* 400 env steps", stdout), stdout
    assert stdout.count("vs perfect: player_1 W") == 2 and "numpy / torch: wall" in stdout
    assert re.search(r"numpy / torch per seed: wall \d+\.\d\dx; wall per env step \d+\.\d\dx; "
                     r"update time per gradient step (\d+\.\d\dx|n/a)\n", stdout), stdout
