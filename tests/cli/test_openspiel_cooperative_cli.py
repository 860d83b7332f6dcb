"""Fully cooperative OpenSpiel games (Hanabi) on the command line: routed to cooperative_parallel_env, so
that VDN / QMIX / DQN train on them; evaluate prints the team score, never exploitability."""
import json
import re

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")
from marl_note.cli import main  # noqa: E402
from marl_note.cli.envs import OPENSPIEL_COOPERATIVE, known_envs, resolve_env  # noqa: E402
from marl_note.envs.openspiel import CooperativeParallelEnv  # noqa: E402

SMALL_HANABI = ["players=2", "colors=2", "ranks=3", "hand_size=2", "max_information_tokens=3", "max_life_tokens=1"]


def _env_args(values):
    return [arg for value in values for arg in ("--env-arg", value)]


def test_hanabi_trains_with_vdn_and_evaluates_to_a_team_score(tmp_path, capsys):
    out = str(tmp_path / "run")
    status = main(["train", "--env", "openspiel/hanabi", *_env_args(SMALL_HANABI), "--algo", "vdn",
                   "--backend", "torch", "--episodes", "24", "--test-freq", "24", "--num-envs", "2",
                   "--batch-size", "8", "--update-freq", "16", "--test-episodes", "2", "--quiet", "--out", out,
                   "--agent-arg", "hidden_sizes=[8]", "--agent-arg", "learning_starts=16"])
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    assert "one joint learner of every seat" in captured.out
    assert int(re.search(r"([0-9]+) gradient steps", captured.out).group(1)) > 0  # it learned, not just acted
    assert "exploitability" not in captured.out
    record = json.loads((tmp_path / "run" / "marl_note_run.json").read_text())
    assert record["env"] == "openspiel/hanabi" and record["algo"] == "vdn" and record["mode"] == "joint"
    assert record["env_kwargs"]["max_life_tokens"] == 1

    assert main(["evaluate", "--checkpoint", out, "--which", "last", "--episodes", "4"]) == 0
    printed = capsys.readouterr().out
    team = float(re.search(r"team score: (-?[0-9]+\.[0-9]+)", printed).group(1))
    seats = [float(v) for v in re.findall(r"player_[01]: (-?[0-9]+\.[0-9]+)", printed)]
    assert len(seats) == 2 and team == pytest.approx(seats[0], abs=1e-3) == pytest.approx(seats[1], abs=1e-3)
    assert 0.0 <= team <= 6.0  # a game score of the small game (2 colours x 3 ranks)
    assert "exploitability" not in printed


def test_cooperative_games_route_to_the_parallel_env_and_zero_sum_ones_do_not_change():
    hanabi = resolve_env("openspiel/tiny_hanabi")
    assert hanabi.family == OPENSPIEL_COOPERATIVE and isinstance(hanabi.make(), CooperativeParallelEnv)
    kuhn = resolve_env("openspiel/kuhn_poker")
    env = kuhn.make()
    assert kuhn.family == "openspiel" and hasattr(env, "agent_iter")  # turn-based (AEC), as before
    families = known_envs()
    assert families["openspiel/hanabi"] == families["openspiel/tiny_hanabi"] == OPENSPIEL_COOPERATIVE
    assert families["openspiel/kuhn_poker"] == "openspiel"


@pytest.mark.parametrize("args, words", [
    # a zero-sum game is turn-based: a joint learner does not fit it
    (["--env", "openspiel/kuhn_poker", "--algo", "vdn"],
     ["--algo vdn does not fit openspiel/kuhn_poker", "turn-based"]),
    # neither zero-sum nor cooperative: the refusal names the cooperative games that do play
    (["--env", "openspiel/matrix_rps", "--algo", "dqn"], ["matrix_rps", "two-player zero-sum", "openspiel/hanabi"]),
    # a cooperative game lacking the tensor asked for
    (["--env", "openspiel/hanabi", "--algo", "vdn", "--env-arg", "observation=information_state"],
     ["hanabi", "information-state"]),
    (["--env", "openspiel/hanabi", "--algo", "vdn", "--env-arg", "render_mode=human"], ["render_mode", "hanabi"]),
    (["--env", "openspiel/hanabi", "--algo", "vdn", "--env-arg", "colours=2"], ["hanabi", "colours"]),
])
def test_bad_cooperative_input_is_refused_before_training(tmp_path, capsys, args, words):
    status = main(["train", *args, "--env-steps", "10", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2, err
    for word in words:
        assert word in err, err
    assert not (tmp_path / "run").exists()
