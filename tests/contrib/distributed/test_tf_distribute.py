"""TF agents under tf.distribute strategies (issue 10, parts 1 and 3).

A strategy's devices must be configured before TensorFlow starts, so the strategies run in
subprocesses (``tests/contrib/distributed/tf_distribute_worker.py``), bounded by a timeout and killed on
expiry; starting TensorFlow is the slow part, so there are three, started together:

- two MultiWorkerMirroredStrategy workers on 127.0.0.1 (``TF_CONFIG``): one DQN and one PPO step on
  each worker's half of the batch equal the single-process step on the whole (1e-5); the lockstep
  helpers; a short 2-worker trainer run on CartPole (rank 0 tests and checkpoints, the workers end
  with equal weights, the checkpoint restores in this process); then rank 1 exits and rank 0's next
  step fails with DistributedStepError in bounded time;
- one process: MirroredStrategy on two logical CPU devices (DQN and PPO; also MADDPG, DDPG and SAC
  with MARL_NOTE_TEST_ALL_STRATEGIES=1): one 2-replica ``agent.update`` equals the one-device
  update, checkpoints move both ways between a strategy and none, a one-row batch, a refused
  non-finite step; then ParameterServerStrategy on an in-process cluster: steps scheduled on
  workers by a ClusterCoordinator equal single-process steps.
"""
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("tensorflow") is None:  # (not imported here: the subprocesses start it meanwhile)
    pytest.skip("tensorflow is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[3]
TOL = 1e-5
LIMIT = 300  # seconds for the subprocesses, started together (about 60 on a 2-core machine at load 7)
# DQN and PPO (the equivalence the issue asks for); with MARL_NOTE_TEST_ALL_STRATEGIES=1 also MADDPG
# (nested inputs, targets moved inside the step), DDPG and SAC (targets moved by a step of their own)
MIRRORED = ("DQN", "PPO") + (("MADDPG", "DDPG", "SAC") if os.environ.get("MARL_NOTE_TEST_ALL_STRATEGIES") else ())


def launch(mode, out, *args, env=None):
    """Start a strategy subprocess. Its temporary files go to ``out``'s folder (``TMPDIR``): the processes
    that leave with ``os._exit`` (in-process servers cannot be joined) skip the exit handlers with which
    TensorFlow's AutoGraph deletes the source files it writes for the functions it converts."""
    command = [sys.executable, "-m", "tests.contrib.distributed.tf_distribute_worker", mode, str(out), *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(Path(out).parent), **(env or {})}
    return subprocess.Popen(command, cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


_finished: dict = {}


def finish(procs, outs):
    """Wait for every process (killing all at the deadline); their JSON results (once per group:
    several tests read the workers')."""
    key = tuple(id(p) for p in procs)
    if key not in _finished:
        _finished[key] = _wait(procs, outs)
    return _finished[key]


def _wait(procs, outs):
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
    started = {"ps": ([launch("ps", tmp / "ps.json", tmp, ",".join(MIRRORED))], [tmp / "ps.json"]),
               "workers": ([launch("worker-die", tmp / f"worker{i}.json", tmp,
                                   env={"TF_CONFIG": json.dumps({"cluster": cluster,
                                                                 "task": {"type": "worker", "index": i}})})
                            for i in range(2)], [tmp / f"worker{i}.json" for i in range(2)])}
    yield tmp, started
    for procs, _ in started.values():  # (each test waited for its own: this only acts after a failure)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(LIMIT + 30)
def test_mirrored_two_devices_update_equals_one_device_and_checkpoints_move_both_ways(runs):
    (result,), (log,) = finish(*runs[1]["ps"])
    result = result.get("mirrored", {})
    assert "diff" in result and "nonfinite" in result, log[-3000:]
    assert result["replicas"] == 2
    for name, diff in result["diff"].items():  # one agent.update() each, single device vs 2 replicas
        assert diff < TOL, (name, diff)
    assert set(result["diff"]) == set(MIRRORED)
    assert all(d == 0.0 for d in result["copies"].values()), result["copies"]  # replicas hold the same weights
    assert all(d < TOL for d in result["numpy_acting"].values()), result["numpy_acting"]
    assert result["saved_config_has_strategy"] is False
    assert result["rebuilt"] == [True, "MirroredVariable"]  # set()'s rebuild keeps the strategy
    assert result["rl_diff"] < TOL and result["rl_losses"][0] == pytest.approx(result["rl_losses"][1], rel=1e-5)
    outside, eager = result["rl_refused"]  # what an RL subclass cannot do under a strategy, refused up front
    assert outside.startswith("TypeError: Given: ['q'] were made outside MirroredStrategy.scope()"), outside
    assert eager.startswith("ValueError: Given(tf_function=False) steps eagerly"), eager
    whole, under = result["grad_sq_norm"]  # |G_B|^2 of the batch as in one process (not a per-replica mean)
    assert abs(under - whole) < TOL * max(1.0, whole), result["grad_sq_norm"]
    count, g_sq, trace = result["noise_measured"]  # one 2-replica step: per-replica vs all-reduced |g|^2
    assert count == 1
    for got, want in zip((g_sq, trace), result["noise_expected"]):
        assert abs(got - want) < 1e-4 * max(1.0, abs(want)), (result["noise_measured"], result["noise_expected"])
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
    (first, second), logs = finish(*runs[1]["workers"])
    for r, result in enumerate((first, second)):
        assert (result["rank"], result["world"], result["replicas"]) == (r, 2, 2), logs[r][-3000:]
        assert result["dqn_diff"] < TOL and result["ppo_diff"] < TOL and result["rl_diff"] < TOL, result
        assert result["td_rows"] == 6  # each worker gets the TD errors of its own rows back
        assert result["broadcast"] == [5, 0] and result["any"] == [True, False]  # lockstep helpers
        # a timed collective holds a sleeping thread for its whole timeout (11k threads, then a crash,
        # in a two-worker CartPole run): 40 broadcasts must leave no threads behind
        assert result["threads_added"] < 20, result["threads_added"]
    assert second["exited"]
    assert first["second_step"].startswith("DistributedStepError"), first["second_step"]
    assert "task:1" in first["second_step"], first["second_step"]
    assert first["failed_after"] < 120
    assert first["barrier"].startswith("RankLostError: rank 0: waiting for the other workers (barrier)"), \
        first["barrier"]


@pytest.mark.timeout(LIMIT + 30)
def test_parameter_server_steps_scheduled_on_workers_equal_single_process_steps(runs):
    (result,), (log,) = finish(*runs[1]["ps"])
    assert "ppo_diff" in result, log[-3000:]
    assert result["variable_device"].startswith("/job:ps/")
    assert result["coordinator"]
    assert result["dqn_diff"] < TOL  # three DQN steps, each run on a worker, variables on the ps
    assert result["ppo_steps"][0] == result["ppo_steps"][1] > 0 and result["ppo_diff"] < TOL
    assert result["restored_plain"] == 0.0
    assert "RL subclasses do not run under a ParameterServerStrategy" in result["rl_refused"], result["rl_refused"]
    # the RL subclass's step was converted by AutoGraph, whose source files this process (leaving with os._exit)
    # cannot delete: they are in the test's folder, not the machine's temporary folder
    assert list(runs[0].glob("__autograph_generated_file*.py"))


@pytest.mark.timeout(LIMIT + 30)
def test_two_worker_trainer_stays_in_lockstep_and_rank_0_checkpoint_restores_in_one_process(runs):
    """The trainer drives MultiWorkerMirrored workers unchanged (init_distributed from TF_CONFIG):
    each worker's agent starts from its own seed, so equal weights at the end need prepare()'s
    broadcast and every step's all-reduce; rank 0 alone tests and saves."""
    import numpy as np

    from marl_note.agents.tf import DQN
    from marl_note.trainers.run_state import load_run

    tmp, started = runs
    (first, second), logs = finish(*started["workers"])
    assert "trainer" in first and "trainer" in second, (logs[0][-3000:], logs[1][-3000:])
    r0, r1 = first["trainer"], second["trainer"]
    assert r0["updates"] == r1["updates"] > 0 and r0["episodes"] >= 8 and r1["episodes"] >= 8
    assert r0["tests"] > 0 == r1["tests"]
    w0, w1 = (dict(np.load(tmp / f"weights_rank{r}.npz")) for r in range(2))
    assert set(w0) == set(w1) and len(w0) > 4
    for key, value in w0.items():
        np.testing.assert_array_equal(w1[key], value, err_msg=key)
    assert (tmp / "run_rank0").exists() and not (tmp / "run_rank1").exists()
    import gymnasium as gym
    restored = DQN(gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2), hidden_sizes=(16,), seed=9)
    run = load_run(str(tmp / "run_rank0"), [restored])
    assert run.updates == r0["updates"] == restored.updates
    weights = restored.nets.state_dict()
    for key, value in w0.items():
        np.testing.assert_array_equal(weights[key], value, err_msg=key)


def test_the_example_runs_tf_in_one_process_under_a_mirrored_strategy(monkeypatch):
    """Without TF_CONFIG, ``--backend tf`` is one process with a MirroredStrategy (no rank context)."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    path = ROOT / "examples" / "distributed_cartpole.py"
    spec = importlib.util.spec_from_file_location("distributed_cartpole", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = example.train(backend="tf", algo="DQN", episodes=4, batch_size=16, progress=False)
    assert out["rank"] == 0 and out["world_size"] == 1 and out["replicas"] >= 1 and out["env_steps"] > 0


def test_the_tf_collective_refuses_what_cannot_stay_in_lockstep_before_any_communication(monkeypatch):
    import gymnasium as gym
    import tensorflow as tf

    from marl_note.agents import RandomAgent
    from marl_note.agents.tf import DQN, PPO
    from marl_note.contrib.distributed.tf.multiworker import TFCollective, init_distributed

    space, acts = gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2)
    collective = TFCollective(tf.distribute.get_strategy())
    with pytest.raises(ValueError, match="not built under this run's strategy"):
        collective.prepare(DQN(space, acts, hidden_sizes=(8,), seed=0))
    with pytest.raises(ValueError, match="target_kl=None with several workers"):
        collective.prepare(PPO(space, acts, hidden_sizes=(8,), target_kl=0.01, seed=0))
    with pytest.raises(TypeError, match="RandomAgent has no TensorFlow networks"):
        collective.prepare(RandomAgent(acts))
    with pytest.raises(ValueError, match="from rank 0 only"):
        collective.broadcast("x", src=1)
    with pytest.raises(TypeError, match="takes a MultiWorkerMirroredStrategy"):
        init_distributed(tf.distribute.get_strategy())
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}))
    with pytest.raises(ValueError, match="runs no trainer"):
        init_distributed()
