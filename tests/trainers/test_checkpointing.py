"""CheckpointManager: periodic / best-k / last checkpoints of a training run, atomic, never deleting a user's file."""
import itertools
import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from pettingzoo.classic import tictactoe_v3  # noqa: E402

from marl_note.agents.checkpoints import CheckpointError, read_checkpoint  # noqa: E402
from marl_note.agents.torch import DQN  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402
from marl_note.trainers.checkpointing import INDEX, CheckpointManager  # noqa: E402
from marl_note.trainers.run_state import load_run  # noqa: E402
from tests.checkpoint_helpers import KILLED_WRITE, paused_save, run_killed  # noqa: E402

OBS = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)


def make(episodes, metrics=None, test_freq=5):
    """CartPole DQN; ``metrics`` scripts the test metric (one value per periodic test, then -100)."""
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=16,
                                   test_freq=test_freq, episodes_per_train=episodes, episodes_per_test=2, seed=0)
    if metrics is not None:
        scripted, real_test = itertools.chain(metrics, itertools.repeat(-100.0)), trainer.test

        def test(*args, **kwargs):
            return {**real_test(*args, **kwargs), "reward": next(scripted)}

        trainer.test = test
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
                buffer_size=2000, learning_starts=32, seed=0)
    return trainer, agent


def train(trainer, agent, manager, **kw):
    return trainer.train([agent], learning_mask=[1], plot=False, progress=False, callbacks=[manager], **kw)


def spy_saves(trainer):
    """Record the target of every whole-run save the trainer makes."""
    written = []
    real = trainer.save_checkpoint

    def save_checkpoint(path, include_replay=True):
        written.append(os.path.basename(path))
        return real(path, include_replay=include_replay)

    trainer.save_checkpoint = save_checkpoint
    return written


def on_disk(path):
    return sorted(os.listdir(path))


def fresh_agent():
    return make(1)[1]


def test_periodic_saves_keep_the_max_save_files_newest_loadable(tmp_path):
    path = tmp_path / "ckpt"
    trainer, agent = make(16)
    written = spy_saves(trainer)
    manager = CheckpointManager(path, save_freq=3, max_save_files=2, save_last=False)
    stats = train(trainer, agent, manager)
    periodic = [n for n in written if n.startswith("episode-")]
    counts = [int(n.split("-")[1]) for n in periodic]
    # one save at the first chunk boundary past each multiple of 3 episodes
    assert [c // 3 for c in counts] == list(range(1, len(counts) + 1)) and len(counts) >= 4
    assert on_disk(path) == sorted([INDEX, *periodic[-2:]])
    assert [c["name"] for c in manager.checkpoints] == periodic[-2:]
    for name in periodic[-2:]:
        state = load_run(str(path / name), [fresh_agent()])
        assert state.episodes == int(name.split("-")[1])
    assert counts[-1] <= stats["num_collected_episodes"]


def test_a_periodic_checkpoint_is_the_state_after_the_chunks_update_round(tmp_path):
    trainer, agent = make(12)
    updates_at = {}

    class Record:
        def on_update_end(self, trainer, metrics, episodes):
            updates_at[episodes] = agent.updates

    manager = CheckpointManager(tmp_path / "ckpt", save_freq=4, save_last=False)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False, callbacks=[Record(), manager])
    assert len(manager.checkpoints) == 3
    for c in manager.checkpoints:
        other = fresh_agent()
        load_run(c["path"], [other])
        assert other.updates == updates_at[c["episodes"]] > 0


