"""Meta-solvers of PSRO: a strategy over the members of a pool from their payoff matrix.

A meta-game is a two-player zero-sum matrix game: ``payoffs[i, j]`` is what the row player wins
playing pure strategy ``i`` against the column player's ``j`` (the column player wins the
negative). In PSRO the pure strategies are the pool's members and the matrix is antisymmetric
(each member plays every seat), so one mixture serves both seats. Each solver returns the row
player's probability vector:

- :func:`nash_lp`: a Nash equilibrium (maximin) strategy by linear programming
  (``scipy.optimize.linprog``); :func:`game_value` is the game's value;
- :func:`projected_replicator_dynamics`: projected replicator dynamics (Lanctot et al. 2017,
  "A Unified Game-Theoretic Approach to Multiagent Reinforcement Learning"), every probability
  kept at least ``floor``; the average of the row population over the run.

Example:
    >>> rps = [[0, -1, 1], [1, 0, -1], [-1, 1, 0]]
    >>> nash_lp(rps).round(3).tolist(), round(game_value(rps), 6)
    ([0.333, 0.333, 0.333], 0.0)
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["META_SOLVERS", "check_payoffs", "game_value", "meta_solver", "nash_lp", "project_simplex",
           "projected_replicator_dynamics"]


def check_payoffs(payoffs: Any) -> np.ndarray:
    """``payoffs`` as a float64 square matrix; ``ValueError`` for one that is not square, empty or finite."""
    try:
        m = np.asarray(payoffs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a payoff matrix must be numbers, got {type(payoffs).__name__}: {exc}") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"a meta-game payoff matrix must be square and non-empty (one row and column per "
                         f"pool member), got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        bad = [tuple(int(i) for i in ij) for ij in np.argwhere(~np.isfinite(m))[:3]]
        raise ValueError(f"the payoff matrix has NaN or infinite entries (at {bad})")
    return m


def _solve(payoffs: Any) -> tuple[np.ndarray, float]:
    """The row player's maximin strategy and the game's value: max v s.t. (A^T x)_j >= v, x in the simplex."""
    try:
        from scipy.optimize import linprog  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(f"the LP meta-solver needs scipy ({exc}): pip install scipy "
                          f"(the openspiel extra, marl_note[openspiel], brings it)") from None

    a = check_payoffs(payoffs)
    n = a.shape[0]
    # variables [x_0..x_{n-1}, v]; minimise -v
    cost = np.zeros(n + 1)
    cost[-1] = -1.0
    a_ub = np.hstack([-a.T, np.ones((n, 1))])  # v - (A^T x)_j <= 0
    a_eq = np.hstack([np.ones((1, n)), np.zeros((1, 1))])
    bounds = [(0.0, None)] * n + [(None, None)]
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(n), A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if res.status != 0:  # a bounded feasible LP: only a solver failure gets here
        raise RuntimeError(f"linprog could not solve the {n}x{n} meta-game: {res.message}")
    x = np.clip(res.x[:n], 0.0, None)
    return x / x.sum(), float(res.x[-1]) + 0.0  # + 0.0: no "-0.0"


def nash_lp(payoffs: Any) -> np.ndarray:
    """A Nash equilibrium strategy of the row player of the zero-sum matrix game ``payoffs``.

    Example:
        >>> nash_lp([[1, -1], [-1, 1]]).tolist()  # matching pennies
        [0.5, 0.5]
    """
    return _solve(payoffs)[0]


def game_value(payoffs: Any) -> float:
    """The value of the zero-sum matrix game ``payoffs`` to the row player (0 for an antisymmetric one).

    Example:
        >>> round(game_value([[3, 1], [2, 0]]), 6)  # row 0 dominates; column 1 dominates
        1.0
    """
    return _solve(payoffs)[1]


def project_simplex(x: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """The Euclidean projection of ``x`` onto ``{p : sum(p) = 1, p_i >= floor}``.

    Example:
        >>> project_simplex(np.array([2.0, 0.0, -1.0]), floor=0.1).round(3).tolist()
        [0.8, 0.1, 0.1]
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    mass = 1.0 - n * floor
    if floor < 0 or mass < -1e-12:
        raise ValueError(f"a probability floor must be in [0, 1/{n}] for {n} strategies, got {floor}")
    y = x - floor
    # projection of y onto the simplex of total `mass` (sort-based: Held et al. / Duchi et al.)
    u = np.sort(y)[::-1]
    css = np.cumsum(u) - mass
    k = np.nonzero(u - css / np.arange(1, n + 1) > 0)[0]
    theta = css[k[-1]] / (k[-1] + 1) if len(k) else css[-1] / n
    return np.maximum(y - theta, 0.0) + floor


