"""The command line trains VDN and QMIX (joint learners over every seat) on a cooperative MPE env for a tiny
budget, and evaluates the saved learner in the other backend."""
import importlib.util
import json

import pytest

from marl_note.agents.checkpoints import restore
from marl_note.cli import main

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("mpe2") is None, reason="simple_spread_v3 needs mpe2"),
              pytest.mark.skipif(importlib.util.find_spec("torch") is None or
                                 importlib.util.find_spec("tensorflow") is None, reason="needs torch and tensorflow")]


@pytest.mark.parametrize("algo", ["vdn", "qmix"])
def test_a_tiny_budget_run_trains_saves_and_evaluates_in_the_other_backend(tmp_path, capsys, algo):
    out = tmp_path / "run"
    assert main(["train", "--env", "simple_spread_v3", "--algo", algo, "--env-steps", "200", "--num-envs", "2",
                 "--env-arg", "max_cycles=10", "--agent-arg", "learning_starts=40", "--agent-arg", "hidden_sizes=[16]",
                 "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    record = json.loads((out / "marl_note_run.json").read_text())
    assert record["mode"] == "joint" and record["seats"] == dict.fromkeys(("agent_0", "agent_1", "agent_2"), algo)
    assert record["gradient_steps"] > 0
    learner = restore(out / "last" / algo)
    assert type(learner).__name__ == algo.upper() and learner.mixer == algo and learner.updates > 0
    # the learner reads the env's global state (MPE's state(): 3 agents x 18), as from_trainer builds it
    assert learner.cfg.state_shape == (54,) and learner.state_dim == 54
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--episodes", "2", "--backend", "tf"]) == 0, \
        capsys.readouterr().err
    assert "agent_2:" in capsys.readouterr().out
