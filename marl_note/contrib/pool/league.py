"""Self-play in pool mode: an :class:`~marl_note.trainers.selfplay.OpponentPool` matchmaker run by the actors.

The opponent pool stays in the learner (snapshots, PFSP scores, Elo, evaluations). A
:class:`LeaguePublisher` turns it into numpy arrays published like a learner's weights (a
:class:`~marl_note.contrib.pool.board.WeightBoard` for actor processes, Ray's object store for
Ray actors):

- ``probs``: the probability of each opponent in the next training game (:meth:`OpponentPool.draw_table`),
  indexed ``[self-play, fixed opponent 0..F-1, snapshot slot 0..S-1]``;
- ``ids``: the snapshot id each of the ``S = max_size`` slots holds (-1: empty);
- ``s{j}.*``: slot ``j``'s acting state (the snapshot's numpy weights, counters, exploration state).

In each actor an :class:`ActorLeague` is the collector's matchmaker: at the start of every episode
it reloads the arrays when their version moved (a new snapshot's weights go into that slot's
acting shell), draws the opponent from ``probs`` and seats the learner (rotating its seat as the
opponent pool does) against it, learning and exploring only in the learner's seat (every seat in a
self-play game). It tags each episode ``(kind, ref, seat)``; the learner maps the tag to the
opponent pool's ``(name, seat)`` (:meth:`LeaguePublisher.tag_name`), so the pool's
``on_episode_end`` updates its PFSP scores from the actors' games. Fixed opponents (added with
:meth:`OpponentPool.add` before training) are sent to the actors once, by value.

Example:
    >>> import numpy as np
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.agents.torch import DQN
    >>> from marl_note.trainers import DecentralizedTrainer
    >>> from marl_note.trainers.selfplay import OpponentPool
    >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=1, num_test_envs=1)
    >>> learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=0)
    >>> publisher = LeaguePublisher(OpponentPool(learner, trainer.spec, max_size=3), [learner])
    >>> arrays = publisher.state()
    >>> arrays["probs"].tolist(), arrays["ids"].tolist(), publisher.tag_name(("snap", 0, 1))
    ([0.0, 1.0, 0.0, 0.0], [0, -1, -1], ('snapshot_0@0', 1))
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ActorLeague", "LeagueConfig", "LeaguePublisher", "check_matchmaker"]


def check_matchmaker(matchmaker: Any) -> None:
    """Refuse, before any work, a matchmaker the actors cannot run (only an OpponentPool)."""
    from marl_note.trainers.selfplay import OpponentPool

    if matchmaker is not None and not isinstance(matchmaker, OpponentPool):
        raise ValueError(f"with actors the matchmaker must be an OpponentPool (the actors draw its opponents "
                         f"from published snapshots); got {type(matchmaker).__name__}. Use actors=None for "
                         f"another matchmaker")


@dataclass
class LeagueConfig:
    """What an actor's :class:`ActorLeague` is started with (part of the actor's config)."""

    learner: int  # the index of the opponent pool's learner among the pool's learners
    num_agents: int
    swap_seats: bool
    opponent_explore: bool
    fixed: list[Any]  # the fixed opponents, in the order of ``probs``
    slots: int


class LeaguePublisher:
    """The learner's side: the opponent pool as versioned arrays (see the module docstring)."""

    def __init__(self, opponents: Any, learners: list[Any]):
        ks = [k for k, a in enumerate(learners) if a is opponents.learner]
        if not ks:
            raise ValueError("the OpponentPool's learner is not a learning seat of this run: seat it in agents "
                             "with learning_mask 1")
        self.pool, self.k = opponents, ks[0]
        self.fixed = [n for n in opponents.names if n in opponents.fixed]
        self.slots = int(opponents.max_size)
        self.slot_of: dict[str, int] = {}
        self.name_by_id: dict[int, str] = {}
        self.next_id = 0
        self.version = -1
        like = opponents.learner.remote.state()
        self.arrays: dict[str, np.ndarray] = {"probs": np.zeros(1 + len(self.fixed) + self.slots),
                                              "ids": np.full(self.slots, -1, np.int64)}
        for j in range(self.slots):
            self.arrays.update({f"s{j}.{key}": np.zeros_like(v) for key, v in like.items()})
        self._published: tuple[bytes, bytes] | None = None

    def config(self, num_agents: int) -> LeagueConfig:
        pool = self.pool
        return LeagueConfig(learner=self.k, num_agents=num_agents, swap_seats=pool.swap_seats,
                            opponent_explore=pool.opponent_explore,
                            fixed=[pool.opponents[n] for n in self.fixed], slots=self.slots)

    def state(self) -> dict[str, np.ndarray]:
        """The arrays for the pool's current contents and draw probabilities (new snapshots into free slots)."""
        pool, arrays = self.pool, self.arrays
        if not pool.opponents:
            pool.add_snapshot(0)
        late = [n for n in pool.fixed if n not in self.fixed and n in pool.opponents]
        if late:
            raise ValueError(f"fixed opponents {late} were added to the OpponentPool after the actors started; "
                             f"with actors, add fixed opponents before training")
        snaps = [n for n in pool.names if n not in pool.fixed]
        for name in [n for n in self.slot_of if n not in snaps]:
            arrays["ids"][self.slot_of.pop(name)] = -1
        for name in snaps:
            if name in self.slot_of:
                continue
            free = [j for j in range(self.slots) if arrays["ids"][j] < 0]
            j = free[0]  # the pool keeps at most max_size snapshots
            self.slot_of[name] = j
            arrays["ids"][j] = self.next_id
            self.name_by_id[self.next_id] = name
            self.next_id += 1
            for key, value in pool.opponents[name].agent.remote.state().items():
                arrays[f"s{j}.{key}"][...] = value
        table = pool.draw_table()
        probs = arrays["probs"]
        probs[:] = 0.0
        probs[0] = table.get(pool.learner_name, 0.0)
        for f, name in enumerate(self.fixed):
            probs[1 + f] = table.get(name, 0.0)
        for name, j in self.slot_of.items():
            probs[1 + len(self.fixed) + j] = table.get(name, 0.0)
        return arrays

    def changed(self) -> dict[str, np.ndarray] | None:
        """The arrays with a new version if the pool's contents or probabilities moved since the last call."""
        arrays = self.state()
        key = (arrays["probs"].tobytes(), arrays["ids"].tobytes())
        if key == self._published:
            return None
        self._published = key
        self.version += 1
        return arrays

    def tag_name(self, tag: Any) -> Any:
        """An actor's episode tag ``(kind, ref, seat)`` as the opponent pool's ``(opponent name, seat)``."""
        if not isinstance(tag, tuple) or len(tag) != 3:
            return tag
        kind, ref, seat = tag
        if kind == "self":
            return self.pool.learner_name, seat
        if kind == "fixed":
            return self.fixed[ref], seat
        return self.name_by_id.get(ref, f"snapshot id {ref}"), seat