def projected_replicator_dynamics(payoffs: Any, iterations: int = 5_000, dt: float = 0.05,
                                  floor: float = 1e-6, initial: Any = None) -> np.ndarray:
    """Projected replicator dynamics on the zero-sum matrix game ``payoffs``; the row player's strategy.

    Two populations, row ``x`` (payoffs ``A y``) and column ``y`` (payoffs ``-A^T x``), each moved
    ``dt`` along the replicator direction ``p * (u - p . u)`` and projected back onto the simplex
    with every probability at least ``floor`` (Lanctot et al. 2017). Replicator dynamics circle a
    mixed equilibrium rather than settle on it, so the result is the average of ``x`` over the run,
    which approaches the Nash equilibrium. ``initial``: the starting strategy of both populations
    (default uniform).

    Example:
        >>> rps = [[0, -1, 1], [1, 0, -1], [-1, 1, 0]]
        >>> p = projected_replicator_dynamics(rps, initial=[0.6, 0.3, 0.1])
        >>> bool(np.abs(p - 1 / 3).max() < 0.05)
        True
    """
    a = check_payoffs(payoffs)
    n = a.shape[0]
    if int(iterations) < 1 or dt <= 0 or not np.isfinite(dt):
        raise ValueError(f"iterations must be >= 1 and dt > 0, got {iterations} and {dt}")
    if not 0.0 <= floor <= 1.0 / n:
        raise ValueError(f"floor must be in [0, 1/{n}] for {n} strategies, got {floor}")
    if initial is None:
        x = np.full(n, 1.0 / n)
    else:
        x = np.asarray(initial, dtype=np.float64)
        if x.shape != (n,) or not np.all(np.isfinite(x)) or np.any(x < 0) or not np.isclose(x.sum(), 1.0):
            raise ValueError(f"initial must be a probability vector of {n} entries, got {initial!r}")
    x = project_simplex(x, floor)
    y = x.copy()
    total = np.zeros(n)
    for _ in range(int(iterations)):
        ux, uy = a @ y, -a.T @ x
        x, y = (project_simplex(x + dt * x * (ux - x @ ux), floor),
                project_simplex(y + dt * y * (uy - y @ uy), floor))
        total += x
    out = total / int(iterations)
    return out / out.sum()


#: The meta-solvers by the name ``PSRO(meta_solver=...)`` and ``--meta-solver`` take.
META_SOLVERS: dict[str, Callable[[Any], np.ndarray]] = {
    "nash": nash_lp,
    "prd": projected_replicator_dynamics,
    "uniform": lambda payoffs: np.full(check_payoffs(payoffs).shape[0], 1.0 / check_payoffs(payoffs).shape[0]),
}


def meta_solver(name: str) -> Callable[[Any], np.ndarray]:
    """The meta-solver called ``name`` (``"nash"``, ``"prd"`` or ``"uniform"``: fictitious play's mixture)."""
    if name not in META_SOLVERS:
        raise ValueError(f"unknown meta-solver {name!r}; choose one of {sorted(META_SOLVERS)}")
    return META_SOLVERS[name]
