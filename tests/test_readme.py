"""Every Python block of README.md and of the documentation's pages runs, in order, as a user pasting them into one
script would, and reaches the result its page states.

The runs are learning runs (several minutes in all), marked ``examples``: ``make examples`` runs them (and CI,
after ``make test``); ``make test`` runs the rest of this file, which checks that every page states its results.

The blocks are extracted from the Markdown files themselves, so the README and the guides cannot drift from the
code. Each file is one script: its blocks run in order in one fresh interpreter, in a subprocess in a scratch
folder, importing this checkout's marl_note. A block that uses a name it does not define says so on its page ("it
continues the block above"), so a reader pasting it alone knows what to paste first.

A block that trains states what it reaches. After it (before the next block) its page has a sentence of the form

    Checked by the tests at `episodes_per_train=1500` (about 5 s): `as player_1: win` at least 90%, `loss` at most 5.

("as written" instead of "at `...`" when the tests run the block's own budget). The tests run the block with
those arguments replaced (only ever lowering a budget that is long) and read each quoted label's number from
the block's printed output: the figure on the page is the figure checked, there is no second copy of it here.
"""
import builtins
import os
import re
import shlex
import subprocess
import symtable
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# every page of the site with Python blocks (docs/ARCHITECTURE.md and docs/RELIABILITY.md have none)
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
# calls that train or search: a block making one must state a checked result
TRAINS = re.compile(r"\.train\(|\.find\(|\.run\(iterations|train_recipe\(")
CHECK = re.compile(r"Checked by the tests (as written|at ((?:`[^`]+`(?:,\s*|\s+and\s+)?)+))\s*(?:\([^)]*\))?:"
                   r"\s*(.*?)\.(?:\s|$)", re.S)
ITEM = re.compile(r"`([^`]+)`\s+(at least|at most)\s+(-?\d[\d,]*(?:\.\d+)?)%?")


@dataclass
class Check:
    """One printed figure a page promises: ``label`` followed by a number, compared with ``bound``."""

    label: str
    op: str  # "at least" | "at most"
    bound: float

    def holds(self, value: float) -> bool:
        return value >= self.bound if self.op == "at least" else value <= self.bound


@dataclass
class Block:
    line: int
    code: str
    lang: str = "python"
    before: str = ""  # the page's text between the previous block and this one
    after: str = ""  # the page's text between this block and the next one
    budget: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    stated: bool = False  # a "Checked by the tests" sentence follows it


def python_blocks(text: str, name: str = "README.md") -> list[tuple[int, str]]:
    """``(line number, code)`` of every ```python fenced block."""
    return [(b.line, b.code) for b in page_blocks(text, name)]


def page_blocks(text: str, name: str = "README.md", lang: str = "python") -> list[Block]:
    """Every ```python (or ```bash) block of a page with the text around it and the result it states.

    A block's ``before`` and ``after`` text reach to the neighbouring ```python or ```bash block, whichever
    language it is (other fenced blocks, such as an output shown as ```text, are part of the text)."""
    blocks: list[Block] = []
    lines, start, prose = text.splitlines(), None, []
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        if start is None and stripped in ("```python", "```bash"):
            if blocks:
                blocks[-1].after = "\n".join(prose)
            start, body, before, prose, kind = n, [], "\n".join(prose), [], stripped[3:]
        elif start is not None and stripped == "```":
            blocks.append(Block(start, "\n".join(body), lang=kind, before=before))
            start = None
        elif start is not None:
            body.append(line)
        else:
            prose.append(line)
    assert start is None, f"{name}: the ```{kind} block at line {start} is never closed"
    if blocks:
        blocks[-1].after = "\n".join(prose)
    blocks = [block for block in blocks if block.lang == lang]
    for block in blocks:
        found = CHECK.search(block.after)
        if found is None:
            continue
        block.stated = True
        if found.group(1) != "as written":
            for pair in re.findall(r"`([^`]+)`", found.group(2)):
                key, sep, value = pair.partition(" " if lang == "bash" else "=")  # --option VALUE | NAME=VALUE
                assert sep, (f"{name}: the budget `{pair}` after the block at line {block.line} is not "
                             f"{'--option VALUE' if lang == 'bash' else 'NAME=VALUE'}")
                block.budget[key.strip()] = value.strip()
        for label, op, bound in ITEM.findall(found.group(3)):
            block.checks.append(Check(label, op, float(bound.replace(",", ""))))
        assert block.checks, (f"{name}: the 'Checked by the tests' sentence after the block at line {block.line} "
                              f"names no `label` at least|at most N")
    return blocks


