"""AlphaZero: the PUCT search on real tic-tac-toe positions, the self-play targets, both backends at
parity, save/restore, a short self-play run through the trainer, and the refusals."""
import copy
import importlib

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import rps_v2, tictactoe_v3

from marl_note.contrib.alphazero.mcts import MCTS, BoardSimulator, EnvSimulator
from marl_note.trainers import DecentralizedTrainer
from marl_note.types import Transitions

TTT_OBS = gym.spaces.Box(0, 1, (3, 3, 2), np.int8)
TTT_ACT = gym.spaces.Discrete(9)
SMALL = dict(hidden_sizes=(16,), num_simulations=16)


def uniform(obs, legal):
    return legal / legal.sum(axis=1, keepdims=True), np.zeros(len(obs))


def board(cells):
    """A tic-tac-toe position for the player to move from a string: x own, o the opponent's, . empty."""
    return np.array([{"x": 1, "o": -1, ".": 0}[c] for c in cells], np.int8)


def observation(boards):
    return BoardSimulator("tictactoe").encode(list(boards))


@pytest.fixture(params=["torch", "tf"])
def AlphaZero(request):
    pytest.importorskip("torch" if request.param == "torch" else "tensorflow")
    return importlib.import_module(f"marl_note.agents.{request.param}").AlphaZero


def backends():
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    return importlib.import_module("marl_note.agents.torch").AlphaZero, importlib.import_module(
        "marl_note.agents.tf").AlphaZero


# -- the search ------------------------------------------------------------------------------------
def test_search_with_a_uniform_network_takes_the_win_and_blocks_the_loss():
    win = board("xx.oo....")      # own two on top: 2 wins at once
    block = board("oo.x.....")    # the opponent threatens 2 and we have no win: only 2 does not lose
    visits = MCTS(BoardSimulator("tictactoe"), uniform, num_simulations=400, seed=0).search([win, block])
    assert visits.argmax(axis=1).tolist() == [2, 2]


def test_the_env_copy_simulator_finds_the_same_win_and_leaves_the_env_alone():
    env = tictactoe_v3.env()
    env.reset(seed=0)
    for action in (0, 3, 1, 4):  # player_1 holds 0 and 1, player_2 holds 3 and 4; player_1 to move
        env.step(action)
    before = copy.deepcopy(env.board.squares) if hasattr(env, "board") else None
    sim = EnvSimulator(env)
    visits = MCTS(sim, uniform, num_simulations=100, seed=0).search([env])
    assert int(visits[0].argmax()) == 2
    if before is not None:
        assert env.board.squares == before
    assert env.agent_selection == "player_1" and not any(env.terminations.values())


def test_root_visits_sum_to_the_simulations_for_every_position_of_a_batch():
    positions = [board("........."), board("x...o...."), board("xo.ox.x.o")]
    for explore in (False, True):
        visits = MCTS(BoardSimulator("tictactoe"), uniform, num_simulations=37, seed=1).search(positions, explore)
        assert visits.sum(axis=1).tolist() == [37, 37, 37]
        assert (visits[2][positions[2] != 0] == 0).all()  # no visit to an occupied cell


def test_dirichlet_noise_only_when_exploring():
    empty = [board(".........")]
    mcts = MCTS(BoardSimulator("tictactoe"), uniform, num_simulations=20, seed=3)
    state = copy.deepcopy(mcts.rng.bit_generator.state)
    greedy = [mcts.search(empty, explore=False) for _ in range(3)]
    assert mcts.rng.bit_generator.state == state  # no noise drawn
    assert all(np.array_equal(greedy[0], g) for g in greedy)
    noisy = [mcts.search(empty, explore=True) for _ in range(3)]
    assert mcts.rng.bit_generator.state != state
    assert not all(np.array_equal(noisy[0], g) for g in noisy)
    off = MCTS(BoardSimulator("tictactoe"), uniform, num_simulations=20, dirichlet_epsilon=0.0, seed=3)
    assert np.array_equal(off.search(empty, explore=True), greedy[0])


