"""The psro command: a tiny run on kuhn poker, evaluate of its directory, bad input refused first."""
import json

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")

from marl_note.cli import main  # noqa: E402


def test_a_tiny_psro_run_saves_the_pool_and_evaluate_prints_its_exploitability(tmp_path, capsys):
    out = str(tmp_path / "kuhn")
    assert main(["psro", "--env", "openspiel/kuhn_poker", "--algo", "dqn", "--iterations", "2", "--episodes", "60",
                 "--num-envs", "2", "--update-freq", "16", "--batch-size", "16", "--agent-arg", "learning_starts=16",
                 "--agent-arg", "hidden_sizes=[16]", "--out", out, "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    assert "iteration 1: 2 members, exploitability " in printed and "iteration 2: 3 members" in printed
    record = json.loads((tmp_path / "kuhn" / "psro.json").read_text())
    assert [m["name"] for m in record["members"]] == ["random", "br_1", "br_2"]
    assert sum(record["meta_strategy"]) == pytest.approx(1.0)
    assert (tmp_path / "kuhn" / "members" / "br_2" / "manifest.json").is_file()
    last = record["history"][-1]["exploitability"]
    assert main(["evaluate", "--checkpoint", out]) == 0
    printed = capsys.readouterr().out
    assert "a PSRO pool of 3 members on kuhn_poker()" in printed
    assert f"exploitability of the mixture: {last:.4f}" in printed


@pytest.mark.parametrize("argv, words", [
    (["--env", "openspiel/kuhn_poker(players=3)"], "'kuhn_poker(players=3)' is not a two-player zero-sum game"),
    (["--env", "openspiel/goofspiel"], "'goofspiel()' is not a two-player zero-sum game with sequential moves"),
    (["--env", "tictactoe_v3", "--observation", "information_state"], "--observation information_state is for "
                                                                     "OpenSpiel games"),
    (["--env", "simple_spread_v3"], "PSRO needs a two-player game; simple_spread_v3 has 3 seats"),
])
def test_bad_input_is_refused_before_training(tmp_path, capsys, argv, words):
    out = tmp_path / "never"
    assert main(["psro", "--algo", "dqn", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("marl_note psro: error: ") and words in err
    assert not out.exists()