def with_budget(block: Block, name: str) -> str:
    """The block's code with its stated test budget in place of the written one (every occurrence)."""
    code = block.code
    for key, value in block.budget.items():
        if block.lang == "bash":  # a command-line option: --episodes 2000
            pattern, new = rf"(?<!\S){re.escape(key)}[ =](\S+)", f"{key} {value}"
        else:  # a keyword argument: episodes=2000
            pattern, new = rf"\b{re.escape(key)}=([^,)\s]+)", f"{key}={value}"
        written = re.findall(pattern, code)
        assert written, f"{name}: the block at line {block.line} has no `{key}` for its stated budget to replace"
        for old in written:  # a test budget only ever lowers what the page's reader runs
            assert _number(value) <= _number(old), (f"{name}: the test budget {key}={value} after the block at "
                                                    f"line {block.line} is above the written {old}")
        code = re.sub(pattern, new, code)
    return code


def _number(text: str) -> float:
    try:
        return float(text.replace("_", ""))
    except ValueError:
        raise AssertionError(f"a budget must be a number, got {text!r}") from None


def check_output(block: Block, name: str, output: str) -> None:
    """Every figure the page states after the block, read from what the block printed."""
    for check in block.checks:
        found = re.findall(re.escape(check.label) + r"\s*(-?\d+(?:\.\d+)?)", output)
        assert found, (f"{name}: the block at line {block.line} printed no `{check.label}` followed by a number:"
                       f"\n{output[-2000:]}")
        value = float(found[-1])
        assert check.holds(value), (f"{name}: the block at line {block.line} printed `{check.label}` {value}, "
                                    f"the page states {check.op} {check.bound:g}:\n{output[-2000:]}")