# -- the agent -------------------------------------------------------------------------------------
def test_self_play_targets_get_the_outcome_of_their_seat_at_the_episode_end(AlphaZero):
    agent = AlphaZero(TTT_OBS, TTT_ACT, temperature_moves=0, seed=0, **SMALL)
    positions = [board("........."), board("x...o....")]
    obs = observation(positions)
    mask = np.stack([p == 0 for p in positions])
    acts = agent.act(obs, mask, explore=True)
    assert len(agent.replay) == 0

    def rows(k, rew, terminated, truncated):
        return Transitions(obs=obs[k:k + 1], act=acts[k:k + 1], rew=np.array([rew], np.float32),
                           next_obs=obs[k:k + 1], terminated=np.array([terminated]),
                           truncated=np.array([truncated]), mask=mask[k:k + 1], stream=np.array([k]))

    agent.observe(rows(0, 1.0, True, False))   # stream 0 ends with a win
    agent.observe(rows(1, 0.0, False, True))   # stream 1 is cut off: no outcome, nothing stored
    assert len(agent.replay) == 1 and agent.replay.z[0] == 1.0
    assert np.isclose(agent.replay.pi[0].sum(), 1.0) and agent.replay.pi[0][~mask[0]].sum() == 0
    assert agent.agent_steps == 2


def test_moves_drawn_in_proportion_to_visits_on_a_batch_of_boards(AlphaZero):
    # the draw once took float32 visit shares, whose sum can miss 1 by more than the draw allows
    agent = AlphaZero(gym.spaces.Box(0, 1, (6, 7, 2), np.int8), gym.spaces.Discrete(7), hidden_sizes=(256, 256),
                      num_simulations=50, seed=0)
    obs, mask = np.zeros((16, 6, 7, 2), np.int8), np.ones((16, 7), bool)
    for _ in range(3):
        acts = agent.act(obs, mask, explore=True)
        assert acts.shape == (16,) and ((0 <= acts) & (acts < 7)).all()
    assert len(set(acts.tolist())) > 1  # sampled, not the argmax of one shared search


def test_mirror_stores_each_position_and_its_mirror_image(AlphaZero):
    agent = AlphaZero(TTT_OBS, TTT_ACT, temperature_moves=0, mirror=True, seed=0, **SMALL)
    position = board("x...o.o..")
    obs, mask = observation([position]), (position == 0)[None]
    act = agent.act(obs, mask, explore=True)
    agent.observe(Transitions(obs=obs, act=act, rew=np.array([-1.0]), next_obs=obs, terminated=np.array([True]),
                              truncated=np.array([False]), mask=mask, stream=np.array([0])))
    assert len(agent.replay) == 2 and agent.replay.z[:2].tolist() == [-1.0, -1.0]
    mirrored = observation([position.reshape(3, 3)[:, ::-1].reshape(-1)]).reshape(-1)
    np.testing.assert_array_equal(agent.replay.obs[1], mirrored)
    np.testing.assert_array_equal(agent.replay.pi[1].reshape(3, 3), agent.replay.pi[0].reshape(3, 3)[:, ::-1])
    np.testing.assert_array_equal(agent.replay.legal[1], mirrored.reshape(9, 2).sum(1) == 0)


