"""TF agents under tf.distribute strategies (issue 10, part 1).

A strategy's devices must be configured before TensorFlow starts, so every strategy runs in a
subprocess (``tests/agents/tf_distribute_worker.py``), each bounded by a timeout and killed on
expiry. From equal weights and the same global batch, one synchronous 2-replica update equals
the single-process update (1e-5): MirroredStrategy on two logical CPU devices (every algorithm,
through ``agent.update``), MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1
(DQN and PPO, each worker on its half of the batch). Checkpoints move both ways between a
strategy and none; a non-finite step is refused under a strategy; a dead worker makes the other
fail with DistributedStepError in bounded time. ParameterServerStrategy on an in-process cluster:
steps scheduled on workers by a ClusterCoordinator equal single-process steps.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5
LIMIT = 400  # seconds for the subprocesses, started together; a 2-core machine at load 15 needed 260
# DQN and PPO (the equivalence the issue asks for), MADDPG (nested inputs, targets moved inside the
# step); DDPG and SAC (targets moved by a step of their own) with MARL_NOTE_TEST_ALL_STRATEGIES=1
MIRRORED = ("DQN", "PPO", "MADDPG") + (("DDPG", "SAC") if os.environ.get("MARL_NOTE_TEST_ALL_STRATEGIES") else ())


def launch(mode, out, *args, env=None):
    command = [sys.executable, "-m", "tests.agents.tf_distribute_worker", mode, str(out), *map(str, args)]
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(procs, outs):
    """Wait for every process (killing all at the deadline); their JSON results."""
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=LIMIT)[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
            proc.communicate()
        pytest.fail(f"a strategy subprocess ran past {LIMIT} s")
    results = []
    for proc, out, log in zip(procs, outs, logs):
        assert out.exists(), f"no result (exit {proc.returncode}):\n{log[-3000:]}"
        results.append(json.loads(out.read_text()))
    return results, logs


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every strategy's subprocesses, started together (they wait on each other's collectives and
    on TensorFlow's start-up more than they compute); each test waits for its own."""
    tmp = tmp_path_factory.mktemp("strategies")
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    started = {"mirrored": ([launch("mirrored", tmp / "mirrored.json", tmp, ",".join(MIRRORED))],
                            [tmp / "mirrored.json"]),
               "ps": ([launch("ps", tmp / "ps.json", tmp)], [tmp / "ps.json"]),
               "workers": ([launch("worker-die", tmp / f"worker{i}.json",
                                   env={"TF_CONFIG": json.dumps({"cluster": cluster,
                                                                 "task": {"type": "worker", "index": i}})})
                            for i in range(2)], [tmp / f"worker{i}.json" for i in range(2)])}
    yield started
    for procs, _ in started.values():
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(LIMIT + 30)
def test_mirrored_two_devices_update_equals_one_device_and_checkpoints_move_both_ways(runs):
    (result,), (log,) = finish(*runs["mirrored"])
    assert "diff" in result and "nonfinite" in result, log[-3000:]
    assert result["replicas"] == 2
    for name, diff in result["diff"].items():  # one agent.update() each, single device vs 2 replicas
        assert diff < TOL, (name, diff)
    assert set(result["diff"]) == set(MIRRORED)
    assert all(d == 0.0 for d in result["copies"].values()), result["copies"]  # replicas hold the same weights
    assert all(d < TOL for d in result["numpy_acting"].values()), result["numpy_acting"]
    assert result["saved_config_has_strategy"] is False
    assert result["rebuilt"] == [True, "MirroredVariable"]  # set()'s rebuild keeps the strategy
    plain, diff = result["restored_plain"]  # written under the strategy, restored without one
    assert plain and diff == 0.0
    kind, diff = result["restored_dist"]  # written without, restored under it
    assert kind == "MirroredVariable" and diff == 0.0
    assert result["after_restore"] < TOL  # and both go on training identically
    assert result["one_row"] < TOL  # a batch of one row: the replica without rows adds nothing
    assert abs(result["one_row_loss"][0] - result["one_row_loss"][1]) < TOL
    assert "loss is nan" in result["nonfinite"] and result["nonfinite_unchanged"] == 0.0


@pytest.mark.timeout(LIMIT + 30)
def test_multi_worker_update_equals_single_process_and_a_dead_worker_fails_the_other(runs):
    (first, second), logs = finish(*runs["workers"])
    for r, result in enumerate((first, second)):
        assert (result["rank"], result["world"], result["replicas"]) == (r, 2, 2), logs[r][-3000:]
        assert result["dqn_diff"] < TOL and result["ppo_diff"] < TOL, result
        assert result["td_rows"] == 6  # each worker gets the TD errors of its own rows back
        assert result["broadcast"] == [5, 0] and result["any"] == [True, False]  # lockstep helpers
    assert second["exited"]
    assert first["second_step"].startswith("DistributedStepError"), first["second_step"]
    assert "task:1" in first["second_step"], first["second_step"]
    assert first["failed_after"] < 120


@pytest.mark.timeout(LIMIT + 30)
def test_parameter_server_steps_scheduled_on_workers_equal_single_process_steps(runs):
    (result,), (log,) = finish(*runs["ps"])
    assert "ppo_diff" in result, log[-3000:]
    assert result["variable_device"].startswith("/job:ps/")
    assert result["coordinator"]
    assert result["dqn_diff"] < TOL  # three DQN steps, each run on a worker, variables on the ps
    assert result["ppo_steps"][0] == result["ppo_steps"][1] > 0 and result["ppo_diff"] < TOL
    assert result["restored_plain"] == 0.0
