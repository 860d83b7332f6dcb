"""Release 0.1.0's import paths and names keep working for one release, each with a DeprecationWarning
naming where the thing lives now, and give the very same objects as the new paths."""
import importlib
import sys
import warnings

import pytest

from marl_note import _moved

OLD_MODULES = sorted(_moved.MODULES)


@pytest.mark.parametrize("old", OLD_MODULES)
def test_an_old_module_path_warns_and_is_the_new_module(old):
    new = _moved.MODULES[old]
    needs = "tensorflow" if ".tf." in f"{new}." else "torch" if ".torch." in f"{new}." else None
    if needs:
        pytest.importorskip(needs)
    module = importlib.import_module(new)
    sys.modules.pop(old, None)  # the alias entry only (an earlier test may have imported the old path)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        again = importlib.import_module(old)
    assert again is module


def test_a_submodule_of_a_moved_package_is_the_new_submodule_not_a_copy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("marl_note.contrib.pool.options")
    new = importlib.import_module("marl_note.contrib.pool.options")
    assert old is new and old.PoolOptions is new.PoolOptions


@pytest.mark.parametrize("package,name", sorted((p, n) for p, names in _moved.NAMES.items() for n in names))
def test_an_old_name_warns_and_is_the_new_object(package, name):
    target = _moved.NAMES[package][name]
    if ".tf" in target or ".torch" in target or package.endswith((".torch", ".tf")):
        pytest.importorskip("tensorflow" if ".tf" in target or package.endswith(".tf") else "torch")
    with pytest.warns(DeprecationWarning, match=target.replace(".", r"\.")):
        old = getattr(importlib.import_module(package), name)
    assert old is getattr(importlib.import_module(target), name)


def test_an_unknown_name_is_still_an_attribute_error():
    import marl_note.agents

    with pytest.raises(AttributeError, match="no attribute 'Nonsense'"):
        marl_note.agents.Nonsense  # noqa: B018
