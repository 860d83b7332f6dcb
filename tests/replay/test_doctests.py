"""The runnable examples in the replay docstrings must stay true."""
import doctest
import importlib
import pkgutil

import pytest

import marl_note.replay

MODULES = sorted(m.name for m in pkgutil.iter_modules(marl_note.replay.__path__, "marl_note.replay."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
