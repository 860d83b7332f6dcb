"""Search opponents for tic-tac-toe and connect four, on the real PettingZoo envs."""
import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.contrib.board_games import AlphaBetaPlayer, PerfectTicTacToePlayer, WinOrBlockPlayer
from marl_note.trainers import DecentralizedTrainer


def position(make_env, moves):
    """The real env after ``moves``: (env, observation batch of one, mask batch of one)."""
    env = make_env()
    env.reset(seed=0)
    for a in moves:
        env.step(a)
    obs = env.observe(env.agent_selection)
    return env, obs["observation"][None], obs["action_mask"][None].astype(bool)


def reward_of_move(env, action):
    mover = env.agent_selection
    env.step(int(action))
    return env.rewards[mover]


@pytest.fixture(scope="module")
def ttt_trainer():
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_test_envs=8, seed=0)
    yield trainer
    trainer.close()


@pytest.fixture(scope="module")
def c4_trainer():
    trainer = DecentralizedTrainer(connect_four_v3.env, num_test_envs=8, seed=0)
    yield trainer
    trainer.close()


def test_perfect_tictactoe_never_loses_to_random_in_either_seat_and_draws_against_itself(ttt_trainer):
    result = ttt_trainer.test_against(PerfectTicTacToePlayer(seed=0), episodes=400)
    for seat in ("player_1", "player_2"):
        assert result["per_seat"][seat]["episodes"] == 200
        assert result["per_seat"][seat]["loss"] == 0.0
    assert result["per_seat"]["player_1"]["win"] > 0.9  # it also wins, not just draws
    selfplay = ttt_trainer.test([PerfectTicTacToePlayer(seed=1), PerfectTicTacToePlayer(seed=2)], episodes=40)
    assert np.all(selfplay["rewards"] == 0)


def test_perfect_tictactoe_blocks_and_converts_a_won_position():
    player = PerfectTicTacToePlayer(seed=0)
    _, obs, mask = position(tictactoe_v3.env, [0, 4, 1])  # X holds 0 and 1: O must take 2
    assert player.act(np.repeat(obs, 20, 0), np.repeat(mask, 20, 0)).tolist() == [2] * 20
    # X in a corner, O on the next edge: X has a forced win, and two perfect players play it out
    for seed in range(5):
        env, obs, mask = position(tictactoe_v3.env, [0, 1])
        players = [PerfectTicTacToePlayer(seed=seed), PerfectTicTacToePlayer(seed=seed + 10)]
        turn = 0
        while not any(env.terminations.values()):
            obs = env.observe(env.agent_selection)
            env.step(int(players[turn].act(obs["observation"][None], obs["action_mask"][None].astype(bool))[0]))
            turn ^= 1
        assert env.rewards["player_1"] == 1


@pytest.mark.parametrize("make_env, moves, win", [
    (connect_four_v3.env, [0, 6, 1, 6, 2, 5], 3),   # player_0 holds 0-1-2 on the bottom row
    (connect_four_v3.env, [6, 2, 0, 2, 0, 2, 1], 2),  # player_1 holds column 2 three high
    (tictactoe_v3.env, [0, 4, 1, 5], 2),            # X holds 0 and 1
])
def test_win_or_block_takes_a_win_in_one(make_env, moves, win):
    game = "tictactoe" if make_env is tictactoe_v3.env else "connect_four"
    env, obs, mask = position(make_env, moves)
    actions = WinOrBlockPlayer(game, seed=0).act(np.repeat(obs, 20, 0), np.repeat(mask, 20, 0))
    assert actions.tolist() == [win] * 20
    assert reward_of_move(env, actions[0]) == 1  # the real env agrees it won


@pytest.mark.parametrize("make_env, moves, block", [
    (connect_four_v3.env, [0, 6, 1, 6, 2], 3),        # player_1 to move, player_0 threatens column 3
    (tictactoe_v3.env, [0, 4, 1], 2),                # O to move, X threatens 2
])
def test_win_or_block_blocks_an_immediate_threat(make_env, moves, block):
    game = "tictactoe" if make_env is tictactoe_v3.env else "connect_four"
    env, obs, mask = position(make_env, moves)
    actions = WinOrBlockPlayer(game, seed=0).act(np.repeat(obs, 20, 0), np.repeat(mask, 20, 0))
    assert actions.tolist() == [block] * 20


def test_win_or_block_wins_rather_than_blocks():
    env, obs, mask = position(connect_four_v3.env, [4, 0, 5, 0, 6, 0])  # both threaten, player_0 to move
    actions = WinOrBlockPlayer(seed=0).act(np.repeat(obs, 20, 0), np.repeat(mask, 20, 0))
    assert actions.tolist() == [3] * 20 and reward_of_move(env, actions[0]) == 1


