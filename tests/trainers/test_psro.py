"""PSRO: exact payoffs and reach-weighted mixtures against OpenSpiel's own code, the loop, checkpoints."""
import math

import gymnasium as gym
import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")

from open_spiel.python import policy as os_policy  # noqa: E402
from open_spiel.python.algorithms import expected_game_score, policy_aggregator  # noqa: E402
from open_spiel.python.algorithms import exploitability as os_exploitability  # noqa: E402

from marl_note.agents.base import RandomAgent  # noqa: E402
from marl_note.envs.openspiel import openspiel_env  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402
from marl_note.trainers.exploitability import tabular_policy  # noqa: E402
from marl_note.trainers.psro import PSRO, exact_payoffs, load_psro, mixture_policy  # noqa: E402


def random_policies(game, n, seed):
    """``n`` TabularPolicies with random (Dirichlet) rows over the legal actions."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = os_policy.TabularPolicy(game)
        raw = rng.dirichlet(np.ones(p.action_probability_array.shape[1]), size=len(p.states)) * p.legal_actions_mask
        p.action_probability_array[:] = raw / raw.sum(axis=1, keepdims=True)
        out.append(p)
    return out


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_exact_payoffs_are_openspiels_policy_value(name):
    game = pyspiel.load_game(name)
    policies = random_policies(game, 3 if name == "kuhn_poker" else 2, seed=1)
    values = exact_payoffs(policies, game)
    root = game.new_initial_state()
    for i, a in enumerate(policies):
        for j, b in enumerate(policies):
            assert values[i, j] == pytest.approx(expected_game_score.policy_value(root, [a, b])[0], abs=1e-9)


def test_mixture_is_reach_weighted_like_openspiels_policy_aggregator():
    game = pyspiel.load_game("kuhn_poker")
    policies = random_policies(game, 3, seed=2)
    weights = np.array([0.5, 0.3, 0.2])
    ours = mixture_policy(policies, weights, game)
    theirs = policy_aggregator.PolicyAggregator(game).aggregate([0, 1], [policies, policies], [list(weights)] * 2)
    for state in ours.states:
        expected = theirs.action_probabilities(state)
        row = ours.action_probability_array[ours.state_index(state)]
        for action, p in expected.items():
            assert row[action] == pytest.approx(p, abs=1e-9)
    assert os_exploitability.nash_conv(game, ours) == pytest.approx(os_exploitability.nash_conv(game, theirs),
                                                                    abs=1e-9)
    # and not the per-information-state average, which is a different (here more exploitable) policy
    average = policies[0].__copy__(copy_action_probability_array=False)
    average.action_probability_array = np.tensordot(weights, np.stack([p.action_probability_array for p in policies]),
                                                    axes=1)
    assert abs(os_exploitability.nash_conv(game, average) - os_exploitability.nash_conv(game, ours)) > 1e-3


def kuhn_trainer(episodes=60, seed=0, observation="observation", make_env=None):
    env = make_env or (lambda: openspiel_env("kuhn_poker", observation=observation))
    return DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, episodes_per_train=episodes,
                                episodes_per_test=2, test_freq=100_000, update_freq=16, batch_size=16, seed=seed)


def dqn_maker(trainer, backend="torch"):
    if backend == "torch":
        from marl_note.agents.torch import DQN
    elif backend == "numpy":
        from marl_note.agents.numpy import DQN  # type: ignore[assignment]
    else:
        from marl_note.agents.tf import DQN
    seat = trainer.possible_agents[0]
    spaces = trainer.observation_space(seat), trainer.action_space(seat)
    return lambda i: DQN(*spaces, hidden_sizes=(16,), learning_starts=16, seed=i)


def test_one_member_mixture_has_that_members_exploitability():
    trainer = kuhn_trainer()
    game = pyspiel.load_game("kuhn_poker")
    psro = PSRO(trainer, dqn_maker(trainer), game="kuhn_poker", seed=0)  # the pool: a uniform random player
    assert psro.names == ["random"] and psro.meta_strategy.tolist() == [1.0]
    assert psro.exploitability().exploitability == pytest.approx(
        os_exploitability.exploitability(game, os_policy.UniformRandomPolicy(game)), abs=1e-9)
    member = dqn_maker(trainer)(7)
    psro = PSRO(trainer, dqn_maker(trainer), game="kuhn_poker", initial=member, seed=0)
    expected = os_exploitability.exploitability(game, tabular_policy(member, game))
    assert psro.exploitability().exploitability == pytest.approx(expected, abs=1e-9)
    assert expected > 0.1  # an untrained greedy policy: far from the equilibrium


def test_a_tiny_psro_run_on_kuhn(tmp_path):
    trainer = kuhn_trainer(episodes=150)
    psro = PSRO(trainer, dqn_maker(trainer), game="kuhn_poker", csv_path=tmp_path / "psro.csv", seed=0)
    history = psro.run(iterations=2)
    assert psro.names == ["random", "br_1", "br_2"]
    meta = psro.meta_strategy
    assert meta.shape == (3,) and np.all(meta >= 0) and meta.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(psro.payoffs, -psro.payoffs.T, atol=1e-12)  # a symmetric zero-sum meta-game
    assert [h["iteration"] for h in history] == [1, 2] and all(h["episodes"] >= 150 for h in history)
    e = history[-1]["exploitability"]
    assert math.isfinite(e) and 0.0 <= e <= 1.0 and history[-1]["nash_conv"] == pytest.approx(2 * e)
    rows = (tmp_path / "psro.csv").read_text().splitlines()
    assert rows[0].startswith("iteration,episodes,env_steps,members,exploitability") and len(rows) == 3
    # the best response trained against the mixture of the pool: the pool's matchmaker drew members
    assert trainer.run_state is not None


def test_payoffs_from_games_in_a_pettingzoo_game_without_a_tree():
    from pettingzoo.classic import tictactoe_v3

    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, episodes_per_train=20,
                                   episodes_per_test=2, test_freq=100_000, update_freq=16, batch_size=16, seed=0)
    psro = PSRO(trainer, dqn_maker(trainer), payoff_episodes=20, seed=0)
    history = psro.run(iterations=1)
    assert "exploitability" not in history[-1]
    p = psro.payoffs
    assert p.shape == (2, 2) and np.allclose(p, -p.T) and np.all(np.abs(p) <= 1.0)
    assert np.any(psro.values != 0)  # games were played: tic-tac-toe's first player wins more often
    with pytest.raises(ValueError, match="needs an OpenSpiel game"):
        psro.exploitability()


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_checkpoint_round_trip(tmp_path, backend):
    if backend == "tf":
        pytest.importorskip("tensorflow")
    trainer = kuhn_trainer(episodes=40)
    psro = PSRO(trainer, dqn_maker(trainer, backend), game="kuhn_poker", meta_solver="prd", seed=0)
    psro.run(iterations=2)
    psro.save(tmp_path / "pool")
    assert sorted(p.name for p in (tmp_path / "pool" / "members").iterdir()) == ["br_1", "br_2"]
    assert not list((tmp_path / "pool").rglob("*.pkl"))
    loaded = load_psro(tmp_path / "pool")
    assert loaded.names == psro.names and loaded.game == "kuhn_poker()"
    np.testing.assert_allclose(loaded.meta_strategy, psro.meta_strategy)
    assert loaded.exploitability().exploitability == pytest.approx(psro.exploitability().exploitability, abs=1e-9)
    other = "tf" if backend == "torch" else "torch"
    pytest.importorskip("tensorflow" if other == "tf" else "torch")
    crossed = load_psro(tmp_path / "pool", backend=other)  # the members restore into the other backend too
    assert crossed.exploitability().exploitability == pytest.approx(psro.exploitability().exploitability,
                                                                    abs=1e-6)


def test_bad_input_is_refused_before_training():
    trainer = kuhn_trainer()
    make = dqn_maker(trainer)
    with pytest.raises(ValueError, match="kuhn_poker\\(players=3\\).*not a two-player zero-sum"):
        PSRO(trainer, make, game="kuhn_poker(players=3)")
    with pytest.raises(ValueError, match="leduc_poker.*the env is not that game"):
        PSRO(trainer, make, game="leduc_poker")
    with pytest.raises(ValueError, match="unknown meta-solver 'cfr'"):
        PSRO(trainer, make, game="kuhn_poker", meta_solver="cfr")
    from mpe2 import simple_spread_v3

    three = DecentralizedTrainer(simple_spread_v3.parallel_env, num_train_envs=1, num_test_envs=1)
    with pytest.raises(ValueError, match="needs a two-player game; the env has 3 seats"):
        PSRO(three, make)

    class Greedy:  # acts, but cannot say the probabilities of its policy
        action_space = trainer.action_space("player_0")

        def act(self, obs, mask=None, explore=False):
            return np.zeros(len(obs), dtype=np.int64)

    with pytest.raises(TypeError, match="make_agent built a Greedy, which has no policy_probs"):
        PSRO(trainer, lambda i: Greedy(), game="kuhn_poker")
    with pytest.raises(ValueError, match="best response has action space Discrete\\(3\\)"):
        PSRO(trainer, lambda i: RandomAgent(gym.spaces.Discrete(3)), game="kuhn_poker")


def _seat_averaged_value(game, policy, mixture):
    root = game.new_initial_state()
    return 0.5 * (expected_game_score.policy_value(root, [policy, mixture])[0]
                  + expected_game_score.policy_value(root, [mixture, policy])[1])


def test_best_response_gap_against_openspiels_best_response():
    from open_spiel.python.algorithms import best_response

    trainer = kuhn_trainer(episodes=40)
    psro = PSRO(trainer, dqn_maker(trainer, "numpy"), game="kuhn_poker", seed=0)
    history = psro.run(iterations=2)
    game = pyspiel.load_game("kuhn_poker")
    root = game.new_initial_state()
    members = [tabular_policy(psro.members[n], game) for n in psro.names]
    for it, logs in enumerate(history):  # iteration it + 1 trained against the mixture of the first it + 1 members
        weights = [1.0] if it == 0 else history[it - 1]["meta_strategy"]
        mixture = policy_aggregator.PolicyAggregator(game).aggregate([0, 1], [members[: it + 1]] * 2,
                                                                     [list(weights)] * 2)
        exact = 0.5 * sum(best_response.BestResponsePolicy(game, p, mixture).value(root) for p in (0, 1))
        trained = _seat_averaged_value(game, members[it + 1], mixture)
        assert logs["br_exact_value"] == pytest.approx(exact, abs=1e-9)
        assert logs["br_value"] == pytest.approx(trained, abs=1e-9)
        assert logs["br_gap"] == pytest.approx(exact - trained, abs=1e-9)
    assert history[0]["br_exact_value"] == pytest.approx(
        os_exploitability.exploitability(game, os_policy.UniformRandomPolicy(game)), abs=1e-9)


def test_exact_best_responses_are_openspiels_and_converge_on_kuhn(tmp_path):
    from open_spiel.python.algorithms import best_response

    trainer = kuhn_trainer()
    psro = PSRO(trainer, None, game="kuhn_poker", best_response="exact", seed=0)
    game = pyspiel.load_game("kuhn_poker")
    root = game.new_initial_state()
    history = psro.run(iterations=3)
    members = [tabular_policy(psro.members[n], game) for n in psro.names]
    for it, logs in enumerate(history):
        weights = [1.0] if it == 0 else history[it - 1]["meta_strategy"]
        mixture = policy_aggregator.PolicyAggregator(game).aggregate([0, 1], [members[: it + 1]] * 2,
                                                                     [list(weights)] * 2)
        # the new member wins against the mixture what OpenSpiel's best response wins, in each seat
        for p in (0, 1):
            pair = [members[it + 1], mixture] if p == 0 else [mixture, members[it + 1]]
            assert expected_game_score.policy_value(root, pair)[p] == pytest.approx(
                best_response.BestResponsePolicy(game, p, mixture).value(root), abs=1e-9)
        assert logs["br_gap"] == pytest.approx(0.0, abs=1e-9) and logs["episodes"] == 0
    history = psro.run(iterations=12)
    final = policy_aggregator.PolicyAggregator(game).aggregate(
        [0, 1], [[tabular_policy(psro.members[n], game) for n in psro.names]] * 2, [list(psro.meta_strategy)] * 2)
    assert os_exploitability.exploitability(game, final) < 1e-6  # PSRO with an exact oracle reaches Nash
    psro.save(tmp_path / "pool")
    loaded = load_psro(tmp_path / "pool")
    assert loaded.names == psro.names
    assert loaded.exploitability().exploitability == pytest.approx(psro.exploitability().exploitability, abs=1e-12)


def test_exact_best_responses_need_an_openspiel_game_and_telling_observations():
    from marl_note.trainers.psro import TabularMember

    trainer = kuhn_trainer()
    with pytest.raises(ValueError, match="best_response must be 'trained' or 'exact', got 'oracle'"):
        PSRO(trainer, dqn_maker(trainer), game="kuhn_poker", best_response="oracle")
    with pytest.raises(ValueError, match="needs an OpenSpiel game"):
        PSRO(trainer, None, best_response="exact")
    game = pyspiel.load_game("leduc_poker")
    # Leduc's observation tensor forgets the order of the bets: some information states look the same
    policy = random_policies(game, 1, seed=0)[0]
    with pytest.raises(ValueError, match="leduc_poker.*use observation='information_state'"):
        TabularMember(policy, game, gym.spaces.Discrete(3))
    TabularMember(policy, game, gym.spaces.Discrete(3), observation="information_state")
