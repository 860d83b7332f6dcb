"""The runnable examples in the agents' docstrings must stay true."""
import doctest
import importlib

import pytest

MODULES = ["marl_note.agents.base", "marl_note.agents.policies", "marl_note.agents.noise"]
TORCH_MODULES = ["marl_note.agents.torch.common", "marl_note.agents.torch.dqn", "marl_note.agents.torch.ppo"]


@pytest.mark.parametrize("name", MODULES + TORCH_MODULES)
def test_docstring_examples(name):
    if name in TORCH_MODULES:
        pytest.importorskip("torch")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
