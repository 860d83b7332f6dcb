"""Playing strength against fixed players, and keeping a run's strongest weights by it.

A self-play learner's win rate against a random player says little: a learner that exploits
erratic play can lose most games to a player that merely wins when it can and blocks otherwise.
:func:`strength` plays greedy games against a set of fixed (search) players in every seat and
scores each (opponent, seat) pair by ``win + 0.5 * draw``; :func:`strength_score` summarises a
table by its worst pair (then the mean, to break ties). :class:`KeepStrongest` is the trainer
callback that measures the learner that way at every periodic test, keeps the weights with the
best score (in memory, and atomically on disk if asked) and puts them back when training ends.

Measure on other games than the final evaluation (other seeds of the opponents' tie-breaking), and
with more than the one opponent the final evaluation uses, so the kept weights are not tuned to the
games that judge them.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.base import Saveable, Stateful
from marl_note.trainers.seats import can_act
from marl_note.validation import positive_int

__all__ = ["strength", "strength_score", "KeepStrongest"]

Table = dict[str, dict[str, dict[str, float]]]


def strength(trainer: Any, agent: Any, opponents: Mapping[str, Any], games: int) -> Table:
    """``{opponent: {seat: {win, draw, loss, score, episodes}}}`` from ``games`` greedy games of
    ``agent`` per seat against each opponent (in every other seat), ``score = win + 0.5 * draw``.

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> from marl_note.agents import RandomAgent
        >>> from marl_note.contrib.board_games import PerfectTicTacToePlayer
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_test_envs=2, seed=0)
        >>> table = strength(trainer, PerfectTicTacToePlayer(seed=0),
        ...                  {"perfect": PerfectTicTacToePlayer(seed=1)}, games=4)
        >>> {seat: row["score"] for seat, row in table["perfect"].items()}  # perfect play draws itself
        {'player_1': 0.5, 'player_2': 0.5}
        >>> strength_score(table)
        (0.5, 0.5)
    """
    games = positive_int("games", games, "greedy games per seat and opponent")
    check_opponents(opponents)
    n = trainer.spec.num_agents
    table: Table = {}
    for name, opponent in opponents.items():
        per_seat = trainer.test_against(agent, opponent=opponent, episodes=games * n)["per_seat"]
        table[name] = {seat: {**row, "score": row["win"] + 0.5 * row["draw"]} for seat, row in per_seat.items()}
    return table


def strength_score(table: Table) -> tuple[float, float]:
    """``(worst, mean)`` of the scores of every (opponent, seat) pair of a :func:`strength` table.

    Compared as a tuple: the worst pair decides, the mean breaks ties (e.g. among weights that all
    draw a perfect player, those that beat the weaker opponents more often).
    """
    scores = [row["score"] for seats in table.values() for row in seats.values()]
    if not scores:
        raise ValueError("a strength table needs at least one opponent and seat")
    return float(min(scores)), float(np.mean(scores))


def check_opponents(opponents: Mapping[str, Any]) -> None:
    if not isinstance(opponents, Mapping) or not opponents:
        raise ValueError(f"opponents must be a non-empty {{name: agent}} dict, got {opponents!r}")
    for name, opponent in opponents.items():
        if not can_act(opponent):
            raise TypeError(f"opponent {name!r} ({type(opponent).__name__}) has no act(obs, mask, explore) method")


def param_copy(agent: Stateful) -> dict[str, np.ndarray]:
    """A copy of ``agent``'s network weights (its whole ``state_dict()`` if it is not
    :class:`~marl_note.agents.base.Saveable`, which lists them)."""
    state = agent.state_dict()
    keys = agent.param_keys(state) if isinstance(agent, Saveable) else list(state)
    return {k: np.array(state[k], copy=True) for k in keys}


def load_params(agent: Stateful, params: Mapping[str, np.ndarray]) -> None:
    """Load weights from :func:`param_copy` into ``agent``, keeping the rest of its current state."""
    state = dict(agent.state_dict())
    state.update(params)
    agent.load_state_dict(state)


class KeepStrongest:
    """Trainer callback: keep the learner's weights that play best against fixed (search) players.

    At every ``every``-th periodic test (and at the end of training if the last test was
    skipped) the learner plays ``games`` greedy games per seat against each of ``opponents``
    (:func:`strength`); when its :func:`strength_score` ``(worst, mean)`` beats the best so far,
    its network weights are copied (in memory, and with ``path`` also written there with
    ``learner.save_param``, atomically). When training ends the best weights are loaded back into
    the learner (``restore=False`` leaves the final ones) and the returned statistics get
    ``strength``: ``best_score``, ``best_episode``, ``best_table`` and the ``history`` of
    ``(episodes, worst, mean)`` per measurement. A ``path`` checkpoint loads with
    ``agent.restore_param(path)``.

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> from marl_note.contrib.board_games import PerfectTicTacToePlayer, WinOrBlockPlayer
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, test_freq=10,
        ...                                episodes_per_train=20, episodes_per_test=2, seed=0)
        >>> learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0)
        >>> keep = KeepStrongest(learner, {"win-or-block": WinOrBlockPlayer("tictactoe", seed=1),
        ...                                "perfect": PerfectTicTacToePlayer(seed=2)}, games=2)
        >>> stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
        ...                       callbacks=[keep])
        >>> len(keep.history) >= 2 and stats["strength"]["best_score"] == keep.best_score
        True
    """

    def __init__(self, learner: Any, opponents: Mapping[str, Any], games: int = 50, path: str | None = None,
                 every: int = 1, restore: bool = True):
        check_opponents(opponents)
        self.games = positive_int("games", games, "greedy games per seat and opponent")
        self.every = positive_int("every", every, "periodic tests between measurements")
        if not isinstance(learner, Stateful):
            raise TypeError(f"KeepStrongest needs a learner with state_dict()/load_state_dict(); "
                            f"got {type(learner).__name__}")
        if path is not None and not isinstance(learner, Saveable):
            raise TypeError(f"path={path!r} needs a learner with save_param(path); got {type(learner).__name__}")
        self.learner: Any = learner
        self.opponents = dict(opponents)
        self.path = None if path is None else os.fspath(path)
        self.restore = bool(restore)
        self._reset()

    def _reset(self) -> None:
        self.best_score: tuple[float, float] | None = None
        self.best_episode: int | None = None
        self.best_table: Table | None = None
        self.best_params: dict[str, np.ndarray] | None = None
        self.history: list[tuple[int, float, float]] = []
        self._tests = 0

    def measure(self, trainer: Any, episodes: int) -> tuple[float, float]:
        """Measure the learner now; keep its weights if they are the strongest so far."""
        table = strength(trainer, self.learner, self.opponents, self.games)
        score = strength_score(table)
        self.history.append((int(episodes), *score))
        if self.best_score is None or score > self.best_score:
            self.best_score, self.best_episode, self.best_table = score, int(episodes), table
            self.best_params = param_copy(self.learner)
            if self.path is not None:
                self.learner.save_param(self.path)
        return score

    def on_train_begin(self, trainer: Any) -> None:
        self._reset()

    def on_test_end(self, trainer: Any, result: dict, episodes: int) -> None:
        self._tests += 1
        if (self._tests - 1) % self.every == 0:
            self.measure(trainer, episodes)

    def on_train_end(self, trainer: Any, out: dict) -> None:
        episodes = int(out.get("num_collected_episodes", 0))
        if not self.history or self.history[-1][0] != episodes:  # the final weights compete too
            self.measure(trainer, episodes)
        if self.restore and self.best_params is not None:
            load_params(self.learner, self.best_params)
        out["strength"] = {"best_score": self.best_score, "best_episode": self.best_episode,
                           "best_table": self.best_table, "history": list(self.history)}

    def plot_series(self) -> dict[str, list[tuple[int, float]]]:
        return {"strength (worst seat and opponent)": [(e, worst) for e, worst, _ in self.history]}
