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
