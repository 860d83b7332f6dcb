"""Self-play kit: frozen snapshots of a learner, an opponent pool with matchmaking, Elo ratings.

The pool is both the trainer's ``matchmaker`` (called at the start of every training episode of
every env: it seats the learner in a seat — rotating seats so it plays every seat — and frozen
opponents in the others) and a trainer callback (it takes snapshots and rates them at test time).

Example:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.agents.torch import DQN
    >>> from marl_note.trainers import DecentralizedTrainer
    >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=2, num_test_envs=2, test_freq=10,
    ...                                episodes_per_train=20, episodes_per_test=4, seed=0)
    >>> learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0)
    >>> pool = OpponentPool(learner, trainer.spec, snapshot_every=10, eval_episodes=4, seed=0)
    >>> stats = trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
    ...                       matchmaker=pool, callbacks=[pool])
    >>> len(pool.names) >= 2 and "elo" in stats
    True
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from marl_note.agents.base import Acting, Agent, Cloneable, HasObservationSpace, Saveable
from marl_note.agents.copies import rebuild
from marl_note.types import EnvSpec


class Elo:
    """Elo ratings: ``expected = 1 / (1 + 10 ** ((r_b - r_a) / 400))``, ``r_a += k * (score - expected)``.

    Example:
        >>> elo = Elo(k=32)
        >>> elo.update("a", "b", 1.0)
        (1216.0, 1184.0)
    """

    def __init__(self, k: float = 32.0, initial: float = 1200.0):
        if k <= 0:
            raise ValueError(f"Elo k must be positive, got {k}")
        self.k, self.initial = float(k), float(initial)
        self.ratings: dict[str, float] = {}

    def rating(self, name: str) -> float:
        return self.ratings.setdefault(name, self.initial)

    def expected(self, a: str, b: str) -> float:
        return 1.0 / (1.0 + 10.0 ** ((self.rating(b) - self.rating(a)) / 400.0))

    def update(self, a: str, b: str, score_a: float) -> tuple[float, float]:
        """One game: ``score_a`` is 1 (a won), 0.5 (draw) or 0 (a lost)."""
        if not 0.0 <= score_a <= 1.0:
            raise ValueError(f"an Elo score must be in [0, 1], got {score_a}")
        delta = self.k * (score_a - self.expected(a, b))
        self.ratings[a] = self.rating(a) + delta
        self.ratings[b] = self.rating(b) - delta
        return self.ratings[a], self.ratings[b]


class FrozenAgent:
    """An acting-only view of a snapshot: it has no ``observe``/``update``, so it never learns."""

    def __init__(self, agent: Agent, name: str):
        self.agent, self.name = agent, name
        self.action_space = agent.action_space
        if isinstance(agent, HasObservationSpace):
            self.observation_space = agent.observation_space

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        return self.agent.act(obs, mask, explore=explore)

    def __repr__(self) -> str:
        return f"FrozenAgent({self.name!r})"


def snapshot(agent: Any, name: str = "snapshot") -> FrozenAgent:
    """A frozen copy of ``agent``: later training of ``agent`` does not move it.

    Uses ``agent.clone()`` for a :class:`~marl_note.agents.base.Cloneable` agent, else, for a
    :class:`~marl_note.agents.base.Saveable` one, rebuilds it from its recorded constructor
    arguments and copies its numpy ``state_dict``, else ``copy.deepcopy``.
    """
    try:
        if isinstance(agent, Cloneable):
            copy_ = agent.clone()
        elif isinstance(agent, Saveable):
            copy_ = rebuild(agent)
            copy_.load_state_dict({k: np.array(v, copy=True) for k, v in agent.state_dict().items()})
        else:
            copy_ = copy.deepcopy(agent)
    except Exception as exc:
        raise TypeError(f"cannot snapshot agent {type(agent).__name__}: {type(exc).__name__}: {exc}. "
                        f"Give it a clone() method (or a config dict and state_dict/load_state_dict).") from exc
    # a snapshot must not share replay/optimizer state with the learner
    return FrozenAgent(copy_, name)


class OpponentPool:
    """Frozen snapshots of a learner, the learner itself, fixed opponents; matchmaking and Elo ratings.

    Each training episode the matchmaker draws one opponent for the learner:

    - ``self_play_fraction`` of the games the learner plays itself (every seat is the learner,
      exploring and learning: plain self-play against its current weights);
    - ``fixed_fraction`` of the games one of the fixed opponents (those given to :meth:`add`: a
      random, scripted or search player). Keep it a minority: it keeps the learner able to punish
      weak play and gives it positions its own play never reaches, but a learner trained mostly
      against fixed players learns to exploit them rather than to play. ``None`` draws fixed
      opponents and snapshots from one common pool;
    - the rest a frozen snapshot of the learner.

    Within a group, ``sampling="uniform"`` draws every opponent alike; ``"prioritized"`` draws the
    opponents the learner does worst against more often (prioritized fictitious self-play, PFSP):
    opponent ``i`` gets weight ``(1 - p_i) ** priority_exponent + priority_floor``, where ``p_i``
    is the learner's expected score against it (win 1, draw 0.5, loss 0; 0.5 before any game).
    The floor keeps beaten opponents in play now and then, so the learner does not forget them.
    ``p_i`` is the score of the last greedy evaluation at a test (:meth:`evaluate`), moved after
    each training game against ``i`` by ``score_rate * (game score - p_i)`` (an exponential moving
    average of the training games; ``score_rate=None`` uses the evaluations only).
    :meth:`weights` shows the current sampling probabilities.

    - ``snapshot_every`` (training episodes) and/or ``win_rate_threshold`` (win rate against the
      pool at a test, after which a new snapshot is added) control snapshots; the first snapshot is
      taken when training begins. ``max_size`` keeps the newest snapshots (plus added fixed ones).
    - ``swap_seats``: the learner's seat rotates per env and episode, so it plays every seat.
    - At every test, the learner plays ``eval_episodes`` greedy games against each opponent (half in
      each seat of a two-seat game) and the Elo ratings are updated game by game.
    - ``opponent_explore``: whether frozen and fixed opponents act with exploration.
    """

    def __init__(self, learner: Any, spec: EnvSpec, max_size: int = 20, snapshot_every: int | None = None,
                 win_rate_threshold: float | None = None, sampling: str = "uniform", priority_exponent: float = 2.0,
                 swap_seats: bool = True, eval_episodes: int = 20, opponent_explore: bool = False,
                 elo_k: float = 32.0, seed: int | None = None, learner_name: str = "learner",
                 fixed_fraction: float | None = None, self_play_fraction: float = 0.0,
                 priority_floor: float = 0.05, score_rate: float | None = 0.05):
        if sampling not in ("uniform", "prioritized"):
            raise ValueError(f"sampling must be 'uniform' or 'prioritized', got {sampling!r}")
        if fixed_fraction is not None and not 0.0 <= fixed_fraction <= 1.0:
            raise ValueError(f"fixed_fraction must be in [0, 1], got {fixed_fraction}")
        if not 0.0 <= self_play_fraction <= 1.0:
            raise ValueError(f"self_play_fraction must be in [0, 1], got {self_play_fraction}")
        if self_play_fraction + (fixed_fraction or 0.0) > 1.0:
            raise ValueError(f"self_play_fraction ({self_play_fraction}) + fixed_fraction ({fixed_fraction}) "
                             f"are shares of the same games and must add up to at most 1")
        if priority_exponent < 0 or priority_floor < 0 or priority_exponent + priority_floor == 0:
            raise ValueError(f"priority_exponent and priority_floor must be >= 0 and not both 0, got "
                             f"{priority_exponent} and {priority_floor}")
        if score_rate is not None and not 0.0 < score_rate <= 1.0:
            raise ValueError(f"score_rate must be in (0, 1] or None, got {score_rate}")
        if snapshot_every is not None and snapshot_every < 1:
            raise ValueError(f"snapshot_every must be >= 1 episodes, got {snapshot_every}")
        if win_rate_threshold is not None and not 0.0 < win_rate_threshold <= 1.0:
            raise ValueError(f"win_rate_threshold must be in (0, 1], got {win_rate_threshold}")
        if max_size < 1 or eval_episodes < 1:
            raise ValueError("max_size and eval_episodes must be >= 1")
        self.learner, self.spec = learner, spec
        self._check_spaces(learner, "learner", range(spec.num_agents))
        self.max_size, self.snapshot_every = int(max_size), snapshot_every
        self.win_rate_threshold, self.sampling = win_rate_threshold, sampling
        self.priority_exponent, self.swap_seats = float(priority_exponent), bool(swap_seats)
        self.eval_episodes, self.opponent_explore = int(eval_episodes), bool(opponent_explore)
        self.learner_name = learner_name
        self.fixed_fraction = None if fixed_fraction is None else float(fixed_fraction)
        self.self_play_fraction, self.priority_floor = float(self_play_fraction), float(priority_floor)
        self.score_rate = None if score_rate is None else float(score_rate)
        self.elo = Elo(k=elo_k)
        self.elo.rating(learner_name)
        self.rng = np.random.default_rng(seed)
        self.opponents: dict[str, Any] = {}
        self.fixed: set[str] = set()
        self.scores: dict[str, float] = {}  # learner's expected score against each opponent (see class doc)
        self.history: list[tuple[int, dict[str, float]]] = []  # (episodes, ratings) after each evaluation
        self._turn = 0
        self._last_snapshot_episode = 0
        self._count = 0

    # ------------------------------------------------------------------ pool contents
    @property
    def names(self) -> list[str]:
        return list(self.opponents)

    def _check_spaces(self, agent: Any, who: str, seats: Sequence[int]) -> None:
        for seat in seats:
            name = self.spec.possible_agents[seat]
            a_space = agent.action_space if isinstance(agent, Agent) else None
            if a_space is not None and a_space != self.spec.action_space(name):
                raise ValueError(f"{who} has action space {a_space} but seat {name!r} has "
                                 f"{self.spec.action_space(name)}")
            o_space = agent.observation_space if isinstance(agent, HasObservationSpace) else None
            if o_space is not None and o_space != self.spec.observation_space(name):
                raise ValueError(f"{who} has observation space {o_space} but seat {name!r} has "
                                 f"{self.spec.observation_space(name)}")

    def add(self, agent: Acting, name: str | None = None, frozen: bool = True) -> str:
        """Add a fixed opponent (e.g. a scripted or random player); it is never evicted."""
        name = name or f"opponent_{len(self.opponents)}"
        if name in self.opponents or name == self.learner_name:
            raise ValueError(f"an opponent named {name!r} is already in the pool")
        if not isinstance(agent, Acting):
            raise TypeError(f"pool opponent {name!r} ({type(agent).__name__}) has no act(obs, mask, explore) method")
        self._check_spaces(agent, f"pool opponent {name!r}", range(self.spec.num_agents))
        self.opponents[name] = agent
        self.fixed.add(name)
        self.elo.rating(name)
        return name

    def add_snapshot(self, episodes: int = 0) -> str:
        """Freeze the learner now; the snapshot starts at the learner's current rating."""
        name = f"snapshot_{self._count}@{episodes}"
        self._count += 1
        self.opponents[name] = snapshot(self.learner, name)
        self.elo.ratings[name] = self.elo.rating(self.learner_name)
        self._last_snapshot_episode = episodes
        snaps = [n for n in self.opponents if n not in self.fixed]
        while len(snaps) > self.max_size:
            old = snaps.pop(0)
            del self.opponents[old]
        return name

    # ------------------------------------------------------------------ matchmaking
    def weights(self, names: Sequence[str] | None = None) -> np.ndarray:
        """Sampling probabilities over ``names`` (default: every opponent) under ``sampling``.

        Example:
            >>> from pettingzoo.classic import tictactoe_v3
            >>> from marl_note.agents import RandomAgent
            >>> from marl_note.trainers import DecentralizedTrainer
            >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=1, num_test_envs=1)
            >>> space = trainer.action_space("player_1")
            >>> pool = OpponentPool(RandomAgent(space), trainer.spec, sampling="prioritized", priority_floor=0.0)
            >>> for name in ("beaten", "even", "unbeaten"):
            ...     _ = pool.add(RandomAgent(space), name=name)
            >>> pool.scores.update(beaten=1.0, even=0.5, unbeaten=0.0)
            >>> pool.weights().round(3).tolist()  # (1 - p) ** 2, normalised
            [0.0, 0.2, 0.8]
        """
        names = self.names if names is None else list(names)
        if self.sampling == "uniform":
            return np.full(len(names), 1.0 / len(names))
        w = np.array([(1.0 - self.scores.get(n, 0.5)) ** self.priority_exponent + self.priority_floor
                      for n in names])
        return w / w.sum()

    def record(self, name: str, score: float) -> None:
        """One training game's ``score`` (1 win, 0.5 draw, 0 loss) against opponent ``name``: moves the
        expected score by ``score_rate`` towards it (nothing with ``score_rate=None``)."""
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"a game score must be in [0, 1], got {score}")
        if self.score_rate is None or name not in self.opponents:
            return
        old = self.scores.get(name, 0.5)
        self.scores[name] = old + self.score_rate * (score - old)

    def sample_opponent(self) -> str:
        """The opponent of one training game: the learner's own name for a self-play game, else an
        opponent in the pool (see the class docstring for the shares and weights)."""
        names = self.names
        if not names and self.self_play_fraction < 1.0:
            raise RuntimeError("the opponent pool is empty: add an opponent or a snapshot first")
        u = self.rng.random() if self.fixed_fraction is not None or self.self_play_fraction > 0 else 1.0
        if u < self.self_play_fraction:
            return self.learner_name
        if self.fixed_fraction is not None:
            fixed = [n for n in names if n in self.fixed]
            snaps = [n for n in names if n not in self.fixed]
            use_fixed = u < self.self_play_fraction + self.fixed_fraction
            names = (fixed if use_fixed else snaps) or fixed or snaps
        if self.sampling == "uniform":
            return names[int(self.rng.integers(len(names)))]
        return names[int(self.rng.choice(len(names), p=self.weights(names)))]

    def draw_table(self) -> dict[str, float]:
        """The probability of each opponent in the next training game, as :meth:`sample_opponent` draws
        them (the learner's own name: a self-play game); what the pool trainer's actors draw from.

        Example:
            >>> from pettingzoo.classic import tictactoe_v3
            >>> from marl_note.agents import RandomAgent
            >>> from marl_note.trainers import DecentralizedTrainer
            >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=1, num_test_envs=1)
            >>> space = trainer.action_space("player_1")
            >>> pool = OpponentPool(RandomAgent(space), trainer.spec, self_play_fraction=0.5)
            >>> for name in ("a", "b"):
            ...     _ = pool.add(RandomAgent(space), name=name)
            >>> pool.draw_table()
            {'learner': 0.5, 'a': 0.25, 'b': 0.25}
        """
        names = self.names
        if not names and self.self_play_fraction < 1.0:
            raise RuntimeError("the opponent pool is empty: add an opponent or a snapshot first")
        out: dict[str, float] = {}
        if self.self_play_fraction > 0:
            out[self.learner_name] = self.self_play_fraction
        rest = 1.0 - self.self_play_fraction
        groups = [(names, rest)]
        if self.fixed_fraction is not None:
            fixed = [n for n in names if n in self.fixed]
            snaps = [n for n in names if n not in self.fixed]
            share = min(self.fixed_fraction, rest)
            groups = [(fixed, share), (snaps, rest - share)] if fixed and snaps else [(fixed or snaps, rest)]
        for group, share in groups:
            if share > 0 and group:
                for name, p in zip(group, self.weights(group)):
                    out[name] = out.get(name, 0.0) + share * float(p)
        return out

    def __call__(self, env_index: int) -> tuple[list[Any], list[bool], list[bool], tuple[str, int]]:
        """Matchmaker: the seating of one env's next episode, tagged ``(opponent, learner seat)``."""
        if not self.opponents:
            self.add_snapshot(0)
        n = self.spec.num_agents
        seat = (self._turn % n) if self.swap_seats else 0
        self._turn += 1
        opp = self.sample_opponent()
        if opp == self.learner_name:  # self-play: the learner in every seat, every seat learning
            return [self.learner] * n, [True] * n, [True] * n, (opp, seat)
        agents = [self.opponents[opp]] * n
        agents[seat] = self.learner
        explore = [self.opponent_explore] * n
        explore[seat] = True
        learn = [False] * n
        learn[seat] = True
        return agents, explore, learn, (opp, seat)

    # ------------------------------------------------------------------ trainer callbacks
    def on_train_begin(self, trainer: Any) -> None:
        if self.fixed_fraction and not self.fixed:
            raise ValueError(f"fixed_fraction={self.fixed_fraction} but the pool has no fixed opponents: "
                             f"add one with pool.add(agent, name) before training")
        if all(n in self.fixed for n in self.opponents):
            self.add_snapshot(0)

    def on_episode_end(self, trainer: Any, episode: int, logs: dict) -> None:
        """A finished training game against a pool opponent updates the learner's expected score."""
        tag = logs.get("tag")
        if self.score_rate is None or not isinstance(tag, tuple) or len(tag) != 2 or tag[0] not in self.opponents:
            return
        self.record(tag[0], game_score(logs["returns"], tag[1]))

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        if self.snapshot_every and episodes - self._last_snapshot_episode >= self.snapshot_every:
            self.add_snapshot(episodes)

    def on_test_end(self, trainer: Any, result: dict, episodes: int) -> None:
        score = self.evaluate(trainer, episodes)
        if self.win_rate_threshold is not None and score >= self.win_rate_threshold:
            self.add_snapshot(episodes)

    def on_train_end(self, trainer: Any, out: dict) -> None:
        out["elo"] = dict(self.elo.ratings)
        out["elo_history"] = [(e, dict(r)) for e, r in self.history]
        out["pool"] = self.names

    def plot_series(self) -> dict[str, list[tuple[int, float]]]:
        return {f"{self.learner_name} Elo": [(e, r[self.learner_name]) for e, r in self.history]}

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, trainer: Any, episodes: int = 0) -> float:
        """Play the learner against every opponent, update Elo; return its mean score (win=1, draw=.5)."""
        n = self.spec.num_agents
        all_scores = []
        for name, opp in list(self.opponents.items()):
            scores = []
            seats = range(n) if self.swap_seats else [0]
            per_seat = max(1, self.eval_episodes // len(seats))
            for seat in seats:
                agents = [opp] * n
                agents[seat] = self.learner
                rewards = trainer.test(agents, episodes=per_seat)["rewards"]
                for game in rewards:
                    s = game_score(game, seat)
                    self.elo.update(self.learner_name, name, s)
                    scores.append(s)
            self.scores[name] = float(np.mean(scores))
            all_scores.extend(scores)
        self.history.append((episodes, dict(self.elo.ratings)))
        return float(np.mean(all_scores)) if all_scores else 0.0


def game_score(returns: np.ndarray, seat: int) -> float:
    """1 if ``seat``'s return beats every other seat's, 0.5 if it ties the best of them, else 0."""
    returns = np.asarray(returns, dtype=np.float64)
    mine = returns[seat]
    theirs = np.delete(returns, seat).max() if len(returns) > 1 else 0.0
    return 1.0 if mine > theirs else (0.5 if mine == theirs else 0.0)
