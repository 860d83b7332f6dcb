"""Every runnable example in marl_note's docstrings must stay true, and every public class has one."""
import doctest
import importlib
import inspect
import pkgutil
import tempfile

import pytest

import marl_note

MODULES = sorted(m.name for m in pkgutil.walk_packages(marl_note.__path__, "marl_note."))


def _needs(name: str) -> str | None:
    parts = name.split(".")
    if "torch" in parts:
        return "torch"
    if "tf" in parts:
        return "tensorflow"
    return None


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    if _needs(name):
        pytest.importorskip(_needs(name))
    module = importlib.import_module(name)
    # the examples' tempfile.mkdtemp() folders go under this test's own folder, which pytest removes
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert tempfile.gettempdir() == str(tmp_path)


@pytest.mark.parametrize("package", ["marl_note.envs", "marl_note.replay", "marl_note.agents",
                                     "marl_note.trainers", "marl_note.agents.torch", "marl_note.agents.tf",
                                     "marl_note.agents.numpy",
                                     "marl_note.contrib.pool", "marl_note.contrib.finders",
                                     "marl_note.contrib.adaptive",
                                     "marl_note.contrib.alphazero", "marl_note.contrib.board_games",
                                     "marl_note.compat.torch", "marl_note.compat.tf"])
def test_public_classes_have_a_runnable_example(package):
    if _needs(package):
        pytest.importorskip(_needs(package))
    mod = importlib.import_module(package)
    missing = [name for name in getattr(mod, "__all__", [])
               if inspect.isclass(getattr(mod, name)) and not issubclass(getattr(mod, name), BaseException)
               and getattr(mod, name).__module__.startswith("marl_note")
               and ">>>" not in (inspect.getdoc(getattr(mod, name)) or "")
               and ">>>" not in (inspect.getdoc(inspect.getmodule(getattr(mod, name))) or "")]
    assert not missing, f"public classes without a docstring example: {missing}"
