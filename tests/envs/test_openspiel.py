"""OpenSpiel games as PettingZoo envs through Shimmy (marl_note.envs.openspiel)."""
import subprocess
import sys

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")

from marl_note.envs import adapt, make_spec  # noqa: E402
from marl_note.envs.openspiel import openspiel_env  # noqa: E402


def _play(env, seed, rng):
    """One game through the adapter with uniformly random legal actions: the (seat, obs, mask) at each turn."""
    adapter = adapt(env)
    res = adapter.reset(seed=seed)
    seen, returns = [], dict.fromkeys(adapter.possible_agents, 0.0)
    while not res.episode_over:
        (agent,) = res.obs
        mask = res.masks[agent]
        seen.append((agent, res.obs[agent], mask))
        res = adapter.step({agent: int(rng.choice(np.flatnonzero(mask)))})
        for a, r in res.rewards.items():
            returns[a] += r
    return seen, returns


@pytest.mark.parametrize("name", ["kuhn_poker", "openspiel/leduc_poker"])
def test_spec_masks_and_zero_sum_rewards(name):
    env = openspiel_env(name)
    game = pyspiel.load_game(name.removeprefix("openspiel/"))
    spec = make_spec(adapt(env))
    assert spec.possible_agents == ("player_0", "player_1")
    assert spec.turn_based and spec.has_action_mask
    assert spec.observation_spaces["player_0"].shape == tuple(game.observation_tensor_shape())
    assert spec.action_spaces["player_1"].n == game.num_distinct_actions()
    rng = np.random.default_rng(0)
    for seed in range(5):
        seen, returns = _play(openspiel_env(name), seed, rng)
        assert seen and all(m.dtype == bool and m.any() for _, _, m in seen)
        # every game ends with chips won and lost (Shimmy alone truncated Kuhn after a bet, rewardless)
        assert sum(returns.values()) == pytest.approx(0.0) and all(r != 0 for r in returns.values())


def test_information_state_observation_is_the_perfect_recall_tensor():
    """With observation="information_state" each seat sees state.information_state_tensor(seat)."""
    env = openspiel_env("leduc_poker", observation="information_state")
    game = pyspiel.load_game("leduc_poker")
    shape = tuple(game.information_state_tensor_shape())
    assert shape != tuple(game.observation_tensor_shape())
    assert env.observation_space("player_0").shape == shape
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    for _ in env.agent_iter():
        obs, _, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        state = env.unwrapped.game_state
        seat = state.current_player()
        assert env.agent_selection == f"player_{seat}"
        assert obs.dtype == np.float64
        np.testing.assert_array_equal(obs, np.asarray(state.information_state_tensor(seat)).reshape(shape))
        env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))


def test_pyspiel_game_and_game_params_survive_reset():
    """Shimmy's reset reloads the game by name: the parameters given must be reloaded with it."""
    game = pyspiel.load_game("leduc_poker", {"suit_isomorphism": True})
    for env in (openspiel_env(game), openspiel_env("leduc_poker", suit_isomorphism=True)):
        env.reset(seed=0)
        assert env.unwrapped._env.get_parameters()["suit_isomorphism"] is True