def test_alpha_beta_depth_one_takes_wins_and_depth_two_blocks():
    env, obs, mask = position(connect_four_v3.env, [0, 6, 1, 6, 2, 5])
    action = AlphaBetaPlayer(depth=1, seed=0).act(obs, mask)
    assert action.tolist() == [3] and reward_of_move(env, action[0]) == 1
    _, obs, mask = position(connect_four_v3.env, [0, 6, 1, 6, 2])
    assert AlphaBetaPlayer(depth=2, seed=0).act(np.repeat(obs, 10, 0), np.repeat(mask, 10, 0)).tolist() == [3] * 10


def test_alpha_beta_depth_two_beats_win_or_block_in_both_seats(c4_trainer):
    result = c4_trainer.test_against(AlphaBetaPlayer(depth=2, seed=0), opponent=WinOrBlockPlayer(seed=1),
                                     episodes=24)
    for seat in ("player_0", "player_1"):
        assert result["per_seat"][seat]["win"] >= 0.75, result["per_seat"]  # measured 1.0 over 40 games


def test_players_sit_in_any_seat_beside_a_random_agent(c4_trainer):
    random_player = RandomAgent(c4_trainer.action_space("player_0"), seed=3)
    result = c4_trainer.test([random_player, WinOrBlockPlayer(seed=0)], episodes=16)
    assert np.mean(result["rewards"][:, 1] > 0) >= 0.75


def test_same_seed_same_moves_and_other_seeds_differ():
    rng = np.random.default_rng(0)
    boards, masks = [], []
    for _ in range(12):
        env = connect_four_v3.env()
        env.reset(seed=0)
        for _ in range(rng.integers(0, 6) * 2):
            env.step(int(rng.choice(np.flatnonzero(env.observe(env.agent_selection)["action_mask"]))))
        obs = env.observe(env.agent_selection)
        boards.append(obs["observation"])
        masks.append(obs["action_mask"].astype(bool))
    obs, mask = np.stack(boards), np.stack(masks)
    for make in (lambda s: WinOrBlockPlayer(seed=s), lambda s: AlphaBetaPlayer(depth=2, seed=s)):
        runs = [make(7).act(obs, mask) for _ in range(2)]
        assert np.array_equal(runs[0], runs[1])
        others = [make(s).act(obs, mask) for s in range(8, 12)]
        assert any(not np.array_equal(runs[0], o) for o in others)
    empty = np.zeros((16, 3, 3, 2), np.int8)
    a, b = PerfectTicTacToePlayer(seed=5).act(empty), PerfectTicTacToePlayer(seed=5).act(empty)
    assert np.array_equal(a, b) and len(set(a.tolist())) > 1  # every opening draws: random among them


def test_bad_inputs_are_refused_with_a_clear_error():
    c4 = np.zeros((2, 6, 7, 2), np.int8)
    with pytest.raises(ValueError, match=r"shape \[batch, 6, 7, 2\].*got shape \[6, 7, 2\]"):
        WinOrBlockPlayer("connect_four").act(c4[0])
    with pytest.raises(ValueError, match=r"tictactoe needs .*\[batch, 3, 3, 2\].*\[2, 6, 7, 2\]"):
        PerfectTicTacToePlayer().act(c4)
    with pytest.raises(ValueError, match=r"connect_four needs .*got shape \[1, 3, 3, 2\]"):
        AlphaBetaPlayer(2).act(np.zeros((1, 3, 3, 2), np.int8))
    with pytest.raises(ValueError, match="action mask of shape \\[2, 7\\]"):
        AlphaBetaPlayer(2).act(c4, np.ones((2, 9), bool))
    full = c4.copy()
    full[0, :, 0, 0] = 1
    with pytest.raises(ValueError, match="allows action 0 in row 0.*full column"):
        WinOrBlockPlayer().act(full, np.ones((2, 7), bool))
    with pytest.raises(ValueError, match="no legal action"):
        WinOrBlockPlayer().act(c4, np.zeros((2, 7), bool))
    both = c4.copy()
    both[0, 5, 0] = 1
    with pytest.raises(ValueError, match="both players' planes"):
        WinOrBlockPlayer().act(both)
    for depth in (0, 1.5, True):
        with pytest.raises(ValueError, match="depth must be an int >= 1"):
            AlphaBetaPlayer(depth)
    with pytest.raises(ValueError, match="unknown board game 'chess'"):
        WinOrBlockPlayer("chess")
