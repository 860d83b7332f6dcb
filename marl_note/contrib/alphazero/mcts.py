"""Monte Carlo tree search with PUCT (AlphaZero's search), numpy only, over any two-player simulator.

The search is for two-player zero-sum games where the players alternate: every value is from the
point of view of the player to move at that node, and backing a value up one ply negates it.
Games with more players, simultaneous moves or a player moving twice in a row are refused.

A simulator is anything with these three methods (states are the simulator's own objects):

- ``legal(state) -> bool [num_actions]``: the legal actions of the player to move;
- ``play(state, action) -> (next_state, value)``: ``value`` is None while the game goes on, else the
  outcome for the player to move at ``next_state`` (+1 won, -1 lost, 0 draw);
- ``encode(states) -> array [B, ...]``: the observations the network reads, as the env gives them.

:class:`BoardSimulator` plays tic-tac-toe and connect four from the board rules
(:mod:`marl_note.contrib.board_games.rules`), about 50 microseconds a move; :class:`EnvSimulator`
plays any two-player PettingZoo AEC env with an action mask through ``copy.deepcopy`` of the env
(about a millisecond a move for the classic envs: the generic, slower fallback).

Example:
    >>> import numpy as np
    >>> sim = BoardSimulator("tictactoe")
    >>> board = np.array([1, 1, 0, -1, -1, 0, 0, 0, 0], np.int8)   # the player to move wins at 2
    >>> uniform = lambda obs, legal: (legal / legal.sum(1, keepdims=True), np.zeros(len(obs)))
    >>> visits = MCTS(sim, uniform, num_simulations=200, seed=0).search([board])
    >>> int(visits[0].argmax()), int(visits[0].sum())
    (2, 200)
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from marl_note.contrib.board_games.rules import BoardGame, decode, get_game
from marl_note.validation import positive_float, positive_int, unit_interval

__all__ = ["MCTS", "BoardSimulator", "EnvSimulator", "Evaluator"]

#: ``evaluate(obs [B, ...], legal bool [B, n]) -> (priors [B, n] summing to 1 over legal, values [B])``,
#: values for the player to move.
Evaluator = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class BoardSimulator:
    """Tic-tac-toe or connect four from the rules: a state is the flat board of the player to move.

    The board holds +1 for the pieces of the player to move and -1 for the opponent's, so a
    PettingZoo observation (own plane, opponent's plane) determines the state completely:
    :meth:`from_observation` rebuilds it, :meth:`encode` gives the observation back.

    Example:
        >>> import numpy as np
        >>> sim = BoardSimulator("connect_four")
        >>> state = sim.from_observation(np.zeros((1, 6, 7, 2), np.int8))[0]
        >>> after, value = sim.play(state, 3)
        >>> int(after[38]), value, sim.ply(after)   # seen by the next player: the piece is theirs
        (-1, None, 1)
        >>> sim.mirror_actions.tolist(), BoardSimulator("tictactoe").mirror_actions.tolist()
        ([6, 5, 4, 3, 2, 1, 0], [2, 1, 0, 5, 4, 3, 8, 7, 6])
    """

    def __init__(self, game: str | BoardGame):
        self.game = get_game(game)
        self.num_actions = self.game.num_actions

    @property
    def mirror_actions(self) -> np.ndarray:
        """``mirror_actions[a]``: the action that plays ``a``'s move on the board mirrored left to right."""
        cells = np.arange(self.num_actions).reshape(-1, self.game.cols) if not self.game.gravity \
            else np.arange(self.game.cols)[None]
        return cells[:, ::-1].reshape(-1)

    def from_observation(self, obs: np.ndarray) -> list[np.ndarray]:
        """One state per PettingZoo observation ``[B, rows, cols, 2]`` (checked)."""
        return list(decode(self.game, obs, "AlphaZero's board simulator"))

    def legal(self, state: np.ndarray) -> np.ndarray:
        top = state[:self.game.cols] if self.game.gravity else state
        return top == 0

    def play(self, state: np.ndarray, action: int) -> tuple[np.ndarray, float | None]:
        after = state.copy()
        cell = self.game.landing(after, int(action))
        after[cell] = 1
        if self.game.completes_line(after, cell):
            return -after, -1.0  # the mover won: the next player to move has lost
        if not self.legal(after).any():
            return -after, 0.0
        return -after, None

    def encode(self, states: Sequence[np.ndarray]) -> np.ndarray:
        boards = np.stack(states).reshape(len(states), self.game.rows, self.game.cols)
        return np.stack([boards == 1, boards == -1], axis=-1).astype(np.int8)

    def ply(self, state: np.ndarray) -> int:
        return int(np.count_nonzero(state))

    def __repr__(self) -> str:
        return f"BoardSimulator({self.game.name!r})"


class EnvSimulator:
    """Any two-player PettingZoo AEC env with an action mask, simulated on ``copy.deepcopy`` copies.

    A state is an env (never the caller's: :meth:`play` steps a copy). ``observation_key`` names
    the network's part of the dict observation. Refused: envs without exactly two agents or without
    an action mask, and a step after which the same player moves again (not alternating).

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> env = tictactoe_v3.env(); env.reset(seed=0)
        >>> sim = EnvSimulator(env)
        >>> after, value = sim.play(env, 4)
        >>> int(sim.legal(after).sum()), value, int(sim.legal(env).sum())   # the caller's env is not stepped
        (8, None, 9)
    """

    def __init__(self, env: Any, observation_key: str = "observation"):
        agents = list(getattr(env, "possible_agents", []))
        if len(agents) != 2 or not hasattr(env, "agent_selection"):
            raise ValueError(f"MCTS searches two-player turn-based (AEC) games; got {type(env).__name__} "
                             f"with agents {agents} (parallel or other-than-two-player envs are not supported)")
        obs = env.observe(env.agent_selection)
        if not isinstance(obs, dict) or "action_mask" not in obs or observation_key not in obs:
            raise ValueError(f"MCTS needs dict observations with 'action_mask' and {observation_key!r}; "
                             f"{type(env).__name__} gives {type(obs).__name__}")
        self.key = observation_key
        self.num_actions = int(len(obs["action_mask"]))

    def legal(self, state: Any) -> np.ndarray:
        return np.asarray(state.observe(state.agent_selection)["action_mask"], bool)

    def play(self, state: Any, action: int) -> tuple[Any, float | None]:
        env = copy.deepcopy(state)
        mover = env.agent_selection
        env.step(int(action))
        if env.terminations[mover] or env.truncations[mover]:
            return env, -float(env.rewards[mover])  # zero-sum: the other player's outcome
        if env.agent_selection == mover:
            raise ValueError(f"{mover} moved twice in a row: MCTS needs alternating players")
        return env, None

    def encode(self, states: Sequence[Any]) -> np.ndarray:
        return np.stack([np.asarray(s.observe(s.agent_selection)[self.key]) for s in states])


class _Node:
    """One position: priors ``P``, visit counts ``N`` and summed values ``W`` of its moves, its children."""

    __slots__ = ("state", "legal", "P", "N", "W", "total", "illegal", "children")

    def __init__(self, state: Any, legal: np.ndarray, prior: np.ndarray):
        self.state, self.legal, self.P = state, legal, prior
        self.N = np.zeros(len(legal))
        self.W = np.zeros(len(legal))
        self.total = 0  # sum of N
        self.illegal = np.where(legal, 0.0, -np.inf)  # added to the scores: illegal moves are never taken
        self.children: dict[int, _Node | float] = {}  # a finished game's child is its value


class MCTS:
    """PUCT search of a batch of positions in lockstep (one network call per simulation for the batch).

    Each simulation walks down from the root taking ``argmax Q + c_puct * P * sqrt(sum N) / (1 + N)``
    over legal moves (``Q = W / N``, 0 for unvisited moves), expands the first new position with the
    network's priors and value (``evaluate``), or takes a finished game's outcome, and backs the
    value up, negated at every ply. With ``explore=True`` the root priors become
    ``(1 - dirichlet_epsilon) * P + dirichlet_epsilon * Dirichlet(dirichlet_alpha)`` over the legal
    moves. :meth:`search` returns the root visit counts; the root of every search gets exactly
    ``num_simulations`` visits.
    """

    def __init__(self, simulator: Any, evaluate: Evaluator, num_simulations: int = 50, c_puct: float = 1.5,
                 dirichlet_alpha: float = 0.3, dirichlet_epsilon: float = 0.25, seed: int | None = None,
                 rng: np.random.Generator | None = None):
        for method in ("legal", "play", "encode"):
            if not callable(getattr(simulator, method, None)):
                raise TypeError(f"an MCTS simulator needs a {method}() method; {type(simulator).__name__} has none")
        self.simulator, self.evaluate = simulator, evaluate
        self.num_simulations = positive_int("num_simulations", num_simulations)
        self.c_puct = positive_float("c_puct", c_puct)
        self.dirichlet_alpha = positive_float("dirichlet_alpha", dirichlet_alpha)
        self.dirichlet_epsilon = unit_interval("dirichlet_epsilon", dirichlet_epsilon)
        self.rng = rng if rng is not None else np.random.default_rng(seed)

    def _expand(self, states: list[Any]) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        legal = [np.asarray(self.simulator.legal(s), bool) for s in states]
        priors, values = self.evaluate(self.simulator.encode(states), np.stack(legal))
        priors = np.where(np.stack(legal), np.asarray(priors, np.float64), 0.0)
        return legal, list(priors / priors.sum(axis=1, keepdims=True)), np.asarray(values, np.float64)

    def _select(self, node: _Node) -> int:
        n = node.N
        q = node.W / np.maximum(n, 1.0)  # W is 0 where N is: unvisited moves have Q = 0
        u = (self.c_puct * max(node.total, 1) ** 0.5) * node.P / (1.0 + n)
        return int((q + u + node.illegal).argmax())

    @staticmethod
    def _backup(path: list[tuple[_Node, int]], value: float) -> None:
        for node, action in reversed(path):  # value: for the player to move below this node
            value = -value
            node.N[action] += 1
            node.W[action] += value
            node.total += 1

    def search(self, states: Sequence[Any], explore: bool = False) -> np.ndarray:
        """Root visit counts ``[B, num_actions]`` (int64) of ``num_simulations`` simulations from each state."""
        states = list(states)
        legal, priors, _ = self._expand(states)
        if not all(ok.any() for ok in legal):
            raise ValueError("MCTS was asked to search a position with no legal move")
        roots = []
        for state, ok, prior in zip(states, legal, priors):
            if explore and self.dirichlet_epsilon > 0:
                noise = np.zeros_like(prior)
                noise[ok] = self.rng.dirichlet(np.full(int(ok.sum()), self.dirichlet_alpha))
                prior = (1 - self.dirichlet_epsilon) * prior + self.dirichlet_epsilon * noise
            roots.append(_Node(state, ok, prior))
        for _ in range(self.num_simulations):
            pending: list[tuple[list[tuple[_Node, int]], Any]] = []
            for root in roots:
                node, path = root, []
                while True:
                    action = self._select(node)
                    path.append((node, action))
                    child = node.children.get(action)
                    if child is None:
                        after, value = self.simulator.play(node.state, action)
                        if value is None:
                            pending.append((path, after))
                        else:
                            node.children[action] = float(value)
                            self._backup(path, float(value))
                        break
                    if isinstance(child, float):
                        self._backup(path, child)
                        break
                    node = child
            if pending:
                legal, priors, values = self._expand([after for _, after in pending])
                for (path, after), ok, prior, value in zip(pending, legal, priors, values):
                    parent, action = path[-1]
                    parent.children[action] = _Node(after, ok, prior)
                    self._backup(path, float(value))
        return np.stack([root.N for root in roots]).astype(np.int64)

