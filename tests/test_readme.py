"""Every Python block of README.md and of the documentation's pages runs, in order, as a user pasting them into one
script would.

The blocks are extracted from the Markdown files themselves, so the README and the guides cannot drift from the
code. Each file is one script: its blocks run in order in one fresh interpreter, so a block may continue an earlier
block of the same page (the page says so), never a block of another page. Training budgets are cut down by the
substitutions below (the blocks are run for correctness here; their results are measured by the benchmarks), and
each script runs in a subprocess in a scratch folder, importing this checkout's marl_note.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# every page of the site with Python blocks (docs/ARCHITECTURE.md and docs/RELIABILITY.md have none)
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

# argument=value -> a smaller value, applied to every block (only ever lowering a number)
SHORT_BUDGETS = {"episodes_per_train": 40, "episodes": 20, "episodes_per_test": 8, "test_freq": 20,
                 "snapshot_every": 20, "learning_starts": 64, "num_train_envs": 4, "num_test_envs": 4,
                 "num_simulations": 8}  # AlphaZero's search per move


def python_blocks(text: str, name: str = "README.md") -> list[tuple[int, str]]:
    """``(line number, code)`` of every ```python fenced block."""
    blocks, lines, start = [], text.splitlines(), None
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        if start is None and stripped == "```python":
            start, body = n, []
        elif start is not None and stripped == "```":
            blocks.append((start, "\n".join(body)))
            start = None
        elif start is not None:
            body.append(line)
    assert start is None, f"{name}: the ```python block at line {start} is never closed"
    return blocks


def shorten(code: str) -> str:
    def smaller(m: re.Match) -> str:
        value = int(m.group(2).replace("_", ""))
        return f"{m.group(1)}={min(value, SHORT_BUDGETS[m.group(1)])}"

    names = "|".join(SHORT_BUDGETS)
    return re.sub(rf"\b({names})=(\d[\d_]*)\b", smaller, code)


def run_blocks(page: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run the page's blocks in order as one script in ``tmp_path``; returns the process and the block count."""
    name = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name
    blocks = python_blocks(page.read_text(), name)
    script = []
    for line, code in blocks:
        script.append(f"print('--- {name} block at line {line}', flush=True)")
        script.append(shorten(code))
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
    assert set(last) == {f"--- {name} block at line {line}" for line, _ in blocks}
    return proc, len(blocks)


def test_readme_has_the_blocks_it_documents():
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 1
    shortened = shorten("f(episodes_per_train=6000, episodes=1_000, seed=0, num_simulations=4)")
    assert shortened == "f(episodes_per_train=40, episodes=20, seed=0, num_simulations=4)"


def test_every_guide_shows_running_code():
    guides = sorted((DOCS / "guides").glob("*.md"))
    assert len(guides) >= 8
    without = [g.name for g in guides if not python_blocks(g.read_text(), g.name)]
    assert not without, f"guides without a ```python block: {without}"


def test_an_unclosed_block_is_reported_with_its_page():
    with pytest.raises(AssertionError, match=r"guide\.md: the ```python block at line 2 is never closed"):
        python_blocks("text\n```python\nprint(1)\n", "guide.md")


def test_a_page_whose_block_fails_is_reported_with_the_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    with pytest.raises(AssertionError, match=r"page\.md block failed \(--- page\.md block at line 7\)"):
        run_blocks(page, tmp_path)


def test_readme_python_blocks_run_in_order(tmp_path):
    proc, _ = run_blocks(README, tmp_path)
    if "as player_1: win" not in proc.stdout:
        pytest.fail(f"the Quick start printed no per-seat summary:\n{proc.stdout[-2000:]}")


@pytest.mark.parametrize("page", [p for p in PAGES[1:] if python_blocks(p.read_text(), p.name)],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_docs_python_blocks_run_in_order(page, tmp_path):
    run_blocks(page, tmp_path)