def test_save_param_only_writes_weights_restorable_with_restore_param(tmp_path):
    trainer, agent = make(12)
    manager = CheckpointManager(tmp_path / "one", save_freq=6, save_param_only=True)
    train(trainer, agent, manager)
    assert [c["role"] for c in manager.checkpoints] == ["periodic", "periodic", "last"]
    manifest, arrays = read_checkpoint(manager.last_model_path)
    assert manifest["kind"] == "params" and not any("optim" in k or "replay" in k for k in arrays)
    other = fresh_agent()
    other.restore_param(manager.last_model_path)
    assert np.array_equal(other.q_values(OBS), agent.q_values(OBS))
    with pytest.raises(CheckpointError, match="holds only weights"):
        DQN.restore(manager.last_model_path)

    # two learners (one per tic-tac-toe seat): one weights checkpoint each
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, update_freq=20,
                                   test_freq=6, episodes_per_train=6, episodes_per_test=2, seed=0)
    seats = [DQN(trainer.observation_space(a), trainer.action_space(a), hidden_sizes=(16,), buffer_size=500,
                 learning_starts=8, seed=k) for k, a in enumerate(trainer.possible_agents)]
    manager = CheckpointManager(tmp_path / "two", save_param_only=True, save_best_only=True)
    trainer.train(seats, learning_mask=[1, 1], plot=False, progress=False, callbacks=[manager])
    assert [c["role"] for c in manager.checkpoints] == ["best", "last"]
    obs = np.random.default_rng(0).integers(0, 2, size=(8, 3, 3, 2)).astype(np.float32)
    for checkpoint in (manager.best_model_path, manager.last_model_path):
        assert on_disk(checkpoint) == ["learner0", "learner1"]
        for k, seat in enumerate(seats):
            copy = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), hidden_sizes=(16,),
                       seed=9)
            copy.restore_param(os.path.join(checkpoint, f"learner{k}"))
            assert np.array_equal(copy.q_values(obs), seat.q_values(obs))  # nothing learnt since the test
    with pytest.raises(ValueError, match="include_replay=True needs whole-run checkpoints"):
        CheckpointManager(tmp_path / "x", save_param_only=True, include_replay=True)


def test_save_best_only_writes_only_on_improvement(tmp_path):
    path = tmp_path / "ckpt"
    trainer, agent = make(12, metrics=[1.0, 3.0, 2.0, 3.0, 5.0, 4.0], test_freq=2)
    written = spy_saves(trainer)
    manager = CheckpointManager(path, save_best_only=True, save_last=False)
    stats = train(trainer, agent, manager)
    episodes = [e for e, _ in stats["test_history"]]
    assert [m for _, m in stats["test_history"]] == [1.0, 3.0, 2.0, 3.0, 5.0, 4.0]
    assert written == [f"best-episode-{episodes[i]:06d}" for i in (0, 1, 4)]  # 3.0 again is no improvement
    assert on_disk(path) == sorted([INDEX, written[-1]])
    assert manager.best_model_score == 5.0 and manager.best_model_path == str(path / written[-1])
    # the checkpoint holds the run with the test that made it best
    counters = read_checkpoint(manager.best_model_path)[0]["counters"]
    assert counters["best"] == 5.0 and counters["history"][-1] == [episodes[4], 5.0]


def test_save_top_k_keeps_the_k_best_and_resuming_keeps_counting(tmp_path):
    path = tmp_path / "ckpt"
    trainer, agent = make(12, metrics=[1.0, 3.0, 2.0, 5.0, 4.0, 0.0], test_freq=2)
    written = spy_saves(trainer)
    manager = CheckpointManager(path, save_top_k=2, save_last=False)
    stats = train(trainer, agent, manager)
    episodes = [e for e, _ in stats["test_history"]]
    assert written == [f"best-episode-{episodes[i]:06d}" for i in range(5)]  # 0.0 beats neither kept
    assert manager.best_k_models == {str(path / written[3]): 5.0, str(path / written[4]): 4.0}
    assert on_disk(path) == sorted([INDEX, written[3], written[4]])

    # a new run in the same path competes with the kept ones; mode="min" ranks the other way
    trainer2, agent2 = make(4, metrics=[4.5, 0.0], test_freq=2)
    again = CheckpointManager(path, save_top_k=2, save_last=False)
    train(trainer2, agent2, again)
    assert sorted(again.best_k_models.values()) == [4.5, 5.0]
    assert sorted(CheckpointManager(path, save_top_k=2, mode="min").best_k_models.values()) == [4.5, 5.0]
    assert CheckpointManager(path, save_top_k=2, mode="min").best_model_score == 4.5