@pytest.mark.parametrize("game, kwargs, words", [
    ("kuhn_poker", {"players": 3}, ["kuhn_poker", "two-player zero-sum"]),
    ("kuhn_poker(players=3)", {}, ["kuhn_poker", "two-player zero-sum"]),
    ("matrix_rps", {}, ["matrix_rps", "sequential"]),
    ("tic_tac_toe", {"observation": "information_state"}, ["tic_tac_toe", "information-state tensor"]),
    ("no_such_game", {}, ["no_such_game", "unknown"]),
    ("kuhn_poker", {"observation": "obs"}, ["observation must be one of"]),
])
def test_refusals_name_the_game(game, kwargs, words):
    with pytest.raises(ValueError) as info:
        openspiel_env(game, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_pyspiel_game_object_is_checked_too():
    with pytest.raises(ValueError, match="kuhn_poker"):
        openspiel_env(pyspiel.load_game("kuhn_poker", {"players": 3}))
    with pytest.raises(ValueError, match="parameters"):
        openspiel_env(pyspiel.load_game("kuhn_poker"), players=2)


def test_importing_the_envs_loads_neither_shimmy_nor_pyspiel():
    code = ("import sys, marl_note.envs, marl_note.envs.openspiel, marl_note.trainers, "
            "marl_note.trainers.exploitability; "
            "print(sorted(m for m in ('shimmy', 'pyspiel', 'open_spiel') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_env_pickles_with_its_observation_choice():
    import pickle

    env = openspiel_env("leduc_poker", observation="information_state")
    copy = pickle.loads(pickle.dumps(env))
    copy.reset(seed=1)
    assert copy.last()[0].shape == tuple(pyspiel.load_game("leduc_poker").information_state_tensor_shape())


def _deals(env, seed, n):
    """The cards dealt in ``n`` games: the first reset seeded, the others not (as the trainer's auto-reset)."""
    out = []
    for k in range(n):
        env.reset(seed=seed if k == 0 else None)
        out.append(str(env.unwrapped.game_state))
    return out


def test_unseeded_resets_continue_the_seeded_generator():
    """A seeded run is reproducible: Shimmy 2.0.1 drew a fresh OS-seeded generator on every reset()
    without a seed, so every game after the first was dealt differently in two runs with one seed."""
    first = _deals(openspiel_env("kuhn_poker"), 7, 30)
    assert _deals(openspiel_env("kuhn_poker"), 7, 30) == first
    assert _deals(openspiel_env("kuhn_poker"), 8, 30) != first
    env = openspiel_env("leduc_poker", observation="information_state")
    assert _deals(env, 3, 10) == _deals(env, 3, 10)  # reseeding restarts the sequence


def test_chance_outcomes_follow_their_probabilities():
    """Kuhn deals each of the 6 ordered pairs of distinct cards with probability 1/6."""
    env = openspiel_env("kuhn_poker")
    deals = _deals(env, 0, 3000)
    counts = {d: deals.count(d) for d in set(deals)}
    assert sorted(counts) == ["0 1", "0 2", "1 0", "1 2", "2 0", "2 1"]
    assert all(abs(c / 3000 - 1 / 6) < 0.03 for c in counts.values()), counts


@pytest.mark.parametrize("observation", ["observation", "information_state"])
def test_spaces_are_built_once_and_keep_the_game_shapes(observation):
    """Shimmy rebuilt both spaces on every step (most of a Kuhn episode's cost); they are built once now."""
    env = openspiel_env("leduc_poker", observation=observation)
    spaces = env.observation_space("player_1"), env.action_space("player_1")
    _deals(env, 0, 3)
    rng = np.random.default_rng(0)
    for _ in env.agent_iter():
        obs, _, term, trunc, info = env.last()
        env.step(None if term or trunc else int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert obs is None or obs.shape == spaces[0].shape
    assert (env.observation_space("player_1"), env.action_space("player_1")) == spaces
    assert env.observation_space("player_1") is spaces[0] and env.action_space("player_1") is spaces[1]


# --------------------------------------------------------------------------- cooperative games, every seat acting

HANABI = dict(players=2, colors=2, ranks=3, hand_size=2, max_information_tokens=3, max_life_tokens=1)


def test_cooperative_hanabi_every_seat_acts_and_only_the_seat_on_turn_has_a_choice():
    """Through the Parallel adapter: every step every seat acts; the seat on turn has exactly the game's
    legal actions, the other one only wait; every seat is paid the same and the rewards add up to the
    game's returns; games end as terminated, by themselves."""
    from marl_note.envs.openspiel import cooperative_parallel_env

    env = cooperative_parallel_env("hanabi", **HANABI)
    adapter = adapt(env)
    spec = make_spec(adapter)
    game = pyspiel.load_game("hanabi", HANABI)
    assert spec.possible_agents == ("player_0", "player_1") and not spec.turn_based and spec.has_action_mask
    assert spec.action_spaces["player_0"].n == game.num_distinct_actions() + 1 == env.wait + 1
    assert spec.observation_spaces["player_1"].shape == tuple(game.observation_tensor_shape())
    rng, paid = np.random.default_rng(0), 0
    for seed in range(20):
        res, total = adapter.reset(seed=seed), np.zeros(2)
        while not res.episode_over:
            state = env.game_state
            mover = state.current_player()
            assert sorted(res.obs) == ["player_0", "player_1"]
            for p, agent in enumerate(spec.possible_agents):
                legal = np.flatnonzero(res.masks[agent]).tolist()
                assert legal == (state.legal_actions(p) if p == mover else [env.wait])
                np.testing.assert_array_equal(res.obs[agent], np.asarray(state.observation_tensor(p), np.float32))
            res = adapter.step({a: int(rng.choice(np.flatnonzero(res.masks[a]))) for a in res.obs})
            assert res.rewards["player_0"] == res.rewards["player_1"]
            total += [res.rewards["player_0"], res.rewards["player_1"]]
            paid += res.rewards["player_0"] != 0
        assert all(res.terminated.values()) and not any(res.truncated.values())
        np.testing.assert_allclose(total, env.game_state.returns())
    assert paid > 0  # cards were played (and lost with the last life token): the rewards are not all zero


def test_cooperative_env_refuses_illegal_actions_and_other_games():
    import pickle

    from marl_note.envs.openspiel import cooperative_parallel_env

    env = cooperative_parallel_env("openspiel/hanabi", **HANABI)
    _, infos = env.reset(seed=1)
    legal = int(np.flatnonzero(infos["player_0"]["action_mask"])[0])
    before = str(env.game_state)
    with pytest.raises(ValueError, match=r"seat 'player_0' played 9, which is not legal \(on turn"):
        env.step({"player_0": env.wait, "player_1": env.wait})
    with pytest.raises(ValueError, match=r"seat 'player_1' played 0, which is not legal \(not on turn: its only "
                                         r"legal action is wait = 9"):
        env.step({"player_0": legal, "player_1": 0})
    with pytest.raises(ValueError, match=r"no action for \['player_1'\]"):
        env.step({"player_0": legal})
    assert str(env.game_state) == before  # refused before the game moved
    copy = pickle.loads(pickle.dumps(env))
    assert copy.reset(seed=1)[0]["player_0"].shape == env.observation_space("player_0").shape
    with pytest.raises(ValueError, match=r"'kuhn_poker\(\)' is not a fully cooperative game"):
        cooperative_parallel_env("kuhn_poker")
    with pytest.raises(ValueError, match="hanabi.*not a two-player zero-sum game.*cooperative_parallel_env plays it"):
        openspiel_env("hanabi", **HANABI)
    with pytest.raises(ValueError, match="could not be loaded"):
        cooperative_parallel_env("hanabi", no_such_param=1)
