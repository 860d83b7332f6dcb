"""bench/bench_learner_trace.py: a recipe's learner metrics, averaged over stretches of env steps."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("torch")
pytest.importorskip("mpe2")


def bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_learner_trace
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return bench_learner_trace


def test_one_line_per_stretch_with_the_learners_metrics_and_the_settings_given(capsys):
    status = bench().main(["--recipe", "simple_spread_v3-vdn", "--env-steps", "1200", "--every", "400",
                           "--set", "learning_starts=100", "--set", "eps_anneal_steps=10",
                           "--trainer-set", "batch_size=32"])
    assert status == 0
    header, *lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert header["settings"]["trainer"]["batch_size"] == 32 and header["settings"]["agent"]["learning_starts"] == 100
    assert header["settings"]["trainer"]["test_freq"] == 10**9  # periodic tests off
    assert [line["env_steps"] for line in lines] == [400, 800, 1200]
    for line in lines:
        assert {"loss", "loss_max", "q_tot_mean", "td_abs", "cpu_s"} <= set(line)
        assert line["loss_max"] >= line["loss"] >= 0
        assert line["eps"] == pytest.approx(0.05)  # --set reached the agent: annealed after 10 env steps


def test_a_setting_that_does_not_parse_is_refused():
    with pytest.raises(SystemExit) as exc:
        bench().main(["--recipe", "simple_spread_v3-vdn", "--set", "lr"])
    assert exc.value.code == 2
