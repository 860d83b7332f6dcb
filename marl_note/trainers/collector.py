"""Turn-aware experience collection over a vector env.

Each step the collector batches inference per (policy, explore) group across every env and seat
that policy controls, validates the actions against the seat's space and mask and steps the envs.
Each learner gets one assembler (:mod:`marl_note.trainers.assembly`) that turns the acted rows and
step results into its batch: per-(env, agent) transitions for a seat learner (a transition opens
when an agent acts and closes when that same agent next acts or its episode ends, then as terminal
or truncated, with its own final observation), joint per-step rows for a centralised one. Only
seats that learn have transitions assembled.

An agent whose ``accepts_env_ids`` attribute is true is called as ``act(obs, mask, explore=...,
env_ids=...)``, ``env_ids[k]`` being the env index of row ``k``, so it can keep per-env state
(MADDPG's exploration noise). An agent with ``begin_episode(env_ids)``
(:class:`~marl_note.agents.base.EpisodeAware`) is told as each env it sits in starts an episode
(NFSP draws its policy for the episode there).

With ``check_finite`` (the default) every step result and reset observation is checked before it
is absorbed: a NaN/inf reward or float observation raises
:class:`~marl_note.types.NonFiniteError` naming the env index, the agent and the env step. With
``check_spaces`` (the default) every observation must fit its space's shape and dtype (whole
numbers for integer spaces): otherwise a ``ValueError`` names the env index, agent and step and
what was expected and what came; a value outside the space's bounds warns once per space. Both
checks share one pass over each vector step (:mod:`marl_note.trainers.step_check`).

``episode_begin(env_index)`` and ``episode_end(env_index, returns, length, tag)``, when given, are
called as each episode starts (at ``reset`` and when an env starts its next episode) and ends;
they cost one call per episode, and nothing when left out.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np

from marl_note.agents.base import Agent, EpisodeAware, JointLearner, LearningAgent, PerEnvAgent
from marl_note.envs.adapters import StepResult
from marl_note.trainers.assembly import Assembler, JointAssembler, SeatAssembler
from marl_note.trainers.seats import accepts_env_ids, joint_learner_of
from marl_note.trainers.step_check import StepCheck
from marl_note.types import EnvSpec, stack_obs


@dataclass
class CollectStats:
    """Counters and finished-episode results of one ``collect`` call.

    Example:
        >>> stats = CollectStats(env_steps=9, agent_steps=9, episodes=1, returns=[np.array([1.0, -1.0])])
        >>> stats.returns_array(2).tolist()
        [[1.0, -1.0]]
    """

    env_steps: int = 0
    agent_steps: int = 0
    episodes: int = 0
    returns: list[np.ndarray] = field(default_factory=list)  # one [num_agents] row per finished episode
    lengths: list[int] = field(default_factory=list)  # env steps per finished episode
    tags: list[Any] = field(default_factory=list)  # the matchmaker's tag of each finished episode

    def returns_array(self, num_agents: int) -> np.ndarray:
        return np.array(self.returns, dtype=np.float64).reshape(-1, num_agents)


def check_actions(actions: Any, space: gym.Space, masks: np.ndarray | None, n: int, who: str) -> tuple[np.ndarray, Any]:
    """Validate a batch of actions for one seat; return (actions as stored, actions for the env).

    Raises ValueError naming the seat for a wrong shape, an out-of-space or an illegal (masked)
    action. Box actions are clipped to the bounds for the env (the raw action is stored).
    """
    a = np.asarray(actions)
    if isinstance(space, gym.spaces.Discrete):
        if a.shape != (n,):
            raise ValueError(f"{who} returned actions of shape {a.shape}; expected ({n},) for {space}")
        kind = a.dtype.kind  # (cheaper than np.issubdtype, asked at every step)
        if kind not in "iu":
            if not (kind == "f" and np.all(a == np.round(a))):
                raise ValueError(f"{who} returned non-integer actions {a[:5]} for {space}")
            a = a.astype(np.int64)
        # the bounds in Python: a collector's batch is small, and a numpy call costs more than the test
        start, values = int(space.start), a.tolist()
        if n and (min(values) < start or max(values) >= start + int(space.n)):
            bad = next(v for v in values if not start <= v < start + int(space.n))
            raise ValueError(f"{who} returned action {bad} outside {space}")
        if masks is not None:
            legal = masks[np.arange(n), a - space.start]  # (numpy arithmetic: a uint batch minus any start)
            if not legal.all():
                k = int(np.flatnonzero(~legal)[0])
                raise ValueError(f"{who} returned illegal (masked) action {a[k]}; legal actions were "
                                 f"{(np.flatnonzero(masks[k]) + space.start).tolist()}")
        return a, a
    if isinstance(space, gym.spaces.Box):
        if a.shape != (n, *space.shape):
            raise ValueError(f"{who} returned actions of shape {a.shape}; expected {(n, *space.shape)} for {space}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{who} returned non-finite actions for {space}")
        return a, np.clip(a, space.low, space.high).astype(space.dtype, copy=False)
    if len(a) != n or not all(space.contains(x) for x in a):
        raise ValueError(f"{who} returned actions outside {space}")
    return a, a


class Collector:
    """Steps a vector env with one agent per seat and assembles per-stream transitions.

    ``check_finite=False`` turns off the check for non-finite rewards and float observations,
    ``check_spaces=False`` the check of observations against their spaces (see the module
    docstring); together they cost a few microseconds per vector step.

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> from marl_note.envs import SyncVectorEnv, make_spec, adapt
        >>> from marl_note.agents import RandomAgent
        >>> venv = SyncVectorEnv([tictactoe_v3.env] * 2)
        >>> spec = make_spec(adapt(tictactoe_v3.env()))
        >>> agents = [RandomAgent(spec.action_space(a), seed=0) for a in spec.possible_agents]
        >>> col = Collector(venv, spec, agents, explore=[True, True], learn=[False, False])
        >>> col.reset(seed=0)
        >>> col.collect(n_episodes=4).episodes
        4
    """

    def __init__(self, venv: Any, spec: EnvSpec, agents: Sequence[Agent], explore: Sequence[bool],
                 learn: Sequence[bool], matchmaker: Any = None, check_finite: bool = True,
                 episode_begin: Callable[[int], Any] | None = None,
                 episode_end: Callable[[int, np.ndarray, int, Any], Any] | None = None, check_spaces: bool = True):
        self.venv, self.spec = venv, spec
        self.episode_begin, self.episode_end = episode_begin, episode_end
        self.step_check = (StepCheck(spec, finite=check_finite, spaces=check_spaces)
                           if check_finite or check_spaces else None)
        self.num_envs, self.num_agents = venv.num_envs, spec.num_agents
        self.seat_of = {a: i for i, a in enumerate(spec.possible_agents)}
        # inference groups, one per (policy object, explore flag), and learners, one per distinct
        # learning object with its assembler; both registries only grow (a matchmaker may bring
        # new opponents)
        self._group_index: dict[tuple[int, bool], int] = {}
        self.group_agent: list[Agent] = []
        self.group_explore: list[bool] = []
        self.group_env_ids: list[bool] = []  # accepts_env_ids of each group's agent, asked once
        self._labels: dict[tuple[int, str], str] = {}  # (group, seat) -> how errors name the agent there
        self._joint_of: dict[int, Any] = {}  # id(agent) -> its joint learner or None, asked once
        self._learner_index: dict[int, int] = {}
        self.learners: list[LearningAgent | JointLearner] = []
        self.assemblers: list[Assembler] = []
        # per env and seat: the inference group; per env: the assemblers that hear each agent's
        # actions, every assembler of the env (told each step result) and the matchmaker's tag
        self.env_group = np.zeros((self.num_envs, self.num_agents), dtype=np.int64)
        self._group_of: list[dict[str, int]] = [{} for _ in range(self.num_envs)]  # env_group by name, plain ints
        self.env_listeners: list[dict[str, tuple[Assembler, ...]]] = [{} for _ in range(self.num_envs)]
        self.env_assemblers: list[tuple[Assembler, ...]] = [() for _ in range(self.num_envs)]
        self.env_tag: list[Any] = [None] * self.num_envs
        self._episode_aware: dict[type, bool] = {}  # agent class -> EpisodeAware, asked once per class
        self.env_episode_aware: list[tuple[EpisodeAware, ...]] = [() for _ in range(self.num_envs)]
        self.matchmaker = matchmaker
        self.pending: dict[int, StepResult] = {}
        for i in range(self.num_envs):
            self.assign(i, agents, explore, learn)
        # per env: each seat's return and the length of the running episode, and the env steps over this
        # collector's life; Python numbers, as they change at every step (a numpy update costs more there)
        self.ep_return: list[list[float]] = [[0.0] * self.num_agents for _ in range(self.num_envs)]
        self.ep_len: list[int] = [0] * self.num_envs
        self.env_steps: list[int] = [0] * self.num_envs

    def assign(self, i: int, agents: Sequence[Agent], explore: Sequence[bool], learn: Sequence[bool],
               tag: Any = None) -> None:
        """Seat ``agents`` in env ``i`` (from its next action on); ``tag`` is reported per episode."""
        names = self.spec.possible_agents
        learner_of_seat: list[int] = []
        for seat, (agent, ex, ln) in enumerate(zip(agents, explore, learn)):
            key = (id(agent), bool(ex))
            if key not in self._group_index:
                self._group_index[key] = len(self.group_agent)
                self.group_agent.append(agent)
                self.group_explore.append(bool(ex))
                self.group_env_ids.append(accepts_env_ids(agent))
            self.env_group[i, seat] = self._group_index[key]
            self._group_of[i][names[seat]] = self._group_index[key]
            learner_of_seat.append(self._learner(agent) if ln else -1)
        # a centralised learner hears every agent of its env; a learning seat is also heard by its
        # own learner's assembler, centralised learner beside it or not
        central = sorted({k for k in learner_of_seat if k >= 0 and self.assemblers[k].hears_every_seat})
        everyone = tuple(self.assemblers[k] for k in central)
        self.env_listeners[i] = {name: everyone + ((self.assemblers[k],) if k >= 0 and k not in central else ())
                                 for name, k in zip(names, learner_of_seat)}
        heard: dict[int, Assembler] = {}
        for listeners in self.env_listeners[i].values():
            heard.update((id(asm), asm) for asm in listeners)
        self.env_assemblers[i] = tuple(heard.values())
        self.env_tag[i] = tag
        aware: dict[int, EpisodeAware] = {}
        for agent in agents:
            kind = type(agent)  # by class, not id(): a freed agent's id may come back as another agent's
            if kind not in self._episode_aware:  # (a Protocol check is slow: ask once per class)
                self._episode_aware[kind] = isinstance(agent, EpisodeAware)
            if self._episode_aware[kind]:
                aware[id(agent)] = cast(EpisodeAware, agent)
        self.env_episode_aware[i] = tuple(aware.values())

    def _begin_episode(self, i: int) -> None:
        """Env ``i`` starts an episode: tell its episode-aware agents."""
        if self.env_episode_aware[i]:
            ids = np.array([i], np.int64)
            for agent in self.env_episode_aware[i]:
                agent.begin_episode(ids)

    def _learner(self, agent: Agent) -> int:
        """The index of the learner that owns ``agent``'s transitions, registering it if new."""
        if id(agent) not in self._joint_of:  # (a Protocol check is slow: ask once per agent)
            self._joint_of[id(agent)] = joint_learner_of(agent)
        joint = self._joint_of[id(agent)]
        owner: Any = agent if joint is None else joint
        if id(owner) not in self._learner_index:
            if joint is not None and self.spec.turn_based:
                raise TypeError(f"{type(owner).__name__} learns from joint per-step data, which needs a "
                                f"Parallel env; this env is turn-based")
            self._learner_index[id(owner)] = len(self.learners)
            self.learners.append(owner)
            assembler: Assembler = (SeatAssembler(self.spec, self.num_envs) if joint is None
                                    else JointAssembler(self.spec, self.num_envs))
            assembler.reset(self.pending)  # (a learner seated mid-run: the envs' current global states)
            self.assemblers.append(assembler)
        return self._learner_index[id(owner)]

    def _matchmake(self, i: int) -> None:
        if self.matchmaker is not None:
            self.assign(i, *self.matchmaker(i))

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (env i seeded ``seed + i``) and drop unfinished transitions."""
        pending = self.venv.reset(seed=seed)
        if self.step_check is not None:
            self.step_check.reset(pending, self.env_steps)
        self.pending = pending
        for i in range(self.num_envs):
            self._matchmake(i)
            self._begin_episode(i)
        for assembler in self.assemblers:
            assembler.reset(pending)
        self.ep_return = [[0.0] * self.num_agents for _ in range(self.num_envs)]
        self.ep_len = [0] * self.num_envs
        if self.episode_begin is not None:
            for i in range(self.num_envs):
                self.episode_begin(i)

    def collect(self, n_steps: int | None = None, n_episodes: int | None = None,
                stop: Callable[[int], bool] | None = None) -> CollectStats:
        """Step until ``n_steps`` env steps (all envs advance together) or ``n_episodes`` episodes.

        With ``n_episodes`` each env gets an even share of the episodes and stops once it has
        finished them, so the result is not biased towards short episodes. ``stop(env_steps)``,
        asked after every step of the envs with the env steps collected so far, ends the
        collection early when it returns True (a budget that runs out mid-chunk).
        """
        if (n_steps is None) == (n_episodes is None):
            raise ValueError("collect needs exactly one of n_steps or n_episodes")
        if not self.pending:
            self.reset()
        stats = CollectStats()
        active = list(range(self.num_envs))
        quota = done_eps = None
        if n_episodes is not None:
            if n_episodes < 1:
                raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
            quota = np.full(self.num_envs, n_episodes // self.num_envs)
            quota[: n_episodes % self.num_envs] += 1
            done_eps = np.zeros(self.num_envs, dtype=np.int64)
            active = [i for i in active if quota[i] > 0]
        while active:
            actions = self._act(active)
            stats.agent_steps += sum(len(a) for a in actions.values())
            results = self.venv.step(actions)
            if self.step_check is not None:
                self.step_check.step(results, self.ep_len, self.env_steps)
            ep_len, env_steps = self.ep_len, self.env_steps
            for i in results:
                ep_len[i] += 1
                env_steps[i] += 1
            stats.env_steps += len(results)
            for i, res in results.items():
                if self._absorb(i, res, stats) and done_eps is not None:
                    done_eps[i] += 1
            if quota is not None and done_eps is not None:
                active = [i for i in active if done_eps[i] < quota[i]]
            elif n_steps is not None and stats.env_steps >= n_steps:
                break
            if stop is not None and active and stop(stats.env_steps):
                break
        return stats

    def _act(self, active: list[int]) -> dict[int, dict[str, Any]]:
        spec = self.spec
        ngroups = len(self.group_agent)
        who: list[list[tuple[int, str]]] = [[] for _ in range(ngroups)]
        obs: list[list[Any]] = [[] for _ in range(ngroups)]
        masks: list[list[Any]] = [[] for _ in range(ngroups)]
        pending, has_mask = self.pending, spec.has_action_mask
        for i in active:
            res = pending[i]
            group_of = self._group_of[i]
            for name, ob in res.obs.items():
                g = group_of[name]
                who[g].append((i, name))
                obs[g].append(ob)
                if has_mask:
                    masks[g].append(res.masks[name])
        actions: dict[int, dict[str, Any]] = {i: {} for i in active}
        env_listeners = self.env_listeners
        for g in range(ngroups):
            if not who[g]:
                continue
            batch: Any = stack_obs(obs[g])  # a goal env's observations stack to a dict of arrays
            mask = np.stack(masks[g]) if spec.has_action_mask else None
            agent = self.group_agent[g]
            if self.group_env_ids[g]:
                env_ids = np.fromiter((i for i, _ in who[g]), np.int64, len(who[g]))
                raw = cast(PerEnvAgent, agent).act(batch, mask, explore=self.group_explore[g], env_ids=env_ids)
            else:
                raw = agent.act(batch, mask, explore=self.group_explore[g])
            # all seats of a group share one action space (checked by the trainer)
            first = who[g][0][1]
            space = spec.action_spaces[first]
            stored, for_env = check_actions(raw, space, mask, len(who[g]), self._who(g, first))
            # Discrete actions reach the env as Python ints, as PettingZoo's own loops pass them (a
            # numpy integer takes the slow path of the space's contains() in every env step)
            rows = for_env.tolist() if isinstance(space, gym.spaces.Discrete) else for_env
            for k, (i, name) in enumerate(who[g]):
                actions[i][name] = rows[k]
                for assembler in env_listeners[i][name]:
                    assembler.on_act(i, name, obs[g][k], stored[k], None if mask is None else mask[k])
        return actions

    def _who(self, g: int, seat: str) -> str:
        """How errors name group ``g``'s agent acting in ``seat`` (built once, not at every step)."""
        key = (g, seat)
        if key not in self._labels:
            self._labels[key] = f"agent {type(self.group_agent[g]).__name__} in seat {seat!r}"
        return self._labels[key]

    def _absorb(self, i: int, res: StepResult, stats: CollectStats) -> bool:
        """Fold one env's step result (its step already counted) into returns and transitions; True
        if an episode ended."""
        for assembler in self.env_assemblers[i]:
            assembler.on_step(i, res)
        seat_of, ep_return = self.seat_of, self.ep_return[i]
        for agent, r in res.rewards.items():
            ep_return[seat_of[agent]] += float(r)  # (float64 sums, as a numpy row of returns would add)
        ended = res.episode_over
        if ended:
            stats.episodes += 1
            stats.returns.append(np.array(ep_return, dtype=np.float64))
            stats.lengths.append(self.ep_len[i])
            stats.tags.append(self.env_tag[i])
            if self.episode_end is not None:
                self.episode_end(i, stats.returns[-1].copy(), stats.lengths[-1], self.env_tag[i])
            self.ep_return[i] = [0.0] * self.num_agents
            self.ep_len[i] = 0
            self._matchmake(i)
            self._begin_episode(i)
            if self.episode_begin is not None:
                self.episode_begin(i)
        self.pending[i] = res
        return ended

    def flush(self) -> int:
        """Hand every learning policy its closed transitions (``observe``, or ``observe_joint`` for
        centralised learners); return how many."""
        total = 0
        for learner, assembler in zip(self.learners, self.assemblers):
            size = len(assembler)
            if size:
                total += size
                assembler.deliver(learner)
        return total
