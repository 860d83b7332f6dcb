"""The terminal of the command line: no framework start-up logs before a command's first line;
Ctrl-C during training keeps the learners and the run checkpoint (exit status 130), and so does a run
stopped by a non-finite update (exit status 1, the error as one line).

The first two run the real entry point in subprocesses (``python -m marl_note``), as a user would.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from marl_note.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # TensorFlow's default log level
ENV["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
FRAMEWORK_LOGS = ("oneDNN", "absl", "cpu_feature_guard", "rebuild TensorFlow", "TF_ENABLE_ONEDNN_OPTS")


def started(*args: str) -> subprocess.Popen:
    """``python -m marl_note ARGS`` in the background, its standard streams piped."""
    return subprocess.Popen([sys.executable, "-m", "marl_note", *args], env=ENV, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(proc: subprocess.Popen, stdin: str = "") -> subprocess.CompletedProcess:
    try:
        stdout, stderr = proc.communicate(stdin, timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_evaluate_and_play_into_tensorflow_print_no_framework_logs(tmp_path, capsys):
    pytest.importorskip("tensorflow")
    out = str(tmp_path / "ttt")  # a tiny self-play run, loaded below into TensorFlow
    assert main(["train", "--env", "tictactoe_v3", "--algo", "dqn", "--self-play", "--episodes", "8", "--num-envs",
                 "2", "--update-freq", "16", "--test-episodes", "2", "--eval-episodes", "0", "--quiet",
                 "--agent-arg", "hidden_sizes=[8]", "--out", out]) == 0
    capsys.readouterr()
    evaluating = started("evaluate", "--checkpoint", out, "--backend", "tf", "--episodes", "2", "--num-envs", "1")
    playing = started("play", "--checkpoint", out, "--backend", "tf")  # side by side
    evaluated, played = finished(evaluating), finished(playing, stdin="q\n")
    for proc in (evaluated, played):
        assert proc.returncode == 0, proc.stderr[-2000:]
        logged = [line for line in proc.stderr.splitlines() if any(word in line for word in FRAMEWORK_LOGS)]
        assert logged == [], proc.stderr[-2000:]
    # the first lines are the command's own: which weights it loaded, then the games
    first = evaluated.stdout.splitlines()[:2]
    assert first[0].startswith(f"{out}: the ") and first[1].startswith("greedy games against a random player"), first


def test_ctrl_c_saves_the_learners_and_the_run_checkpoint_and_exits_130(tmp_path):
    pytest.importorskip("torch")
    out = str(tmp_path / "cartpole")
    # `python -m marl_note train ...` as typed at a terminal: Ctrl-C raises KeyboardInterrupt there. A process tree
    # started in the background by a shell without job control (a CI script's `cmd &`) ignores SIGINT, and a child
    # inherits that, so the child is started with Python's own handler, whatever this test process was given
    command = ["train", "--env", "CartPole-v1", "--algo", "dqn", "--episodes", "2000", "--num-envs", "2",
               "--update-freq", "50", "--test-freq", "100000", "--out", out, "--agent-arg", "hidden_sizes=[16]"]
    as_at_a_terminal = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "sys.argv = ['marl_note', *sys.argv[1:]]; runpy.run_module('marl_note', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", as_at_a_terminal, *command],
                            env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # the first progress line after a chunk (stderr is a pipe: plain lines, one at the start, then every 5%
        # of the episodes or 60 s)
        deadline = time.monotonic() + 200
        seen = []
        for line in proc.stderr:
            seen.append(line)
            counted = line.startswith("marl_note: ") and "episodes" in line and not line.startswith("marl_note: 0/")
            if counted or time.monotonic() > deadline:
                break
        assert any("episodes" in line for line in seen), "".join(seen)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr
    said = [line for line in stdout.splitlines() if line.startswith("interrupted after")]
    assert said and out in said[0] and "run_checkpoint" in said[0], stdout
    record = json.loads(open(os.path.join(out, "marl_note_run.json")).read())
    assert record["interrupted"] is True and record["env_steps"] > 0

    from marl_note.agents.checkpoints import restore
    from marl_note.trainers.run_state import load_run

    agent = restore(os.path.join(out, "last", "agent_0"), backend="torch")
    run = load_run(os.path.join(out, "run_checkpoint"), [agent])
    assert run.env_steps == record["env_steps"] and run.episodes == record["episodes"] > 0


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the diverging weights, on purpose
def test_a_non_finite_update_saves_the_learners_and_the_run_checkpoint_and_exits_1(tmp_path, capsys):
    """A learning rate that makes the second update's loss overflow (as a diverging learner's does, hours into a
    run): the refused update writes no weight, so the run keeps the last finite weights and its checkpoint, says
    where, and prints the error as one line (no traceback) with exit status 1."""
    import numpy as np

    from marl_note.agents.checkpoints import restore
    from marl_note.trainers.run_state import load_run

    out = str(tmp_path / "diverged")
    status = main(["train", "--env", "CartPole-v1", "--algo", "dqn", "--backend", "numpy", "--agent-arg", "lr=1e30",
                   "--agent-arg", "learning_starts=64", "--agent-arg", "hidden_sizes=[16]", "--env-steps", "3000",
                   "--num-envs", "2", "--update-freq", "32", "--eval-episodes", "0", "--quiet", "--out", out])
    captured = capsys.readouterr()
    assert status == 1, captured.err[-2000:]
    assert "Traceback" not in captured.err
    error = [line for line in captured.err.splitlines() if line.startswith("marl_note train: error: ")]
    assert error and "DQN update 2: loss is inf" in error[0], captured.err[-2000:]
    said = [line for line in captured.out.splitlines() if line.startswith("stopped by a non-finite value")]
    assert said and out in said[0] and "run_checkpoint" in said[0], captured.out
    record = json.loads(open(os.path.join(out, "marl_note_run.json")).read())
    assert record["stopped"] == error[0][len("marl_note train: error: "):] and "interrupted" not in record
    agent = restore(os.path.join(out, "last", "agent_0"), backend="numpy")
    assert agent.updates == 1  # the first update's weights: the second was refused
    assert all(np.isfinite(np.asarray(v, np.float64)).all() for v in agent.state_dict().values())
    run = load_run(os.path.join(out, "run_checkpoint"), [agent])
    assert run.env_steps == record["env_steps"] > 0


QUIET_IMPORT = r"""
import sys
from marl_note.cli.quiet import quiet_frameworks
with quiet_frameworks(modules=("noisy_start",)):
    import noisy_start
    import noisy_start  # a second import runs nothing again
