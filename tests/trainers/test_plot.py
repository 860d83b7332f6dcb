"""visualize_reward / visualize_loss / visualize_reward_loss: PNG files, shown only when interactive."""
import os

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")  # never open a window (or block) in tests, whatever the machine has
from PIL import Image  # noqa: E402

from marl_note.compat.visualize import visualize_loss, visualize_reward, visualize_reward_loss  # noqa: E402
from marl_note.trainers import DecentralizedTrainer, plot  # noqa: E402
from tests.trainers.metric_learner import learner_for  # noqa: E402


def png_size(path):
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size


def test_visualize_reward_keeps_its_history_signature(tmp_path):
    path = visualize_reward([(10, 0.5), (20, 0.8)], str(tmp_path / "reward.png"))
    assert path == str(tmp_path / "reward.png") and png_size(path) == (600, 400)


def test_visualize_functions_plot_a_trained_run(tmp_path, monkeypatch):
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=40, test_freq=4,
                                   episodes_per_train=8, episodes_per_test=2, seed=0)
    with pytest.raises(ValueError, match="no run to plot yet: call train"):
        visualize_loss(trainer)
    trainer.train([learner_for(trainer)], learning_mask=[1], plot=False, progress=False)
    monkeypatch.chdir(tmp_path)  # default paths are under runs/
    loss = visualize_loss(trainer)
    reward = visualize_reward(trainer)
    both = visualize_reward_loss(trainer.run_state, str(tmp_path / "both.png"))
    assert os.path.dirname(loss) == os.path.dirname(reward) == str(tmp_path / "runs")
    assert os.path.basename(loss).startswith("loss_") and os.path.basename(reward).startswith("reward_")
    assert png_size(loss) == (600, 400)  # one panel: the loss
    assert png_size(reward) == (1100, 320)  # two: test metric and training reward
    assert png_size(both) == (1100, 640)  # three
    series = {"test_metric": [(4, 10.0)], "player_1/loss": [(1, 2.0), (2, 1.0)], "player_2/loss": [(2, 3.0)]}
    assert png_size(visualize_loss(series, str(tmp_path / "dict.png"))) == (600, 400)


def test_visualize_refuses_bad_input_before_drawing(tmp_path):
    with pytest.raises(ValueError, match="must end in .png"):
        visualize_reward([(1, 1.0)], str(tmp_path / "reward.jpg"))
    with pytest.raises(ValueError, match="no loss recorded yet"):
        visualize_loss({"test_metric": [(1, 1.0)]}, str(tmp_path / "loss.png"))
    with pytest.raises(TypeError, match="cannot plot a int"):
        visualize_loss(3, str(tmp_path / "loss.png"))
    with pytest.raises(TypeError, match="series 'loss' must be a list of"):
        visualize_loss({"loss": [1, 2]}, str(tmp_path / "loss.png"))
    with pytest.raises(ValueError, match="must end in .png"):
        DecentralizedTrainer("CartPole-v1", plot_path=str(tmp_path / "reward.svg"))
    assert os.listdir(tmp_path) == []


def test_a_plot_is_shown_only_with_an_interactive_backend(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(len(plt.get_fignums())))
    visualize_reward([(1, 1.0)], str(tmp_path / "a.png"))  # Agg: written, not shown
    assert shown == []
    monkeypatch.setattr(plot, "_interactive", lambda: True)
    visualize_reward([(1, 1.0)], str(tmp_path / "b.png"))
    assert shown == [1] and plt.get_fignums() == []  # shown once, then closed
    visualize_reward([(1, 1.0)], str(tmp_path / "c.png"), show=False)
    assert shown == [1] and sorted(os.listdir(tmp_path)) == ["a.png", "b.png", "c.png"]