def test_one_train_step_is_the_same_in_both_backends():
    TorchAZ, TFAZ = backends()
    rng = np.random.default_rng(0)
    legal = rng.random((32, 9)) < 0.6
    legal[:, 0] = True
    pi = rng.random((32, 9)) * legal
    arrays = {"obs": rng.integers(0, 2, (32, 18)).astype(np.float32), "legal": legal,
              "pi": (pi / pi.sum(1, keepdims=True)).astype(np.float32),
              "z": rng.choice([-1.0, 0.0, 1.0], 32).astype(np.float32)}
    agents = [cls(TTT_OBS, TTT_ACT, seed=7, **SMALL) for cls in (TorchAZ, TFAZ)]
    first, second = agents
    theirs = second.state_dict()
    assert all(np.array_equal(v, theirs[k]) for k, v in first.state_dict().items()
               if k.startswith("net."))
    metrics = [a.learn(arrays) for a in agents]
    for key in ("loss", "policy_loss", "value_loss"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-5)
    after = second.state_dict()
    for k, v in first.state_dict().items():
        if k.startswith("net."):
            np.testing.assert_allclose(v, after[k], atol=1e-6, err_msg=k)
    obs = observation([board("x...o...."), board(".........")])
    for out_a, out_b in zip(first.predict(obs), second.predict(obs)):
        np.testing.assert_allclose(out_a, out_b, atol=1e-5)


def test_a_conv_torso_trains_at_parity_and_acts_like_the_framework():
    TorchAZ, TFAZ = backends()
    c4 = gym.spaces.Box(0, 1, (6, 7, 2), np.int8)
    options = dict(hidden_sizes=(16,), torso="conv", conv_layers=((4, 3, 1, 1),), num_simulations=8, mirror=True)
    agents = [cls(c4, gym.spaces.Discrete(7), seed=3, **options) for cls in (TorchAZ, TFAZ)]
    assert agents[0].cfg.torso == "conv" and "net.trunk.conv.0.weight" in agents[0].state_dict()
    rng = np.random.default_rng(1)
    obs = (rng.random((8, 6, 7, 2)) < 0.2).astype(np.float32)
    arrays = {"obs": obs, "legal": np.ones((8, 7), bool), "pi": np.full((8, 7), 1 / 7, np.float32),
              "z": rng.choice([-1.0, 1.0], 8).astype(np.float32)}
    losses = [a.learn(arrays)["loss"] for a in agents]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    theirs = agents[1].state_dict()
    for k, v in agents[0].state_dict().items():
        if k.startswith("net."):
            np.testing.assert_allclose(v, theirs[k], atol=1e-5, err_msg=k)
    boards = np.zeros((2, 6, 7, 2), np.int8)
    boards[0, 5, :3, 0] = 1
    numpy_out = agents[1].predict(boards)  # TF acts through the numpy copy, conv included
    framework = agents[1].nets.predict(agents[1].encoder(boards))
    np.testing.assert_allclose(numpy_out[0], framework[:, :-1], atol=1e-5)
    agents[0].act(boards, np.ones((2, 7), bool), explore=True)
    agents[0].observe(Transitions(obs=boards, act=np.zeros(2, int), rew=np.array([1.0, -1.0]), next_obs=boards,
                                  terminated=np.ones(2, bool), truncated=np.zeros(2, bool), mask=np.ones((2, 7), bool),
                                  stream=np.arange(2)))
    assert agents[0].replay.obs.shape[1:] == (6, 7, 2) and len(agents[0].replay) == 4


def test_save_and_restore_round_trip_across_backends(tmp_path):
    TorchAZ, TFAZ = backends()
    agent = TorchAZ(TTT_OBS, TTT_ACT, seed=1, learning_starts=1, **SMALL)
    agent.replay.add(np.ones((3, 18)), np.ones((3, 9), bool), np.full((3, 9), 1 / 9), np.array([1.0, -1.0, 0.0]))
    agent.learn(agent.replay.sample(3, np.random.default_rng(0)))
    path = agent.save(tmp_path / "az", include_replay=True)
    obs = observation([board("x...o....")])
    mask = obs.sum(-1).reshape(1, 9) == 0
    for cls in (TorchAZ, TFAZ):
        back = cls.restore(path)
        assert back.cfg == agent.cfg and back.updates == 1 and len(back.replay) == 3
        np.testing.assert_allclose(back.predict(obs)[0], agent.predict(obs)[0], atol=1e-6)
        assert back.act(obs, mask).tolist() == agent.act(obs, mask).tolist()