def test_save_last_replaces_the_previous_last_and_resumes(tmp_path):
    path = tmp_path / "ckpt"
    trainer, agent = make(10)
    manager = CheckpointManager(path, save_freq=5, max_save_files=2)
    first = train(trainer, agent, manager)
    last = manager.last_model_path
    assert os.path.basename(last) == f"last-episode-{first['num_collected_episodes']:06d}"
    q_saved = agent.q_values(OBS)

    # resume from the manager's last checkpoint, with a manager on the same path: counting goes on
    trainer2, fresh = make(20)
    written = spy_saves(trainer2)
    manager2 = CheckpointManager(path, save_freq=5, max_save_files=2)
    stats = train(trainer2, fresh, manager2, resume_from=last)
    assert stats["test_history"][: len(first["test_history"])] == first["test_history"]
    assert stats["num_collected_episodes"] >= 20 and stats["num_gradient_steps"] > first["num_gradient_steps"]
    assert [int(n.split("-")[1]) // 5 for n in written if n.startswith("episode-")] == [3, 4]
    roles = [(c["role"], c["episodes"]) for c in manager2.checkpoints]
    assert [r for r, _ in roles] == ["periodic", "periodic", "last"] and roles[-1][1] == stats["num_collected_episodes"]
    assert not os.path.exists(last)  # the previous last was replaced
    assert not np.array_equal(fresh.q_values(OBS), q_saved)

    trainer3, agent3 = make(5)
    none = CheckpointManager(tmp_path / "none", save_freq=5, save_last=False)
    train(trainer3, agent3, none)
    assert none.last_model_path is None and [c["role"] for c in none.checkpoints] == ["periodic"]


def test_a_users_files_are_never_deleted(tmp_path):
    path = tmp_path / "ckpt"
    trainer, agent = make(10)
    first = CheckpointManager(path, save_freq=5, max_save_files=1)
    train(trainer, agent, first)
    (path / "notes.txt").write_text("mine")
    kept = first.checkpoints[0]["path"]
    with open(os.path.join(kept, "plot.png"), "w") as f:
        f.write("my plot")
    os.makedirs(path / "episode-000015")  # a folder of the user's named like the manager's next checkpoint

    trainer2, agent2 = make(20)
    second = CheckpointManager(path, save_freq=5, max_save_files=1)
    train(trainer2, agent2, second, resume_from=first.last_model_path)
    assert (path / "notes.txt").read_text() == "mine"
    assert os.listdir(kept) == ["plot.png"]  # the checkpoint's own files went, the user's stayed
    assert on_disk(path / "episode-000015") == [] and len(second.checkpoints) == 2
    assert all(c["name"] != "episode-000015" for c in second.checkpoints)


def test_a_foreign_path_is_refused_before_training(tmp_path):
    (tmp_path / "mine.txt").write_text("mine")
    trainer, agent = make(10)
    before = agent.state_dict()
    with pytest.raises(CheckpointError, match=r"non-empty directory that this manager did not write .*mine\.txt"):
        train(trainer, agent, CheckpointManager(tmp_path, save_freq=5))
    assert agent.agent_steps == 0 and all(np.array_equal(before[k], v) for k, v in agent.state_dict().items())
    assert on_disk(tmp_path) == ["mine.txt"]
    with pytest.raises(CheckpointError, match="exists and is not a directory"):
        train(trainer, agent, CheckpointManager(tmp_path / "mine.txt"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / INDEX).write_text(json.dumps({"format": "something else", "checkpoints": []}))
    with pytest.raises(CheckpointError, match="is not a marl_note checkpoint index"):
        train(trainer, agent, CheckpointManager(tmp_path / "other"))
    (tmp_path / "other" / INDEX).write_text(json.dumps({"format": "marl_note.checkpoint_manager/1", "checkpoints": [
        {"name": "../../escape", "role": "periodic", "episodes": 1, "metric": None, "params": False,
         "learners": [], "state": "deleting"}]}))
    with pytest.raises(CheckpointError, match="is not a checkpoint this manager writes"):
        train(trainer, agent, CheckpointManager(tmp_path / "other"))
    assert agent.agent_steps == 0


def test_a_failed_save_leaves_the_previous_checkpoints_intact_and_loadable(tmp_path, monkeypatch):
    import marl_note.trainers.run_state as run_state

    path = tmp_path / "ckpt"
    real = run_state.write_checkpoint
    calls = []

    def crashing_write(target, manifest, arrays):
        calls.append(target)
        if len(calls) == 4:  # the fourth checkpoint: half written, then the disk fills up / the process dies
            os.makedirs(target)
            with open(os.path.join(target, ".marl_note-ckpt-half"), "wb") as f:
                f.write(b"partial")
            shutil.copytree(path, tmp_path / "killed")  # the disk as a killed process would leave it
            raise OSError(28, "No space left on device")
        return real(target, manifest, arrays)

    monkeypatch.setattr(run_state, "write_checkpoint", crashing_write)
    trainer, agent = make(30)
    manager = CheckpointManager(path, save_freq=5, max_save_files=2)
    with pytest.raises(OSError, match="No space left"):
        train(trainer, agent, manager)
    monkeypatch.setattr(run_state, "write_checkpoint", real)
    assert [os.path.basename(c) for c in calls[1:3]] == [c["name"] for c in manager.checkpoints]
    assert on_disk(path) == sorted([INDEX, *(c["name"] for c in manager.checkpoints)])  # no partial folder
    for c in manager.checkpoints:
        load_run(c["path"], [fresh_agent()])

    # after a kill the index still marks the half-written checkpoint; the next run removes it first
    killed = tmp_path / "killed"
    entries = json.loads((killed / INDEX).read_text())["checkpoints"]
    assert [e["state"] for e in entries] == ["done", "done", "writing"]
    half = killed / entries[-1]["name"]
    assert os.listdir(half) == [".marl_note-ckpt-half"]
    resumed = CheckpointManager(killed, save_freq=5, max_save_files=2)
    trainer2, agent2 = make(5)
    resumed.on_train_begin(trainer2)
    assert not half.exists() and [c["name"] for c in resumed.checkpoints] == [e["name"] for e in entries[:2]]
    for c in resumed.checkpoints:
        load_run(c["path"], [fresh_agent()])


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL, and telling a running writer by its pid, are POSIX")
def test_a_killed_saves_temporaries_go_at_the_next_manager_or_save_a_live_saves_stay(tmp_path):
    path = tmp_path / "ckpt"
    trainer, agent = make(5)
    train(trainer, agent, CheckpointManager(path, save_freq=5))
    committed = [c["name"] for c in CheckpointManager(path).checkpoints]
    (path / ".marl_note-tmp-mine.txt").write_text("our prefix, but not a name we give temporary files")
    run_killed(KILLED_WRITE, path / INDEX)  # killed while it rewrote the index, as 4 kills in 12 were
    killed = [n for n in on_disk(path) if n.startswith(".marl_note-tmp-") and "mine" not in n]
    assert len(killed) == 1
    with paused_save(path / "reward.png", "file") as live:  # another process is writing here right now
        live_temp = sorted(set(on_disk(path)) - {*committed, *killed, INDEX, ".marl_note-tmp-mine.txt"})
        assert len(live_temp) == 1 and live_temp[0].startswith(".marl_note-tmp-")
        manager = CheckpointManager(path, save_freq=5)
        trainer2, agent2 = make(5)
        manager.on_train_begin(trainer2)
        assert on_disk(path) == sorted([*committed, INDEX, ".marl_note-tmp-mine.txt", *live_temp])
    assert live.returncode == 0 and (path / "reward.png").read_bytes() == b"written while paused"
    assert [c["name"] for c in manager.checkpoints] == committed

    class KilledWriterDuringTheRun:  # a process killed while it wrote here after this run had begun
        def __init__(self):
            self.left = None

        def on_collect_end(self, trainer, stats, episodes):
            if self.left is None:
                run_killed(KILLED_WRITE, path / "reward.png")
                self.left = [n for n in on_disk(path) if n.startswith(".marl_note-tmp-") and "mine" not in n]

    spawner = KilledWriterDuringTheRun()
    trainer2.train([agent2], learning_mask=[1], plot=False, progress=False, callbacks=[spawner, manager])
    assert len(spawner.left) == 1 and spawner.left[0] not in on_disk(path)  # the run's next save removed it
    assert [n for n in on_disk(path) if n.startswith(".marl_note-")] == [".marl_note-tmp-mine.txt"]
    assert (path / "reward.png").read_bytes() == b"written while paused"


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(save_freq=0), ValueError, "save_freq must be a positive integer"),
    (dict(save_freq=2.5), ValueError, "save_freq must be a positive integer"),
    (dict(save_freq=5, max_save_files=0), ValueError, "max_save_files must be a positive integer"),
    (dict(max_save_files=2), ValueError, "max_save_files limits the periodic checkpoints of save_freq"),
    (dict(save_best_only=True, save_top_k=3), ValueError, "same as save_top_k=1"),
    (dict(save_best_only=True, save_freq=10), ValueError, "save_freq would have no effect"),
    (dict(save_top_k=-1), ValueError, "save_top_k must be a positive integer"),
    (dict(save_last=False), ValueError, "would never save"),
    (dict(save_best_only=1), TypeError, "save_best_only must be True or False"),
    (dict(save_top_k=1, monitor="loss"), ValueError, "monitor must be one of"),
    (dict(save_top_k=1, mode="maximum"), ValueError, "mode must be 'max'"),
])
def test_arguments_are_checked_on_construction(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        CheckpointManager(tmp_path / "ckpt", **kwargs)
    with pytest.raises(ValueError, match="must be a directory"):
        CheckpointManager(tmp_path / "ckpt.zip")
