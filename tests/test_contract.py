"""The agent contract is the whole contract: outside ``marl_note/agents/`` nothing probes an agent's
attributes with ``getattr``/``hasattr`` or reads its ``__dict__``/``__mro__``; the trainers, the pool,
the finders, the distributed contexts and the command line ask the Protocols of
``marl_note.agents.base`` with ``isinstance`` instead.

Read from the source with ``ast``: every ``getattr``/``hasattr`` call in ``marl_note/trainers``,
``marl_note/contrib`` and ``marl_note/cli`` must have a receiver from a short list of objects that
are not agents (gymnasium spaces, argparse namespaces, callbacks, envs, exceptions, modules, ...).
Each check also runs on a deliberately bad source, so that it can fail.
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("marl_note/trainers", "marl_note/contrib", "marl_note/cli")

# receivers (the variable or attribute name the probe is called on) that are never agents
NOT_AGENTS = {
    "space",                              # gymnasium spaces (step checks, env memory)
    "args",                               # argparse namespaces
    "cb",                                 # callbacks and their hooks
    "env", "venv", "_venv",               # envs and vector envs
    "exc", "err", "cause",                # exceptions
    "module", "supersuit", "policies",    # modules (registry readers, wrappers, exploration policies)
    "loader",                             # an import loader (the command line's quiet import of TensorFlow)
    "forkserver", "executor",             # multiprocessing internals
    "factory",                            # a user's factory function
    "simulator",                          # a search player's game simulator
    "replay",                             # a replay buffer (its optional methods)
    "source",                             # a plot's data source (a trainer or a run state)
    "value",                              # a JSON-bound value
    "self",                               # an object reading its own attributes
}
# files still probing agents, each with the change that removes its probes
EXEMPT: dict[str, str] = {}
REFLECTION = ("__dict__", "__mro__")


def receiver(node: ast.expr) -> str | None:
    """The name a probe is called on: ``x`` -> "x", ``a.b`` -> "b", ``getattr(x, ...)`` -> x's,
    ``importlib.import_module(...)`` -> "module"; None for anything else (``type(agent)``, ...)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name == "getattr" and node.args:
            return receiver(node.args[0])
        if name == "import_module":
            return "module"
    return None


def probes(source: str, path: str) -> list[str]:
    """``path:line: what`` for every getattr/hasattr on a receiver not in NOT_AGENTS, every ``vars()``
    and every ``__dict__``/``__mro__`` in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "hasattr") and node.args:
                name = receiver(node.args[0])
                if name not in NOT_AGENTS:
                    out.append((node.lineno, node.col_offset, f"{node.func.id}({ast.unparse(node.args[0])}, ...)"))
            elif node.func.id == "vars":
                out.append((node.lineno, node.col_offset, "vars(...)"))
        elif isinstance(node, ast.Attribute) and node.attr in REFLECTION:
            out.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{path}:{line}: {what}" for line, _, what in sorted(out)]


def scanned_files() -> list[str]:
    out = []
    for top in SCANNED:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            out += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(out)


def test_no_agent_probes_outside_agents():
    found = []
    for path in scanned_files():
        if any(path.replace(os.sep, "/").startswith(prefix) for prefix in EXEMPT):
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            found += probes(f.read(), path)
    assert not found, ("agent attributes probed outside marl_note/agents (declare a Protocol in "
                       "marl_note/agents/base.py and check it with isinstance):\n" + "\n".join(found))


def test_the_scan_covers_the_folders_and_the_exemption_is_live():
    files = scanned_files()
    for top in SCANNED:
        assert any(f.replace(os.sep, "/").startswith(top + "/") for f in files), top
    # an exemption that no longer exempts anything must go
    for prefix, why in EXEMPT.items():
        exempt = [f for f in files if f.replace(os.sep, "/").startswith(prefix)]
        assert any(probes(open(os.path.join(ROOT, f), encoding="utf-8").read(), f) for f in exempt), \
            f"{prefix} ({why}) no longer probes agents: remove its exemption"


def test_the_scan_fails_on_probes():
    bad = '''
def f(agent, trainer, space, args):
    a = getattr(agent, "replay", None)
    b = hasattr(trainer.agent, "rollout")
    c = callable(getattr(getattr(agent, "nets", None), "numpy_weights", None))
    d = getattr(type(agent), "saving_spaces", None)
    agent.__dict__.update({})
    e = [base for base in type(agent).__mro__]
    g = vars(agent)
    ok = getattr(space, "low", None), getattr(args, "seed", None), getattr(getattr(space, "x", None), "y", 0)
'''
    found = probes(bad, "bad.py")
    assert [line.split(": ", 1)[1] for line in found] == [
        "getattr(agent, ...)", "hasattr(trainer.agent, ...)", "getattr(getattr(agent, 'nets', None), ...)",
        "getattr(agent, ...)", "getattr(type(agent), ...)", "agent.__dict__", "type(agent).__mro__", "vars(...)"]
    assert found[0].startswith("bad.py:3: ")
