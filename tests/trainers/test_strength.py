"""Strength against search players and KeepStrongest, on real tic-tac-toe games."""
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.contrib.board_games import PerfectTicTacToePlayer, WinOrBlockPlayer
from marl_note.trainers import DecentralizedTrainer, KeepStrongest, strength, strength_score


class SwitchPlayer:
    """Plays perfectly while ``mode`` is 0 and the first legal move while it is 1; ``mode`` is its state."""

    def __init__(self):
        self.perfect = PerfectTicTacToePlayer(seed=0)
        self.mode = np.zeros(1)

    def act(self, obs, mask=None, explore=False):
        if self.mode[0] == 0:
            return self.perfect.act(obs, mask)
        return np.asarray([int(np.flatnonzero(m)[0]) for m in mask], np.int64)

    def state_dict(self):
        return {"mode": self.mode.copy()}

    def load_state_dict(self, state):
        self.mode = np.array(state["mode"], copy=True)


def _trainer(**kw):
    return DecentralizedTrainer(tictactoe_v3.env, num_test_envs=4, seed=0, **kw)


def test_strength_scores_every_seat_against_every_opponent():
    trainer = _trainer()
    opponents = {"win-or-block": WinOrBlockPlayer("tictactoe", seed=1), "perfect": PerfectTicTacToePlayer(seed=2)}
    perfect = strength(trainer, PerfectTicTacToePlayer(seed=3), opponents, games=8)
    assert set(perfect) == {"win-or-block", "perfect"} and set(perfect["perfect"]) == {"player_1", "player_2"}
    assert all(row["loss"] == 0 and row["episodes"] == 8 for seats in perfect.values() for row in seats.values())
    assert strength_score(perfect)[0] == 0.5  # it draws the perfect player, never worse
    weak = strength(trainer, RandomAgent(trainer.action_space("player_1"), seed=4), opponents, games=8)
    assert strength_score(weak) < strength_score(perfect)
    row = weak["perfect"]["player_2"]
    assert row["score"] == pytest.approx(row["win"] + 0.5 * row["draw"])
    with pytest.raises(ValueError, match="non-empty"):
        strength(trainer, weak, {}, games=8)
    with pytest.raises(TypeError, match="opponent 'x'"):
        KeepStrongest(SwitchPlayer(), {"x": object()})
    with pytest.raises(ValueError, match="games must be a positive integer"):
        KeepStrongest(SwitchPlayer(), opponents, games=0)
    with pytest.raises(TypeError, match="save_param"):
        KeepStrongest(SwitchPlayer(), opponents, path="somewhere")
    trainer.close()


def test_keep_strongest_keeps_the_best_weights_and_restores_them():
    trainer = _trainer()
    player = SwitchPlayer()
    keep = KeepStrongest(player, {"perfect": PerfectTicTacToePlayer(seed=1)}, games=4)
    assert keep.measure(trainer, 100) == (0.5, 0.5)  # perfect play: kept
    player.mode[0] = 1  # now it plays badly: measured, not kept
    worse = keep.measure(trainer, 200)
    assert worse < (0.5, 0.5) and keep.best_episode == 100
    out = {"num_collected_episodes": 300}
    keep.on_train_end(trainer, out)  # the final weights (still bad) are measured, then the best come back
    assert player.mode[0] == 0 and [e for e, *_ in keep.history] == [100, 200, 300]
    assert out["strength"]["best_score"] == (0.5, 0.5) and out["strength"]["best_episode"] == 100
    trainer.close()


def test_keep_strongest_in_a_real_run_restores_and_saves_the_kept_weights(tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    from marl_note.agents.torch import DQN

    trainer = _trainer(num_train_envs=4, test_freq=20, episodes_per_train=60, episodes_per_test=2, update_freq=40)
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0,
                  learning_starts=50)
    keep = KeepStrongest(learner, {"win-or-block": WinOrBlockPlayer("tictactoe", seed=1),
                                   "perfect": PerfectTicTacToePlayer(seed=2)}, games=4, path=str(tmp_path / "best"))
    stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False, callbacks=[keep])
    assert len(keep.history) >= 3 and stats["strength"]["best_score"] == max((w, m) for _, w, m in keep.history)
    state = learner.state_dict()
    assert all(np.array_equal(state[k], v) for k, v in keep.best_params.items())  # the kept weights are back
    saved = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=1)
    saved.restore_param(str(tmp_path / "best"))
    assert all(np.array_equal(saved.state_dict()[k], v) for k, v in keep.best_params.items())
    trainer.close()