class ActorLeague:
    """The actor's side: the collector's matchmaker over the published league (module docstring)."""

    def __init__(self, config: LeagueConfig, source: Any, learner: Any, template: Any, rng: np.random.Generator,
                 turn: int):
        self.config, self.source, self.learner, self.rng, self.turn = config, source, learner, rng, turn
        self.version = -1
        self.probs = np.zeros(1 + len(config.fixed) + config.slots)
        self.ids = np.full(config.slots, -1, np.int64)
        self.shells = []
        for _ in range(config.slots):
            shell = copy.deepcopy(template)
            shell.rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
            self.shells.append(shell)

    def refresh(self) -> None:
        got = self.source.read(newer_than=self.version)
        if got is None:
            return
        arrays, self.version = got
        for j, new in enumerate(arrays["ids"]):
            if new >= 0 and new != self.ids[j]:
                prefix = f"s{j}."
                self.shells[j].remote.load({k[len(prefix):]: v for k, v in arrays.items()
                                                  if k.startswith(prefix)}, int(new))
        self.ids = arrays["ids"]
        self.probs = arrays["probs"] / arrays["probs"].sum()

    def __call__(self, env_index: int) -> tuple[list[Any], list[bool], list[bool], tuple[str, int, int]]:
        self.refresh()
        if self.version < 0:
            raise RuntimeError("the actor has no opponent pool yet: the learner publishes it before the actors start")
        cfg, n = self.config, self.config.num_agents
        seat = (self.turn % n) if cfg.swap_seats else 0
        self.turn += 1
        j = int(self.rng.choice(len(self.probs), p=self.probs))
        if j == 0:  # self-play: the learner in every seat, every seat learning
            return [self.learner] * n, [True] * n, [True] * n, ("self", 0, seat)
        nfixed = len(cfg.fixed)
        if j <= nfixed:
            opponent, tag = cfg.fixed[j - 1], ("fixed", j - 1, seat)
        else:
            opponent, tag = self.shells[j - 1 - nfixed], ("snap", int(self.ids[j - 1 - nfixed]), seat)
        agents = [opponent] * n
        agents[seat] = self.learner
        explore = [cfg.opponent_explore] * n
        explore[seat] = True
        learn = [False] * n
        learn[seat] = True
        return agents, explore, learn, tag
