"""The examples run end to end on tiny budgets, and their helper players do what they say."""
import importlib.util
import os

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_takes_wins_completes_four_in_a_row_and_otherwise_plays_legal_random_moves():
    c4 = load("connect_four_selfplay")
    assert c4.LINES.shape == (69, 4)  # 24 horizontal + 21 vertical + 2 * 12 diagonal lines
    player = c4.TakesWins(gym.spaces.Discrete(7), seed=0)
    boards = np.zeros((3, 6, 7, 2), np.int8)
    boards[0, 5, 0:3, 0] = 1  # own three on the bottom row: column 3 wins
    boards[0, 5, 4:6, 1] = 1
    boards[1, 3:6, 2, 0] = 1  # own three stacked in column 2: column 2 wins
    boards[2, 5, 0:3, 1] = 1  # only the opponent threatens: no win to take
    mask = np.ones((3, 7), bool)
    assert player.act(boards, mask)[:2].tolist() == [3, 2]
    mask[2] = [True, False, False, False, False, False, True]
    assert set(player.act(np.repeat(boards[2:], 50, 0), np.repeat(mask[2:], 50, 0)).tolist()) == {0, 6}


def test_connect_four_recipe_runs_end_to_end_on_a_tiny_budget():
    c4 = load("connect_four_selfplay")
    out = c4.train(episodes=48, seed=0, snapshot_every=16, progress=False, final_games=4, select_games=2)
    assert out["games"] >= 48 and set(out["final"]) == {"random", "win-or-block", "alpha-beta d2"}
    for seats in out["final"].values():
        assert set(seats) == {"player_0", "player_1"}
        assert all(r["win"] + r["draw"] + r["loss"] == pytest.approx(1.0) for r in seats.values())
    assert 0.0 <= out["best_score"][0] <= 1.0 and out["test_history"]  # the final weights were rated
    assert {"learner", "random", "takes_wins"} <= set(out["elo"])


def test_connect_four_ppo_with_search_opponents_runs_end_to_end_and_bad_choices_are_refused():
    c4 = load("connect_four_selfplay")
    out = c4.train(episodes=400, seed=0, snapshot_every=200, progress=False, final_games=2, select_games=2,
                   algo="ppo", opponents="search", fixed_fraction=0.5, self_play_fraction=0.2)  # 2 rollouts of 4096
    assert type(out["learner"]).__name__ == "PPO" and out["learner"].updates > 0
    assert {"learner", "takes_wins", "win-or-block", "alpha-beta d1"} <= set(out["elo"])
    assert "random" not in out["elo"]  # the search opponents replace the random one in the pool
    with pytest.raises(ValueError, match="algo must be"):
        c4.train(episodes=4, algo="sac")
    with pytest.raises(ValueError, match="opponents must be"):
        c4.train(episodes=4, opponents="strong")


def test_mirror_reflects_boards_actions_and_masks():
    from marl_note.types import Transitions
    c4 = load("connect_four_selfplay")
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 2, (5, 6, 7, 2)).astype(np.int8)
    mask = rng.random((5, 7)) < 0.5
    t = Transitions(obs=obs, act=rng.integers(0, 7, 5), rew=rng.normal(size=5), next_obs=obs[::-1].copy(),
                    terminated=np.zeros(5, bool), truncated=np.zeros(5, bool), mask=mask, next_mask=mask[::-1].copy())
    m = c4.mirror(t)
    assert np.array_equal(m.obs[:, :, 0], obs[:, :, 6]) and np.array_equal(m.act, 6 - t.act)
    assert np.array_equal(m.mask[:, 0], mask[:, 6]) and np.array_equal(m.next_mask[:, 6], t.next_mask[:, 0])
    back = c4.mirror(m)
    assert all(np.array_equal(getattr(back, f), getattr(t, f)) for f in ("obs", "next_obs", "act", "mask", "next_mask"))
    assert np.array_equal(m.rew, t.rew)


def _weights(agent):
    return {k: np.array(v) for k, v in agent.state_dict().items()}


def test_tictactoe_demo_is_deterministic_and_keeps_the_strongest_weights():
    ttt = load("tictactoe_selfplay")

    def run():
        learner, trainer, stats = ttt.train(episodes=64, seed=3, plot=None, progress=False, snapshot_every=32,
                                            select_games=2, test_freq=32, learning_starts=100)
        table = ttt.evaluate(trainer, learner, seed=3, games=2)
        trainer.close()
        return learner, stats, table

    first, stats, table = run()
    second, _, table2 = run()
    assert stats["num_gradient_steps"] > 0 and stats["strength"]["best_episode"] is not None
    a, b = _weights(first), _weights(second)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)  # same seed, same weights
    assert table == table2 and set(table) == {"random", "win-or-block", "perfect"}


def test_tictactoe_symmetries_map_moves_to_the_same_moves_on_transformed_boards():
    from pettingzoo.classic import tictactoe_v3

    from marl_note.types import Transitions
    ttt = load("tictactoe_selfplay")
    perms = {tuple(p) for p in ttt.PERMUTATIONS}
    assert len(perms) == 7 and tuple(range(9)) not in perms

    def play(moves):
        env = tictactoe_v3.env()
        env.reset()
        for a in moves:
            env.step(int(a))
        seen = env.observe(env.agent_selection)
        return seen["observation"][None], seen["action_mask"][None].astype(bool)

    moves, reply = [0, 4, 1], 2
    obs, mask = play(moves)
    t = Transitions(obs=obs, act=np.array([reply]), rew=np.zeros(1), next_obs=obs, terminated=np.zeros(1, bool),
                    truncated=np.zeros(1, bool), mask=mask, next_mask=mask)
    for k, sym in enumerate(ttt.symmetries(t)):
        inv = ttt.INVERSE[k]
        want_obs, want_mask = play(inv[moves])  # the same game played on the transformed board
        assert np.array_equal(sym.obs, want_obs) and np.array_equal(sym.mask, want_mask)
        assert sym.act.tolist() == [inv[reply]]
