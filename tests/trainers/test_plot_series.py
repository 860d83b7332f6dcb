"""The series a run records for its plot: what, how many points, bounded, saved and resumed."""
import json
import os
import shutil

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.agents.checkpoints import CheckpointError, read_checkpoint, write_checkpoint
from marl_note.trainers import DecentralizedTrainer, OpponentPool
from marl_note.trainers.series import Series
from tests.trainers.metric_learner import Count, learner_for


def cartpole(episodes=12, **kw):
    return DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=40, test_freq=6,
                                episodes_per_train=episodes, episodes_per_test=2, seed=0, **kw)


def test_a_series_keeps_at_most_max_points_each_the_mean_of_stride_records():
    s = Series("loss", max_points=8)
    values = np.arange(1, 1001, dtype=float)
    for episode, v in enumerate(values, start=1):
        s.add(episode, v)
    s.add(1001, float("nan"))  # not recorded
    pts = s.values()
    assert s.stride == 128 and len(s.points) == 7 and len(pts) == 8  # 7 full buckets and the partial one
    for k, (episode, mean) in enumerate(s.points):  # bucket k: records k*stride+1 .. (k+1)*stride
        assert episode == (k + 1) * 128 and mean == pytest.approx(values[k * 128:(k + 1) * 128].mean())
    assert pts[-1] == (1000, pytest.approx(values[896:].mean()))
    with pytest.raises(ValueError, match="even number"):
        Series("loss", max_points=7)


def test_a_short_train_records_every_series_once_per_chunk_and_plots_them(tmp_path):
    pytest.importorskip("matplotlib")
    path = str(tmp_path / "plots" / "run.png")
    trainer = cartpole(plot_path=path)
    count = Count()
    stats = trainer.train([learner_for(trainer)], learning_mask=[1], progress=False, callbacks=[count])
    series = trainer.run_state.all_series()
    assert set(series) == {"test_metric", "train_reward", "loss", "eps", "gradient_steps", "batch_size",
                           "gradient_steps_per_env_step"}
    assert len(series["test_metric"]) == count.tests >= 2
    for name in ("loss", "eps", "gradient_steps", "batch_size"):  # one update per chunk
        assert len(series[name]) == count.chunks, name
    assert 1 <= len(series["train_reward"]) <= count.chunks
    assert [v for _, v in series["loss"]] == [1.0 / k for k in range(1, count.chunks + 1)]
    assert {v for _, v in series["batch_size"]} == {64.0}
    episodes = [e for e, _ in series["loss"]]
    assert episodes == sorted(episodes) and episodes[-1] == stats["num_collected_episodes"]
    assert {s.panel for s in trainer.run_state.series.values()} == {"reward", "loss", "exploration", "knobs"}
    # one figure, returned in the statistics; a two-column grid of the five panels
    assert stats["plot_path"] == path and os.path.getsize(path) > 0
    from PIL import Image
    with Image.open(path) as im:
        assert im.size == (1100, 960)


def test_several_learners_are_named_by_their_seats_and_elo_is_recorded(tmp_path):
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, update_freq=20, test_freq=6,
                                   episodes_per_train=6, episodes_per_test=2, seed=0)
    a, b = learner_for(trainer, "player_1"), learner_for(trainer, "player_2", seed=1)
    trainer.train([a, b], learning_mask=[1, 1], plot=False, progress=False, baseline=None)
    names = set(trainer.run_state.series)
    assert {"player_1/loss", "player_2/loss", "player_1/eps", "player_2/eps", "batch_size"} <= names
    assert "loss" not in names

    learner = learner_for(trainer, "player_1")
    pool = OpponentPool(learner, trainer.spec, snapshot_every=6, eval_episodes=2, seed=0)
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False, matchmaker=pool,
                          callbacks=[pool])
    elo = trainer.run_state.series["learner Elo"]
    assert elo.panel == "callbacks" and elo.values() == [(e, r["learner"]) for e, r in stats["elo_history"]]
    assert "loss" in trainer.run_state.series  # one learner in both seats: no seat prefix


def _edit_counters(path, edit):
    manifest, arrays = read_checkpoint(path)
    edit(manifest["counters"])
    for key in ("format", "arrays", "checksum", "arrays_sha256", "arrays_file"):
        manifest.pop(key, None)
    write_checkpoint(path, manifest, arrays)


def test_series_are_saved_and_resumed_and_old_checkpoints_without_them_still_resume(tmp_path):
    path = str(tmp_path / "run")
    first = cartpole(6)
    learner = learner_for(first)
    first.train([learner], learning_mask=[1], plot=False, progress=False, checkpoint_path=path)
    saved = first.run_state.all_series()
    assert read_checkpoint(path)[0]["counters"]["series"]["loss"]["points"]

    again = cartpole(12)
    again.train([learner_for(again)], learning_mask=[1], plot=False, progress=False, resume_from=path)
    resumed = again.run_state.all_series()
    for name, points in saved.items():  # the saved points come first, then the run goes on
        assert resumed[name][:len(points)] == points and len(resumed[name]) > len(points), name

    # a checkpoint written before runs recorded series (no "series" counter) resumes with empty series
    old = str(tmp_path / "old")
    shutil.copytree(path, old)
    _edit_counters(old, lambda counters: counters.pop("series"))
    assert "series" not in json.loads(open(os.path.join(old, "manifest.json")).read())["counters"]
    third = cartpole(12)
    count = Count()
    third.train([learner_for(third)], learning_mask=[1], plot=False, progress=False, resume_from=old,
                callbacks=[count])
    assert len(third.run_state.series["loss"].values()) == count.chunks  # only this run's updates
    assert third.run_state.history[:len(saved["test_metric"])] == saved["test_metric"]

    # a damaged series is refused, naming it, before the agent is touched
    bad = str(tmp_path / "bad")
    shutil.copytree(path, bad)
    _edit_counters(bad, lambda counters: counters["series"]["loss"].update(stride=0))
    fourth = cartpole(12)
    fresh = learner_for(fourth)
    with pytest.raises(CheckpointError, match="series 'loss': stride must be an integer >= 1"):
        fourth.train([fresh], learning_mask=[1], plot=False, progress=False, resume_from=bad)
    assert fresh.updates == 0
