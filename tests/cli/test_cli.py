"""The command line (``python -m marl_note``): tic-tac-toe trained, evaluated and played end to end, and bad arguments.

The end-to-end tests run the real entry point in subprocesses (the run is trained once for the
module, on a tiny budget); error tests call ``main`` in this process, since every one of them
fails before a backend is imported.
"""
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from marl_note.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
TRAIN = ["train", "--env", "tictactoe_v3", "--algo", "dqn", "--self-play", "--episodes", "24", "--num-envs", "4",
         "--update-freq", "32", "--test-freq", "12", "--test-episodes", "4", "--eval-episodes", "4",
         "--agent-arg", "learning_starts=16", "--agent-arg", "hidden_sizes=[16]"]


def cli(*args: str, python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *python_flags, "-m", "marl_note", *args], env=ENV,
                          capture_output=True, text=True, timeout=240)


def start(folder, name: str, *args: str, stdin: str = "", python_flags: tuple[str, ...] = ()):
    """``python -m marl_note ARGS`` in the background: ``stdin`` through a pipe, output to files in ``folder``."""
    files = [open(os.path.join(folder, f"{name}.{part}"), "w+") for part in ("stdout", "stderr")]
    proc = subprocess.Popen([sys.executable, *python_flags, "-m", "marl_note", *args], env=ENV, text=True,
                            stdin=subprocess.PIPE, stdout=files[0], stderr=files[1])
    proc.stdin.write(stdin)  # a few bytes: the pipe holds them, then end of input
    proc.stdin.close()
    return proc, files


