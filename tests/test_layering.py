"""The dependency rule (docs/ARCHITECTURE.md), read from the source with ``ast``: every import, deferred ones too.

- no import cycles among marl_note's modules;
- the core (``types``, ``envs``, ``replay``, ``agents``, ``trainers`` and the bottom-layer modules) never
  imports ``contrib``, ``compat`` or ``cli``, not even inside a function; ``contrib`` never imports
  ``compat`` or ``cli``; ``compat`` never imports ``cli``;
- only modules under a ``torch/`` or ``tf/`` folder import a framework (``ray`` only in the pool's Ray
  transport);
- the one module that loads optional parts by name is ``marl_note._moved`` (release 0.1.0's paths).

Each rule is also checked against a deliberately bad tree, so the checks themselves can fail.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONAL = ("contrib", "compat", "cli")
FRAMEWORKS = ("torch", "tensorflow", "keras", "ray")


def module_files(root: str) -> dict[str, str]:
    """``{dotted module: path}`` of every module under ``root`` (a package named by its folder)."""
    out = {}
    base = os.path.dirname(root)
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def imports(path: str, module: str, known: set[str]) -> set[str]:
    """Every module of ``known`` (or outside package) that ``path`` imports anywhere in its code."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for name in names:
            while name and name not in known and name.count("."):
                if name.split(".")[0] != "marl_note":
                    break
                name = name.rpartition(".")[0]
            found.add(name)
    found.discard(module)
    return found


def graph(root: str) -> dict[str, set[str]]:
    files = module_files(root)
    known = set(files)
    return {m: imports(p, m, known) for m, p in files.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start] & g.keys())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(g[child] & g.keys()))))
                elif child in on:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "root"  # the package itself and python -m marl_note stand above every layer
    return parts[1] if parts[1] in OPTIONAL else "core"


ALLOWED = {"core": set(), "contrib": {"core", "contrib"}, "compat": {"core", "contrib", "compat"},
           "cli": {"core", "contrib", "compat", "cli"}}


def layering_problems(g: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, deps in sorted(g.items()):
        mine = layer(module)
        if mine == "root":
            continue
        for dep in sorted(d for d in deps if d.startswith("marl_note.")):
            theirs = layer(dep)
            if theirs not in ALLOWED[mine] | {"core"} and theirs != "root":
                problems.append(f"{module} ({mine}) imports {dep} ({theirs})")
    return problems


def framework_problems(g: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, deps in sorted(g.items()):
        parts = module.split(".")
        for dep in sorted(d for d in deps if d.split(".")[0] in FRAMEWORKS):
            top = dep.split(".")[0]
            if top == "ray":
                ok = module == "marl_note.contrib.pool.ray_backend"
            else:
                ok = any(p in ("torch", "tf") for p in parts[:-1]) or parts[-1] in ("torch", "tf")
            if not ok:
                problems.append(f"{module} imports {top}")
    return problems


def by_name_problems(root: str) -> list[str]:
    """Core modules that name an optional part in an import_module call (only marl_note._moved may)."""
    problems = []
    for module, path in module_files(root).items():
        if layer(module) != "core" or module == "marl_note._moved":
            continue
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "import_module", "__import__"):
                for arg in node.args:
                    text = ast.unparse(arg)
                    if any(f"marl_note.{o}" in text for o in OPTIONAL):
                        problems.append(f"{module} loads {text} by name")
    return problems


PACKAGE = os.path.join(ROOT, "marl_note")


def test_no_import_cycles():
    assert cycles(graph(PACKAGE)) == []


def test_the_core_never_imports_the_optional_parts():
    assert layering_problems(graph(PACKAGE)) == []
    assert by_name_problems(PACKAGE) == []


def test_only_backend_folders_import_a_framework():
    assert framework_problems(graph(PACKAGE)) == []


def test_the_checks_catch_a_bad_tree(tmp_path):
    files = {
        "marl_note/__init__.py": "",
        "marl_note/types.py": "import marl_note.trainers.loop\n",
        "marl_note/trainers/__init__.py": "",
        "marl_note/trainers/loop.py": "def f():\n    from marl_note.contrib.pool import x\nimport torch\n"
                                      "from marl_note import types\n",
        "marl_note/contrib/__init__.py": "",
        "marl_note/contrib/pool.py": "from marl_note.compat import old\nimport ray\n",
        "marl_note/contrib/torch/__init__.py": "import torch\n",
        "marl_note/compat/__init__.py": "",
        "marl_note/compat/old.py": "",
        "marl_note/agents/__init__.py": "import importlib\nimportlib.import_module('marl_note.contrib.pool')\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    g = graph(str(tmp_path / "marl_note"))
    assert cycles(g) == [["marl_note.trainers.loop", "marl_note.types"]]
    assert layering_problems(g) == [
        "marl_note.contrib.pool (contrib) imports marl_note.compat.old (compat)",
        "marl_note.trainers.loop (core) imports marl_note.contrib.pool (contrib)"]
    assert framework_problems(g) == ["marl_note.contrib.pool imports ray", "marl_note.trainers.loop imports torch"]
    assert by_name_problems(str(tmp_path / "marl_note")) == [
        "marl_note.agents loads 'marl_note.contrib.pool' by name"]


def _loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "; import sys; print('\\n'.join(m for m in sys.modules "
                          "if m.startswith('marl_note')))"], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.split()


def test_importing_a_torch_agent_loads_few_modules():
    pytest.importorskip("torch")
    loaded = _loaded("from marl_note.agents.torch import DQN")
    assert len(loaded) <= 40, sorted(loaded)


def test_importing_the_trainers_loads_no_optional_part():
    loaded = _loaded("import marl_note.trainers")
    assert not [m for m in loaded if layer(m) in OPTIONAL], loaded