def test_a_short_self_play_run_through_the_trainer(AlphaZero):
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=1, update_freq=20,
                                   test_freq=6, episodes_per_train=6, episodes_per_test=2, batch_size=16, seed=0)
    try:
        az = AlphaZero(trainer.observation_space("player_1"), trainer.action_space("player_1"),
                       hidden_sizes=(16,), num_simulations=4, learning_starts=16, seed=0)
        out = trainer.train([az, az], learning_mask=[1, 1], plot=False, progress=False)
    finally:
        trainer.close()
    assert out["num_collected_episodes"] >= 6
    assert len(az.replay) >= 5 * 6 and az.updates > 0   # every move of every finished game is a position
    z = az.replay.z[:len(az.replay)]
    assert set(np.unique(z)) <= {-1.0, 0.0, 1.0}
    assert abs(z.sum()) <= len(z)


def test_the_network_player_plays_the_policy_head_without_search(AlphaZero):
    from marl_note.agents import RandomAgent
    from marl_note.trainers import strength

    agent = AlphaZero(TTT_OBS, TTT_ACT, seed=0, **SMALL)
    player = agent.network_player(seed=1)
    rng = np.random.default_rng(0)
    boards = rng.integers(-1, 2, (64, 9)).astype(np.int8)
    obs = observation(boards)
    mask = boards == 0
    mask[~mask.any(axis=1), 0] = True  # a legal move in every row
    logits, _ = agent.predict(obs)
    greedy = player.act(obs, mask)
    np.testing.assert_array_equal(greedy, np.where(mask, logits, -np.inf).argmax(axis=1))  # no search: the head
    drawn = np.stack([player.act(obs, mask, explore=True) for _ in range(20)])
    assert mask[np.arange(64), drawn].all() and len(np.unique(drawn[:, 0])) > 1  # legal, and sampled
    # the player reads the agent's weights at every call: new weights show at once
    agent.load_state_dict({k: (-v if k.startswith("net.pi") else v) for k, v in agent.state_dict().items()})
    assert (player.act(obs, mask) != greedy).any()
    with pytest.raises(ValueError, match="needs the action mask"):
        player.act(obs)
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_test_envs=2, seed=0)
    try:  # a player for the trainer's matches like any other agent
        table = strength(trainer, player, {"random": RandomAgent(TTT_ACT, seed=0)}, games=4)
    finally:
        trainer.close()
    assert set(table["random"]) == {"player_1", "player_2"}


# -- refusals --------------------------------------------------------------------------------------
def test_bad_input_is_refused_with_a_clear_message(AlphaZero):
    with pytest.raises(ValueError, match="two-player, alternating, zero-sum board games"):
        AlphaZero(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    trainer = DecentralizedTrainer(rps_v2.parallel_env, num_train_envs=1, num_test_envs=1, seed=0)
    try:  # simultaneous moves: its observation is no board to search from
        with pytest.raises(ValueError, match="got Discrete"):
            AlphaZero(trainer.observation_space("player_0"), trainer.action_space("player_0"), seed=0)
    finally:
        trainer.close()
    agent = AlphaZero(TTT_OBS, TTT_ACT, seed=0, **SMALL)
    obs = observation([board(".........")])
    with pytest.raises(ValueError, match="needs the action mask of a turn-based env"):
        agent.act(obs)
    bad_mask = np.ones((1, 9), bool)
    obs2 = observation([board("x........")])
    with pytest.raises(ValueError, match="action mask differs from the legal moves"):
        agent.act(obs2, bad_mask)
    with pytest.raises(ValueError, match="two-player turn-based"):
        EnvSimulator(rps_v2.parallel_env())  # simultaneous moves
    rps = rps_v2.env()
    rps.reset(seed=0)
    with pytest.raises(ValueError, match="needs dict observations with 'action_mask'"):
        EnvSimulator(rps)
