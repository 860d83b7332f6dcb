"""The command line's start-up for a saved agent (`evaluate`, `play`): this tree against another (not in the suite).

Each measurement is one fresh ``python -m marl_note ...`` process (what a user waits for before the first
move or score), this tree's and the other tree's (``--against DIR``, e.g. a worktree of an earlier commit)
alternating, so that the machine's load moves both alike; the figure is the process's CPU time (user +
system, from ``getrusage`` of the reaped child) and its wall time. The agent: a torch DQN trained for 50
tic-tac-toe episodes by this tree's ``train`` (a checkpoint both trees read); ``play`` reads no move (stdin
closed: the game is abandoned at once), ``evaluate`` plays 2 episodes per seat against a random player.

Run:  python bench/bench_cli_startup.py --against DIR [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "play": ["play", "--games", "1"],
    "evaluate": ["evaluate", "--env", "tictactoe_v3", "--episodes", "2"],
}


def run(tree: Path, args: list[str]) -> tuple[float, float]:
    """``(CPU s, wall s)`` of one ``python -m marl_note *args`` run from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "marl_note", *args], cwd=tree, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} in {tree} failed:\n{proc.stderr[-3000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="the tree to compare with (a worktree)")
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per tree and command")
    args = parser.parse_args()
    if not (args.against / "marl_note").is_dir():
        raise SystemExit(f"--against {args.against}: no marl_note package there")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ttt")
        run(ROOT, ["train", "--env", "tictactoe_v3", "--algo", "dqn", "--episodes", "50", "--eval-episodes", "0",
                   "--quiet", "--out", out])
        print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"load {os.getloadavg()[0]:.1f}; this tree {ROOT} against {args.against}; {args.rounds} rounds")
        print("| command | this tree: CPU s / wall s (medians) | other tree | CPU ratio |")
        print("|---|---|---|---|")
        for name, command in COMMANDS.items():
            command = [*command, "--checkpoint", out]
            ours, theirs = [], []
            for _ in range(args.rounds):
                ours.append(run(ROOT, command))
                theirs.append(run(args.against, command))
            (a_cpu, a_wall), (b_cpu, b_wall) = ([statistics.median(r[i] for r in rows) for i in (0, 1)]
                                                for rows in (ours, theirs))
            print(f"| `{name}` | {a_cpu:.2f} / {a_wall:.2f} | {b_cpu:.2f} / {b_wall:.2f} | {a_cpu / b_cpu:.2f}x |",
                  flush=True)
    print(f"# load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