def finish(started) -> subprocess.CompletedProcess:
    proc, files = started
    try:
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    texts = []
    for f in files:
        f.seek(0)
        texts.append(f.read())
    for f in files:
        f.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, *texts)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    pytest.importorskip("torch")
    out = str(tmp_path_factory.mktemp("cli") / "ttt")
    proc = cli(*TRAIN, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


@pytest.fixture(scope="module")
def evaluated_and_played(run_dir, tmp_path_factory):
    """``evaluate`` and ``play`` (moves piped in) of the trained run, side by side in two processes."""
    out, _ = run_dir
    logs = str(tmp_path_factory.mktemp("logs"))
    evaluating = start(logs, "evaluate", "evaluate", "--checkpoint", out, "--episodes", "6",
                       python_flags=("-X", "importtime"))
    playing = start(logs, "play", "play", "--checkpoint", out, stdin="5\n5\nabc\n")
    return {"evaluate": finish(evaluating), "play": finish(playing)}


def test_train_saves_the_self_play_agent_and_reports_each_seat_against_random(run_dir):
    out, proc = run_dir
    record = json.load(open(os.path.join(out, "marl_note_run.json")))
    assert record["env"] == "tictactoe_v3" and record["mode"] == "self-play" and record["backend"] == "torch"
    assert record["seats"] == {"player_1": "agent", "player_2": "agent"}
    assert record["episodes"] >= 24 and record["gradient_steps"] > 0  # it trained
    assert sorted(os.listdir(out)) == ["best", "last", "marl_note_run.json"]  # the best test's weights, the last ones
    for which in ("best", "last"):
        assert json.load(open(os.path.join(out, which, "agent", "manifest.json")))["algorithm"] == "DQN"
    assert record["checkpoints"] == {"best": "best", "last": "last"} and record["best_episode"] >= 12
    for seat in ("player_1", "player_2"):
        line = re.search(rf"as {seat}: win ([\d.]+)%, draw ([\d.]+)%, loss ([\d.]+)% \(4 games", proc.stdout)
        assert line, proc.stdout
        assert sum(float(x) for x in line.groups()) == pytest.approx(100.0)
        assert sum(record["vs_random"][seat][k] for k in ("win", "draw", "loss")) == pytest.approx(1.0)
    assert "marl_note: 24/24 episodes (100%)" in proc.stderr  # progress, as plain lines when piped


def test_evaluate_restores_the_run_and_imports_only_its_backend(evaluated_and_played):
    proc = evaluated_and_played["evaluate"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = re.findall(r"as (player_\d): win ([\d.]+)%, draw ([\d.]+)%, loss ([\d.]+)% \(6 games", proc.stdout)
    assert [seat for seat, *_ in results] == ["player_1", "player_2"], proc.stdout
    imported = set(re.findall(r"\|\s+([\w.]+)\s*$", proc.stderr, flags=re.M))
    assert "torch" in imported and not {"tensorflow", "keras"} & imported


def test_play_through_a_pipe_re_asks_illegal_and_unparseable_moves_and_ends_cleanly_at_eof(evaluated_and_played):
    proc = evaluated_and_played["play"]
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    text = proc.stdout
    assert " 1 | 2 | 3\n---+---+---\n 4 | 5 | 6" in text  # the empty board, cells numbered
    reply = re.search(r"player_2 \(O, the agent\) plays (\d)", text)
    assert reply and reply.group(1) != "5", text
    legal = ", ".join(str(c) for c in range(1, 10) if str(c) not in ("5", reply.group(1)))
    assert f"5 is not a legal move now (cell 5 is taken); legal moves: {legal}" in text
    assert f"'abc' is not a move; legal moves: {legal}" in text
    assert text.count(f"your move (X; one of {legal}): ") == 3  # asked again after each bad line
    assert text.rstrip().endswith("no more moves: game abandoned")


def test_play_finishes_games_with_greedy_replies(run_dir, monkeypatch, capsys):
    from marl_note.agents.checkpoints import restore

    out, _ = run_dir
    monkeypatch.setattr(sys, "stdin", io.StringIO("1\n2\n3\n4\n5\n6\n7\n8\n9\n" * 2))
    assert main(["play", "--checkpoint", out, "--games", "2"]) == 0
    text = capsys.readouterr().out
    assert len(re.findall(r"^(you win|the agent wins|draw)$", text, flags=re.M)) == 2
    assert re.search(r"you won (\d), drew (\d), lost (\d)", text)
    board = np.zeros((1, 3, 3, 2), np.int8)
    board[0, 0, 0, 1] = 1  # player_2's view after X takes cell 1: the other player's plane
    mask = np.ones((1, 9), bool)
    mask[0, 0] = False
    greedy = int(restore(os.path.join(out, "best", "agent")).act(board, mask)[0]) + 1  # play uses the best
    assert f"player_2 (O, the agent) plays {greedy}\n" in text.split("game 2")[0]


def test_evaluate_a_single_checkpoint_against_a_run_and_train_again_into_the_run(run_dir, capsys, tmp_path):
    out = str(tmp_path / "ttt")  # a copy: training again changes the run, and other tests read the shared one
    shutil.copytree(run_dir[0], out)
    agent = os.path.join(out, "last", "agent")
    assert main(["evaluate", "--env", "tictactoe_v3", "--checkpoint", agent, "--opponent", out,
                 "--episodes", "2"]) == 0
    text = capsys.readouterr().out
    assert f"against {out}" in text and "as player_1:" in text and "as player_2:" in text
    before = os.path.getmtime(os.path.join(out, "marl_note_run.json"))
    assert main([*TRAIN, "--episodes", "8", "--eval-episodes", "0", "--quiet", "--out", out, "--seed", "1"]) == 0
    record = json.load(open(os.path.join(out, "marl_note_run.json")))
    assert record["seed"] == 1 and os.path.getmtime(os.path.join(out, "marl_note_run.json")) >= before


def test_importing_the_cli_and_refusing_an_argument_import_no_framework():
    code = ("import sys; from marl_note.cli import main; "
            "assert main(['train', '--env', 'tictactoe_v3', '--algo', 'ddpg', '--backend', 'tf']) == 2; "
            "bad = [m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules]; assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--algo ddpg does not fit tictactoe_v3" in proc.stderr


def run_main(capsys, *args: str) -> str:
    """The one-line error of a refused command (exit status 2)."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("args, message", [
    (["train", "--env", "conect_four_v3", "--algo", "dqn"],
     "unknown env 'conect_four_v3'; did you mean connect_four_v3"),
    (["train", "--env", "CartPole-v1", "--algo", "ddpg"],
     "--algo ddpg does not fit CartPole-v1: ddpg needs Box actions, but seat 'agent_0' has Discrete(2). "
     "Algorithms that fit: dqn, ppo, sac, maddpg, mappo, ippo, vdn, qmix, nfsp"),
    (["train", "--env", "Pendulum-v1", "--algo", "dqn"], "Algorithms that fit: ppo, ddpg, sac, maddpg"),
    (["train", "--env", "tictactoe_v3", "--algo", "maddpg"],
     "this env is turn-based. Algorithms that fit: dqn, ppo, sac"),
    (["train", "--env", "tictactoe_v3", "--algo", "dqn", "--self-play", "--opponent", "random"], "exclude each other"),
    (["train", "--env", "tictactoe_v3", "--algo", "dqn", "--agent-arg", "lrr=1"], "DQN takes no argument 'lrr'"),
    (["train", "--env", "tictactoe_v3", "--algo", "dqn", "--opponent", "random", "--seat", "player_3"],
     "--seat 'player_3' is not a seat of this env; its seats are player_1, player_2"),
    (["train", "--env", "simple_adversary_v3", "--algo", "dqn", "--self-play"], "drop --self-play"),
    (["play", "--env", "CartPole-v1", "--checkpoint", "."], "play knows the board games tictactoe_v3, connect_four_v3"),
    (["train", "--env", "CartPole-v1", "--algo", "alphazero"],
     "--algo alphazero does not fit CartPole-v1: alphazero searches turn-based board games"),
])
def test_bad_arguments_fail_with_one_line_naming_the_problem(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert message in run_main(capsys, *args)
    assert os.listdir(tmp_path) == []  # nothing written, no runs/ directory


def test_an_unknown_algorithm_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--env", "tictactoe_v3", "--algo", "a2c"])
    assert exc.value.code == 2 and "invalid choice: 'a2c'" in capsys.readouterr().err


def test_a_butterfly_env_without_pymunk_says_what_to_install(capsys):
    if importlib.util.find_spec("pymunk") is not None:
        pytest.skip("pymunk is installed here")
    err = run_main(capsys, "train", "--env", "pistonball_v6", "--algo", "ppo")
    assert "needs the package 'pymunk', which is not installed: pip install 'pettingzoo[butterfly]'" in err


def test_a_foreign_out_directory_is_refused_before_training(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    err = run_main(capsys, "train", "--env", "tictactoe_v3", "--algo", "dqn", "--out", str(tmp_path))
    assert "holds notes.txt and is no marl_note run directory" in err
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_checkpoints_that_are_not_one_are_refused(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "empty").mkdir()
    (tmp_path / "fake.zip").write_bytes(b"not a zip")
    for path, message in [(tmp_path / "missing", "does not exist"),
                          (tmp_path, "holds empty, fake.zip, notes.txt, but neither marl_note_run.json"),
                          (tmp_path / "empty", "is an empty directory, not a checkpoint"),
                          (tmp_path / "fake.zip", "is not a marl_note checkpoint"),
                          (tmp_path / "notes.txt", "is not a marl_note checkpoint")]:
        for command in ("evaluate", "play"):
            err = run_main(capsys, command, "--env", "tictactoe_v3", "--checkpoint", str(path))
            assert f"--checkpoint {path} " in err and message in err, err


def test_a_checkpoint_trained_on_another_env_is_refused(run_dir, capsys):
    out, _ = run_dir
    err = run_main(capsys, "evaluate", "--env", "connect_four_v3", "--checkpoint", out)
    assert "was trained on seats ['player_1', 'player_2']; this env's seats are ['player_0', 'player_1']" in err
    err = run_main(capsys, "evaluate", "--env", "connect_four_v3", "--checkpoint", os.path.join(out, "last", "agent"))
    assert "fits no seat of connect_four_v3" in err


def test_alphazero_trains_by_self_play_saves_and_evaluates_from_the_command_line(capsys, tmp_path):
    out = str(tmp_path / "az")
    assert main(["train", "--env", "tictactoe_v3", "--algo", "alphazero", "--self-play", "--episodes", "12",
                 "--agent-arg", "num_simulations=4", "--agent-arg", "learning_starts=16", "--agent-arg",
                 "hidden_sizes=[16]", "--seed", "0", "--out", out]) == 0
    trained = capsys.readouterr().out
    assert re.search(r"trained \d+ episodes, \d+ env steps, [1-9]\d* gradient steps", trained), trained
    assert json.load(open(os.path.join(out, "marl_note_run.json")))["algo"] == "alphazero"
    assert main(["evaluate", "--checkpoint", out, "--episodes", "4"]) == 0
    assert "as player_2: win" in capsys.readouterr().out