assert "VALUE = 7" in noisy_start.__loader__.get_source("noisy_start")  # the rest of the loader: the wrapped one's
print("after", noisy_start.VALUE, file=sys.stderr, flush=True)
"""

NOISY_START = r'''
import os, sys, warnings
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
os.write(2, b"I0000 00:00:1795911187.700748    4095 port.cc:153] oneDNN custom operations are on.\n")
os.write(2, b"W0000 00:00:1795911187.800748    4095 gpu.cc:12] no GPU found\n")
os.write(2, b"E0000 00:00:1795911187.900748    4095 io.cc:7] a real error\n")
print("a line of the module's own", file=sys.stderr, flush=True)
warnings.warn("a Python warning", UserWarning)
VALUE = 7
'''


@pytest.mark.parametrize("level, hidden", [(None, "IW"), ("1", "I"), ("0", "")])
def test_a_quiet_import_drops_only_the_start_up_lines_its_log_level_hides(tmp_path, level, hidden):
    """What any CPU shows: the C++ lines that TensorFlow 2.21 logs before it reads TF_CPP_MIN_LOG_LEVEL
    (oneDNN's notice on CPUs where oneDNN is on by default) are taken out of the first import's standard
    error by the level in force (2 unless the user set one); errors and everything else pass, in order."""
    (tmp_path / "noisy_start.py").write_text(NOISY_START)
    env = {**ENV, "PYTHONPATH": os.pathsep.join((str(tmp_path), ENV["PYTHONPATH"]))}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    proc = subprocess.run([sys.executable, "-c", QUIET_IMPORT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line[0] for line in lines if line[:1] in "IWE" and "] " in line] == [c for c in "IWE" if c not in hidden]
    assert ("absl::InitializeLog" in proc.stderr) == (hidden == "")
    own = [i for i, line in enumerate(lines)
           if "own" in line or "UserWarning: a Python" in line or line.startswith("after")]
    assert len(own) == 3 and own == sorted(own) and lines[own[-1]] == "after 7", proc.stderr
