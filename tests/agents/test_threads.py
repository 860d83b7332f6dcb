"""Thread counts: one intra-op thread by default in a trainer's run and the command line, more on request.

PyTorch's count is read inside the run (a callback) and after it (restored); the command line's
header names the count it set. TensorFlow's pools are checked in a fresh process, where its runtime
has not started yet.
"""
import os
import subprocess
import sys

import pytest

from marl_note.agents.threads import DEFAULT_THREADS, check_threads, describe_threads, use_threads
from marl_note.cli import main
from marl_note.trainers import DecentralizedTrainer

torch = pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def torch_threads():
    """PyTorch's intra-op count as the test found it, set back afterwards (the command line sets it for good)."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # neither the default 1 nor the 2 asked for below
    yield
    torch.set_num_threads(before)


class ThreadsSeen:
    def __init__(self):
        self.seen = []

    def on_collect_end(self, trainer, stats, episodes):
        self.seen.append(torch.get_num_threads())


def cartpole_run(**options):
    from marl_note.agents.torch import DQN

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=20,
                                   episodes_per_train=2, test_freq=2, episodes_per_test=1, seed=0, **options)
    dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=[8], seed=0)
    seen = ThreadsSeen()
    try:
        trainer.train([dqn], learning_mask=[1], plot=False, progress=False, callbacks=[seen])
    finally:
        trainer.close()
    return trainer, seen.seen


def test_a_run_uses_one_thread_by_default_and_restores_the_count(torch_threads):
    trainer, seen = cartpole_run()
    assert seen and set(seen) == {DEFAULT_THREADS} == {1}
    # torch's count only: TensorFlow, if another test of this process already ran it, keeps the pools it made
    assert trainer.threads_in_effect["torch"] == 1
    assert torch.get_num_threads() == 3


@pytest.mark.parametrize("threads, expected", [(2, 2), (None, 3)])
def test_threads_asked_for_or_left_alone(torch_threads, threads, expected):
    trainer, seen = cartpole_run(threads=threads)
    assert set(seen) == {expected} and trainer.threads_in_effect["torch"] == expected


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "two"])
def test_a_bad_thread_count_is_refused_before_any_work(bad):
    with pytest.raises(ValueError, match="threads must be 'auto', None or a positive integer"):
        DecentralizedTrainer("CartPole-v1", threads=bad)


def test_the_header_names_the_thread_count_and_threads_2_is_applied(torch_threads, tmp_path, capsys):
    base = ["train", "--env", "FrozenLake-v1", "--algo", "dqn", "--episodes", "2", "--num-envs", "2",
            "--update-freq", "8", "--test-episodes", "1", "--eval-episodes", "0", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "one")]) == 0
    assert "on 2 envs, 1 thread (torch" in capsys.readouterr().out.splitlines()[0]
    assert torch.get_num_threads() == 1
    assert main([*base, "--threads", "2", "--out", str(tmp_path / "two")]) == 0
    assert "on 2 envs, 2 threads (torch" in capsys.readouterr().out.splitlines()[0]
    assert torch.get_num_threads() == 2


def test_tensorflow_takes_the_count_before_its_runtime_starts():
    pytest.importorskip("tensorflow")
    code = ("from marl_note.agents.threads import use_threads\n"
            "import tensorflow as tf\n"
            "effect, _ = use_threads(1, backend='tf')\n"
            "tf.constant(1.0) + 1.0  # the runtime starts with one thread in each pool\n"
            "late, _ = use_threads(2)  # too late: TensorFlow keeps its pools\n"
            "print(effect['tensorflow'], tf.config.threading.get_inter_op_parallelism_threads(), "
            "late['tensorflow'])\n")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1", "1", "1"]


def test_check_and_describe():
    assert check_threads("auto") == 1 and check_threads(None) is None and check_threads(3) == 3
    assert describe_threads({"torch": 2}) == "2 threads (torch)"
    assert describe_threads({"torch": 1, "tensorflow": 2}) == "1 thread (torch), 2 threads (tensorflow)"
    effect, restore = use_threads(None)
    restore()
    assert "torch" in effect  # imported above: reported, not changed
