"""The trainer's own plot (``plot=True``): titled with env, algorithm and seed; a self-play run draws no flat-0
training-reward panel (each failed on 40fe2fa: the title was "marl_note" alone, and self-play drew the mean
over both seats of a zero-sum game, 0, as one point at the first chunk, before the first test) but the
learner's own training return in each seat."""
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.trainers import DecentralizedTrainer, OpponentPool
from tests.trainers.metric_learner import learner_for

pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402


def _drawn(monkeypatch):
    """Keep every figure the trainer saves, to read its panels' lines back."""
    figures, save = [], Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def test_a_trainer_plot_is_titled_with_env_algorithm_and_seed(tmp_path):
    path = str(tmp_path / "run.png")
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=40, test_freq=6,
                                   episodes_per_train=6, episodes_per_test=2, seed=7, plot_path=path)
    trainer.train([learner_for(trainer)], learning_mask=[1], progress=False)
    with Image.open(path) as image:
        assert image.text.get("Title") == "marl_note: CartPole-v1, MetricLearner, seed 7"


def test_a_self_play_plot_draws_each_series_where_it_was_recorded_and_no_flat_zero_reward(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, update_freq=20, test_freq=10,
                                   episodes_per_train=30, episodes_per_test=2, seed=0,
                                   plot_path=str(tmp_path / "selfplay.png"))
    learner = learner_for(trainer, "player_1")
    pool = OpponentPool(learner, trainer.spec, snapshot_every=10, eval_episodes=2, seed=0)
    trainer.train([learner, learner], learning_mask=[1, 1], progress=False, matchmaker=pool, callbacks=[pool])
    assert trainer.run_state.history and "train_reward" not in trainer.run_state.series  # tested against a baseline
    # instead, the learner's own training return in each seat, from the first test (episode 10) on
    seat_series = {name: trainer.run_state.series[f"{name}/train_reward"].values() for name in ("player_1", "player_2")}
    assert all(points and points[0][0] >= 10 for points in seat_series.values()), seat_series
    returns = [(e, r) for e, r in zip(*seat_series.values())]  # the same chunks; each game pays +1/-1 or 0/0
    assert all(abs(a[1] + b[1]) < 1e-9 for a, b in returns), returns  # zero-sum: one seat's mean mirrors the other
    [fig] = figures
    assert fig.texts[0].get_text() == "marl_note: tictactoe_v3, MetricLearner, seed 0"
    recorded = trainer.run_state.all_series()
    titles = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        titles.append(ax.get_title())
        for line in ax.get_lines():
            label = line.get_label()
            points = recorded["test_metric" if label == "test reward metric" else label]
            assert list(line.get_xdata()) == [e for e, _ in points], label  # over the episodes it was recorded
            assert list(line.get_ydata()) == [v for _, v in points], label
    assert "training reward (last 100 episodes)" in titles  # the seats' lines, not the flat 0
    assert "callbacks (e.g. Elo)" in titles and "test reward metric" in titles
