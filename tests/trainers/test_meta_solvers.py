"""Meta-solvers: LP Nash and projected replicator dynamics on matrix games with known equilibria."""
import numpy as np
import pytest

from marl_note.trainers.meta_solvers import (
    game_value,
    meta_solver,
    nash_lp,
    project_simplex,
    projected_replicator_dynamics,
)

RPS = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], dtype=float)
PENNIES = np.array([[1, -1], [-1, 1]], dtype=float)
# rock-paper-scissors plus a fourth strategy that loses 2 to each of them: strictly dominated
RPS_DOMINATED = np.array([[0, -1, 1, 2], [1, 0, -1, 2], [-1, 1, 0, 2], [-2, -2, -2, 0]], dtype=float)


def test_lp_nash_of_rock_paper_scissors_is_uniform():
    np.testing.assert_allclose(nash_lp(RPS), [1 / 3] * 3, atol=1e-8)
    assert game_value(RPS) == pytest.approx(0.0, abs=1e-9)


def test_lp_nash_of_matching_pennies_is_half_half():
    np.testing.assert_allclose(nash_lp(PENNIES), [0.5, 0.5], atol=1e-8)
    assert game_value(PENNIES) == pytest.approx(0.0, abs=1e-9)


def test_lp_nash_puts_nothing_on_a_dominated_strategy():
    p = nash_lp(RPS_DOMINATED)
    assert p[3] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(p[:3], [1 / 3] * 3, atol=1e-8)


def test_lp_value_of_a_game_with_a_known_nonzero_value():
    # [[2, -1], [-1, 1]]: the row player mixes (2/5, 3/5) and wins 1/5 on average
    np.testing.assert_allclose(nash_lp([[2, -1], [-1, 1]]), [0.4, 0.6], atol=1e-8)
    assert game_value([[2, -1], [-1, 1]]) == pytest.approx(0.2, abs=1e-9)
    assert game_value([[3, 1], [2, 0]]) == pytest.approx(1.0, abs=1e-9)  # a saddle point


def test_projected_replicator_dynamics_approaches_the_nash_of_rps():
    p = projected_replicator_dynamics(RPS, initial=[0.6, 0.3, 0.1])
    assert p.sum() == pytest.approx(1.0)
    assert np.abs(p - 1 / 3).max() < 0.02
    # started away from the equilibrium: the run must have moved (the start is 0.27 away)
    assert np.abs(projected_replicator_dynamics(RPS, iterations=1, initial=[0.6, 0.3, 0.1]) - 1 / 3).max() > 0.2


def test_projected_replicator_dynamics_respects_its_floor():
    p = projected_replicator_dynamics(RPS_DOMINATED, floor=0.01)
    assert p.min() >= 0.01 - 1e-12
    assert p[3] < 0.02  # the dominated strategy is driven down to (about) the floor
    assert projected_replicator_dynamics(RPS_DOMINATED, floor=0.0)[3] < 0.01


def test_project_simplex():
    np.testing.assert_allclose(project_simplex(np.array([0.2, 0.3, 0.5])), [0.2, 0.3, 0.5])
    np.testing.assert_allclose(project_simplex(np.array([2.0, 0.0, -1.0]), floor=0.1), [0.8, 0.1, 0.1])
    np.testing.assert_allclose(project_simplex(np.array([1.0, 1.0])), [0.5, 0.5])


@pytest.mark.parametrize("solver", ["nash", "prd", "uniform"])
@pytest.mark.parametrize("bad, words", [
    (np.zeros((2, 3)), "must be square"),
    (np.zeros((0, 0)), "must be square"),
    (np.zeros(3), "must be square"),
    (np.array([[0.0, np.nan], [1.0, 0.0]]), "NaN or infinite entries (at [(0, 1)])"),
    (np.array([[0.0, np.inf], [1.0, 0.0]]), "NaN or infinite"),
])
def test_bad_payoff_matrices_are_refused(solver, bad, words):
    with pytest.raises(ValueError) as err:
        meta_solver(solver)(bad)
    assert words in str(err.value)


def test_bad_solver_settings_are_refused():
    with pytest.raises(ValueError, match="unknown meta-solver 'cfr'"):
        meta_solver("cfr")
    with pytest.raises(ValueError, match="floor must be in"):
        projected_replicator_dynamics(RPS, floor=0.5)
    with pytest.raises(ValueError, match="initial must be a probability vector"):
        projected_replicator_dynamics(RPS, initial=[0.5, 0.5])