def free_names(code: str) -> set[str]:
    """Names the code reads but neither defines, imports nor gets from builtins."""
    top = symtable.symtable(code, "<block>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for s in table.get_symbols():
            if s.is_referenced() and (table is top or s.is_global()):
                used.add(s.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return used - defined - set(dir(builtins)) - {"__name__", "__file__"}


def run_blocks(page: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run the page's blocks in order as one script in ``tmp_path`` (each with its stated test budget) and check
    the figures each states; returns the process and the block count."""
    name = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name
    blocks = page_blocks(page.read_text(), name)
    script = []
    for block in blocks:
        script.append(f"print('--- {name} block at line {block.line}', flush=True)")
        script.append(with_budget(block, name))
    path = tmp_path / "page_blocks.py"
    path.write_text("\n".join(script) + "\n")
    # this checkout's marl_note first, whichever copy the interpreter has installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    # markers found anywhere: a worker process's copy may land on the same line as the main process's
    last = re.findall(rf"--- {re.escape(name)} block at line \d+", proc.stdout)
    assert proc.returncode == 0, (f"{name} block failed ({last[-1] if last else 'before the first block'}):\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    # every block ran (worker processes that import the script print the markers of its top-level code again)
    assert set(last) == {f"--- {name} block at line {b.line}" for b in blocks}
    for i, block in enumerate(blocks):
        start = proc.stdout.index(f"--- {name} block at line {block.line}")
        end = (proc.stdout.find(f"--- {name} block at line {blocks[i + 1].line}", start) if i + 1 < len(blocks)
               else -1)
        check_output(block, name, proc.stdout[start:end if end >= 0 else len(proc.stdout)])
    return proc, len(blocks)


def run_commands(page: Path, block: Block, tmp_path: Path) -> str:
    """Run the ``python -m marl_note`` lines of a ```bash block in order (with its stated test budget) in
    ``tmp_path``; check the figures stated after it; returns what they printed."""
    name = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    output = []
    for line in with_budget(block, name).splitlines():
        command = shlex.split(line, comments=True)
        if command[:3] != ["python", "-m", "marl_note"]:
            continue
        proc = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{name}: `{line.strip()}` failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        output.append(proc.stdout + proc.stderr)
    assert output, f"{name}: the bash block at line {block.line} has no `python -m marl_note` line"
    text = "\n".join(output)
    check_output(block, name, text)
    return text


def test_readme_has_the_blocks_it_documents():
    blocks = page_blocks(README.read_text())
    assert len(blocks) >= 1
    assert all(b.checks for b in blocks if TRAINS.search(b.code))


def table_after(text: str, header: str) -> list[str]:
    """The Markdown table whose first line starts with ``header``: its lines, in order."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_readme_cooperative_table_is_the_benchmarks_pages():
    """The README shows the benchmarks page's cooperative table, the same rows (only the links differ)."""
    header = "| env (budget in env steps; figure) | MAPPO |"
    readme = [line.replace("(docs/benchmarks.md#", "(#") for line in table_after(README.read_text(), header)]
    assert len(readme) > 3 and readme == table_after((DOCS / "benchmarks.md").read_text(), header)


def test_every_guide_shows_running_code():
    guides = sorted((DOCS / "guides").glob("*.md"))
    assert len(guides) >= 8
    without = [g.name for g in guides if not python_blocks(g.read_text(), g.name)]
    assert not without, f"guides without a ```python block: {without}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_block_that_trains_states_the_result_the_tests_check(page):
    name = page.relative_to(ROOT).as_posix()
    silent = [b.line for b in page_blocks(page.read_text(), name) if TRAINS.search(b.code) and not b.checks]
    assert not silent, (f"{name}: the blocks at lines {silent} train but state no 'Checked by the tests ...' "
                        f"result after them")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_block_that_continues_another_says_so(page):
    name = page.relative_to(ROOT).as_posix()
    unsaid = {}
    for block in page_blocks(page.read_text(), name):
        names = free_names(block.code)
        if names and "continu" not in block.before.lower():
            unsaid[block.line] = sorted(names)
    assert not unsaid, f"{name}: blocks use names defined elsewhere without saying which block they continue: {unsaid}"


def test_the_stated_result_is_parsed_from_the_page():
    page = ("```python\nf(episodes=6000, seed=0)\n```\n\nIt wins.\nChecked by the tests at `episodes=1500`\n"
            "(about 5 s): `as player_1: win` at least 90%, `loss` at most 0.5.\n\n```python\nx = 1\n```\n")
    first, second = page_blocks(page, "page.md")
    assert first.budget == {"episodes": "1500"}
    assert [(c.label, c.op, c.bound) for c in first.checks] == [("as player_1: win", "at least", 90.0),
                                                                   ("loss", "at most", 0.5)]
    assert with_budget(first, "page.md") == "f(episodes=1500, seed=0)"
    assert not second.stated and second.before.strip().startswith("It wins.")


def test_a_budget_the_block_does_not_have_is_refused():
    (block,) = page_blocks("```python\nf(seed=0)\n```\nChecked by the tests at `episodes=5`: `x` at least 1.\n")
    with pytest.raises(AssertionError, match=r"no `episodes` for its stated budget"):
        with_budget(block, "page.md")


def test_a_budget_above_the_written_one_is_refused():
    page = "```python\nf(episodes=1_000)\n```\nChecked by the tests at `episodes=5000`: `x` at least 1.\n"
    (block,) = page_blocks(page)
    with pytest.raises(AssertionError, match=r"test budget episodes=5000 after the block at line 1 is above the "
                                             r"written 1_000"):
        with_budget(block, "page.md")


def test_free_names_are_the_ones_a_pasted_block_lacks():
    code = ("import numpy as np\nfrom x import y\nclass A:\n    def f(self, z):\n        return z + w\n"
            "b = [i for i in range(3)]\nprint(learner, np, y, A, b, len)\n")
    assert free_names(code) == {"w", "learner"}


def test_an_unclosed_block_is_reported_with_its_page():
    with pytest.raises(AssertionError, match=r"guide\.md: the ```python block at line 2 is never closed"):
        python_blocks("text\n```python\nprint(1)\n", "guide.md")


def test_a_page_whose_block_fails_is_reported_with_the_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    with pytest.raises(AssertionError, match=r"page\.md block failed \(--- page\.md block at line 7\)"):
        run_blocks(page, tmp_path)


def test_a_figure_below_the_stated_one_fails_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nwins = 0.4\nprint(f'win rate {wins:.2f}')\n```\n\n"
                    "Checked by the tests as written: `win rate` at least 0.5.\n")
    with pytest.raises(AssertionError, match=r"printed `win rate` 0\.4, the page states at least 0\.5"):
        run_blocks(page, tmp_path)
    page.write_text(page.read_text().replace("0.4", "0.6"))
    run_blocks(page, tmp_path)


@pytest.mark.examples
def test_readme_python_blocks_run_in_order(tmp_path):
    run_blocks(README, tmp_path)


@pytest.mark.examples
@pytest.mark.parametrize("page", [p for p in PAGES[1:] if python_blocks(p.read_text(), p.name)],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_docs_python_blocks_run_in_order(page, tmp_path):
    run_blocks(page, tmp_path)


def checked_commands() -> list[tuple[Path, Block]]:
    return [(page, block) for page in PAGES for block in page_blocks(page.read_text(), page.name, "bash")
            if block.stated]


def test_a_command_line_budget_is_parsed_and_replaced():
    page = ("```bash\npython -m marl_note train --env x --episodes 15000  # the recipe\n```\n\n"
            "Checked by the tests at `--episodes 200`: `as player_0: win` at least 80%.\n")
    (block,) = page_blocks(page, "page.md", "bash")
    assert block.budget == {"--episodes": "200"} and block.checks[0].label == "as player_0: win"
    assert with_budget(block, "page.md") == "python -m marl_note train --env x --episodes 200  # the recipe"


@pytest.mark.examples
@pytest.mark.parametrize("page,block", checked_commands(),
                         ids=lambda x: x.relative_to(ROOT).as_posix() if isinstance(x, Path) else f"line{x.line}")
def test_command_line_examples_reach_their_results(page, block, tmp_path):
    run_commands(page, block, tmp_path)
