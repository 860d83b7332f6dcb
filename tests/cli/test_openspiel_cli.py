"""OpenSpiel games on the command line: train and evaluate print the exact exploitability."""
import json
import os
import re

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")
from open_spiel.python import policy as os_policy  # noqa: E402
from open_spiel.python.algorithms import exploitability as os_exploitability  # noqa: E402

from marl_note.agents.checkpoints import restore  # noqa: E402
from marl_note.cli import main  # noqa: E402
from marl_note.cli.envs import known_envs  # noqa: E402

NUMBER = r"([0-9]+\.[0-9]+)"


def _openspiel_value(agents, game):
    """OpenSpiel's exploitability of the agents' greedy/softmax rows, the table filled here from pyspiel states."""
    policy = os_policy.TabularPolicy(game)
    for row, state in enumerate(policy.states):
        p = state.current_player()
        obs = np.asarray(state.observation_tensor(p), np.float64)[None]
        mask = np.zeros((1, game.num_distinct_actions()), bool)
        mask[0, state.legal_actions()] = True
        policy.action_probability_array[row] = agents[p].policy_probs(obs, mask)[0]
    return os_exploitability.exploitability(game, policy)


@pytest.mark.parametrize("observation", ["observation", "information_state"])
def test_train_then_evaluate_prints_exploitability(tmp_path, capsys, observation):
    out = str(tmp_path / "run")
    status = main(["train", "--env", "openspiel/kuhn_poker", "--algo", "dqn", "--backend", "numpy", "--self-play",
                   "--env-steps", "300", "--num-envs", "1", "--test-episodes", "2", "--eval-episodes", "0",
                   "--quiet", "--out", out, "--agent-arg", "hidden_sizes=[8]", "--agent-arg", "learning_starts=16",
                   "--env-arg", f"observation={observation}"])
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    trained = float(re.search(r"exploitability of the last policies: " + NUMBER, captured.out).group(1))
    record = json.loads((tmp_path / "run" / "marl_note_run.json").read_text())
    assert record["env"] == "openspiel/kuhn_poker" and record["exploitability"] == pytest.approx(trained, abs=1e-4)

    assert main(["evaluate", "--checkpoint", out, "--which", "last", "--episodes", "4"]) == 0
    printed = capsys.readouterr().out
    value = float(re.search(r"exploitability: " + NUMBER, printed).group(1))
    assert "NashConv" in printed and "kuhn_poker" in printed
    assert value == pytest.approx(trained, abs=1e-4)
    if observation == "observation":  # the same number from OpenSpiel on a table filled from pyspiel's own states
        (name,) = os.listdir(os.path.join(out, "last"))
        agent = restore(os.path.join(out, "last", name))
        assert value == pytest.approx(_openspiel_value([agent, agent], pyspiel.load_game("kuhn_poker")), abs=1e-4)


@pytest.mark.parametrize("args, words", [
    (["--env-arg", "players=3"], ["kuhn_poker(players=3)", "two-player zero-sum"]),
    (["--env-arg", "observation=information_state", "--env", "openspiel/tic_tac_toe"],
     ["tic_tac_toe", "information-state"]),
])
def test_bad_games_are_refused_before_training(tmp_path, capsys, args, words):
    status = main(["train", "--env", "openspiel/kuhn_poker", "--algo", "dqn", "--env-steps", "10",
                   "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert status == 2
    for word in words:
        assert word in err
    assert not (tmp_path / "run").exists()


def test_two_player_zero_sum_games_are_listed():
    names = {n for n, family in known_envs().items() if family == "openspiel"}
    assert {"openspiel/kuhn_poker", "openspiel/leduc_poker", "openspiel/tic_tac_toe"} <= names
    assert not names & {"openspiel/matrix_rps", "openspiel/coop_box_pushing", "openspiel/2048"}
