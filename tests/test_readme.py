"""Every Python block of README.md runs, in order, as a user pasting them into one script would.

The blocks are extracted from README.md itself, so the README cannot drift from the code. Training
budgets are cut down by the substitutions below (the blocks are run for correctness here; their
results are measured by the benchmarks), and the script runs in a subprocess in a scratch folder.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# argument=value -> a smaller value, applied to every block (only ever lowering a number)
SHORT_BUDGETS = {"episodes_per_train": 40, "episodes": 20, "episodes_per_test": 8, "test_freq": 20,
                 "snapshot_every": 20, "learning_starts": 64, "num_train_envs": 4, "num_test_envs": 4}


def python_blocks(text: str) -> list[tuple[int, str]]:
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
    assert start is None, f"README.md: the ```python block at line {start} is never closed"
    return blocks


def shorten(code: str) -> str:
    def smaller(m: re.Match) -> str:
        value = int(m.group(2).replace("_", ""))
        return f"{m.group(1)}={min(value, SHORT_BUDGETS[m.group(1)])}"

    names = "|".join(SHORT_BUDGETS)
    return re.sub(rf"\b({names})=(\d[\d_]*)\b", smaller, code)


def test_readme_has_the_blocks_it_documents():
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 2
    shortened = shorten("f(episodes_per_train=6000, episodes=1_000, seed=0)")
    assert shortened == "f(episodes_per_train=40, episodes=20, seed=0)"


def test_readme_python_blocks_run_in_order(tmp_path):
    blocks = python_blocks(README.read_text())
    script = []
    for line, code in blocks:
        script.append(f"print('--- README.md block at line {line}', flush=True)")
        script.append(shorten(code))
    path = tmp_path / "readme_blocks.py"
    path.write_text("\n".join(script) + "\n")
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("--- README.md block")]
    assert proc.returncode == 0, (f"README.md block failed ({last[-1] if last else 'before the first block'}):\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    assert len(last) == len(blocks)
    if proc.returncode == 0 and "as player_1: win" not in proc.stdout:
        pytest.fail(f"the Quick start printed no per-seat summary:\n{proc.stdout[-2000:]}")
