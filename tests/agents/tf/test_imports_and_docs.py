"""The TF agents import no torch (their docstring examples run in tests/test_docstrings.py)."""
import ast
import importlib
import pathlib

import pytest

pytest.importorskip("tensorflow")

def test_tf_agents_import_no_torch():
    """Statically (the parity tests import torch into this process): no module of the TF package
    imports torch or the torch agents; what they import from marl_note is checked torch-free by
    tests/test_imports.py."""
    package = pathlib.Path(importlib.import_module("marl_note.agents.tf").__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.split(".")[0] == "torch" or n.startswith("marl_note.agents.torch")]
            assert not bad, f"{path.name} imports {bad}"
