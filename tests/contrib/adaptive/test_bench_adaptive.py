"""bench/bench_adaptive.py's smoke run, serial and with runs in worker processes (``--workers``)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("torch")


@pytest.mark.parametrize("workers, tasks", [(1, ("cartpole-ppo",)), (2, ("cartpole-ppo", "acrobot-dqn"))])
def test_smoke_run_reports_every_configuration(tmp_path, workers, tasks, monkeypatch, capsys):
    """The serial run does one task (the same code path for each), the run in worker processes two. The serial
    run calls the bench's ``main`` in this process (a subprocess only added the interpreter's and torch's
    start-up); the one with workers runs the script, as a user does."""
    args = ["--quick", "--only", ",".join(tasks), "--objectives", "time,steps", "--workers", str(workers),
            "--out", str(tmp_path)]
    if workers == 1:
        sys.path.insert(0, str(ROOT / "bench"))
        try:
            import bench_adaptive
        finally:
            sys.path.remove(str(ROOT / "bench"))
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "argv", ["bench_adaptive.py", *args])
        bench_adaptive.main()
        stdout = capsys.readouterr().out
    else:
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_adaptive.py"), *args],
                              capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        stdout = proc.stdout
    for task in tasks:
        lines = [line for line in stdout.splitlines() if line.startswith(f"  {task} seed 0: {{")]
        # the two quick fixed batches and both objectives, in that order, whichever process ran them
        assert [line.split("'batch': ")[1].split(",")[0] for line in lines] == [
            "32", "64", "'adaptive-time'", "'adaptive-steps'"], lines
        assert (tmp_path / f"adaptive_{task}-time_seed0.png").exists()
    progress = [line for line in stdout.splitlines() if line.startswith("  [")]
    assert len(progress) == (4 * len(tasks) if workers > 1 else 0)  # each finished run is reported as it ends


def test_bad_worker_count_and_seed_ranges():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_adaptive
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert bench_adaptive.seed_list("0-3,9") == [0, 1, 2, 3, 9]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_adaptive.py"), "--workers", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "--workers must be at least 1" in proc.stderr
