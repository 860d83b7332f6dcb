"""The TF agents import no torch, and their docstring examples stay true."""
import doctest
import importlib
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")

MODULES = ["marl_note.agents.tf.common", "marl_note.agents.tf.dqn", "marl_note.agents.tf.ppo"]


def test_tf_agents_import_no_torch():
    code = ("import sys; from marl_note.agents.tf import DQN, PPO; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
