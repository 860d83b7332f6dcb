"""Turn-aware experience collection over a vector env.

Each step the collector batches inference per (policy, explore) group across every env and seat
that policy controls, validates the actions against the seat's space and mask, steps the envs and
assembles transitions per (env, agent) stream: a transition opens when an agent acts and closes
when that same agent next acts or its episode ends (then as terminal or truncated, with its own
final observation). Only seats that learn have transitions assembled.

An agent whose ``accepts_env_ids`` attribute is true is called as ``act(obs, mask, explore=...,
env_ids=...)``, ``env_ids[k]`` being the env index of row ``k``, so it can keep per-env state
(MADDPG's exploration noise).

With ``check_finite`` (the default) every step result and reset observation is checked before it
is absorbed: a NaN/inf reward or float observation raises
:class:`~marl_note.types.NonFiniteError` naming the env index, the agent and the env step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.trainers.finite import FiniteCheck
from marl_note.types import EnvSpec, JointTransitions, Transitions, space_shape_dtype, stack_obs


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
        if not np.issubdtype(a.dtype, np.integer):
            if not (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a))):
                raise ValueError(f"{who} returned non-integer actions {a[:5]} for {space}")
            a = a.astype(np.int64)
        idx = a - space.start
        bad = (idx < 0) | (idx >= space.n)
        if bad.any():
            raise ValueError(f"{who} returned action {a[bad][0]} outside {space}")
        if masks is not None and not masks[np.arange(n), idx].all():
            k = int(np.flatnonzero(~masks[np.arange(n), idx])[0])
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


class _Stream:
    """Column lists of one learning policy's closed transitions, stacked on ``flush``."""

    __slots__ = ("obs", "act", "rew", "next_obs", "term", "trunc", "mask", "next_mask", "stream")
    joint = False

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.rew)

    def take(self, has_mask: bool) -> Transitions:
        t = Transitions(obs=stack_obs(self.obs), act=np.stack(self.act), rew=np.asarray(self.rew, np.float32),
                        next_obs=stack_obs(self.next_obs), terminated=np.asarray(self.term, bool),
                        truncated=np.asarray(self.trunc, bool),
                        mask=np.stack(self.mask) if has_mask else None,
                        next_mask=np.stack(self.next_mask) if has_mask else None,
                        stream=np.asarray(self.stream, np.int64))
        self.__init__()
        return t


class _JointStream:
    """Rows of joint per-step data for a centralised learner, padded over ``possible_agents``.

    With action masks, ``mask``/``next_mask`` rows the env gave no mask for (the agent did not act,
    or left without a final mask) are all True: unconstrained, never an all-illegal row.
    """

    joint = True

    def __init__(self, spec: EnvSpec):
        self.spec = spec
        self.shapes = {a: space_shape_dtype(spec.observation_space(a)) for a in spec.possible_agents}
        self.act_shapes = {a: space_shape_dtype(spec.action_space(a)) for a in spec.possible_agents}
        self.rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, i: int, acted: dict[str, tuple], res: Any) -> None:
        self.rows.append((i, acted, res.rewards, res.terminated, res.truncated, res.obs, res.final_obs,
                          res.masks, res.final_masks))

    def take(self) -> JointTransitions:
        agents = self.spec.possible_agents
        n, size = len(agents), len(self.rows)
        obs = {a: np.zeros((size, *self.shapes[a][0]), self.shapes[a][1]) for a in agents}
        next_obs = {a: np.zeros((size, *self.shapes[a][0]), self.shapes[a][1]) for a in agents}
        act = {a: np.zeros((size, *self.act_shapes[a][0]), self.act_shapes[a][1]) for a in agents}
        rew = np.zeros((size, n), np.float32)
        term = np.zeros((size, n), bool)
        trunc = np.zeros((size, n), bool)
        alive = np.zeros((size, n), bool)
        stream = np.zeros(size, np.int64)
        masked = self.spec.has_action_mask  # then every action space is Discrete (make_spec checks)
        mask = {a: np.ones((size, int(self.spec.action_space(a).n)), bool) for a in agents} if masked else None
        next_mask = {a: m.copy() for a, m in mask.items()} if masked else None
        for b, (i, acted, rewards, terms, truncs, nxt, final, masks, final_masks) in enumerate(self.rows):
            stream[b] = i
            for j, a in enumerate(agents):
                if a in acted:
                    alive[b, j] = True
                    obs[a][b], act[a][b], own_mask = acted[a]
                    rew[b, j] = rewards.get(a, 0.0)
                    term[b, j] = terms.get(a, False)
                    trunc[b, j] = truncs.get(a, False)
                    if a in final:
                        next_obs[a][b], nm = final[a], final_masks.get(a)
                    elif a in nxt:
                        next_obs[a][b], nm = nxt[a], masks.get(a)
                    else:  # vanished without a final observation: cut as truncated
                        next_obs[a][b], nm = acted[a][0], own_mask
                        trunc[b, j] = True
                    if masked:
                        mask[a][b] = own_mask
                        if nm is not None:
                            next_mask[a][b] = nm
        self.rows = []
        return JointTransitions(tuple(agents), obs, act, rew, next_obs, term, trunc, alive, stream,
                                mask=mask, next_mask=next_mask)


class Collector:
    """Steps a vector env with one agent per seat and assembles per-stream transitions.

    ``check_finite=False`` turns off the check for non-finite rewards and float observations
    (see the module docstring); it costs a few microseconds per vector step.

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

    def __init__(self, venv: Any, spec: EnvSpec, agents: Sequence[Any], explore: Sequence[bool],
                 learn: Sequence[bool], matchmaker: Any = None, check_finite: bool = True):
        self.venv, self.spec = venv, spec
        self.finite = FiniteCheck(spec) if check_finite else None
        self.num_envs, self.num_agents = venv.num_envs, spec.num_agents
        self.seat_of = {a: i for i, a in enumerate(spec.possible_agents)}
        # inference groups, one per (policy object, explore flag), and learners, one per distinct
        # learning object; both registries only grow (a matchmaker may bring new opponents)
        self._group_index: dict[tuple[int, bool], int] = {}
        self.group_agent: list[Any] = []
        self.group_explore: list[bool] = []
        self._learner_index: dict[int, int] = {}
        self.learners: list[Any] = []
        self.buffers: list[_Stream] = []
        # per env and seat: (group index, learner index or -1); per env: the matchmaker's tag
        self.env_group = np.zeros((self.num_envs, self.num_agents), dtype=np.int64)
        self.env_learner = np.full((self.num_envs, self.num_agents), -1, dtype=np.int64)
        self.env_tag: list[Any] = [None] * self.num_envs
        self.env_joint: list[list[int]] = [[] for _ in range(self.num_envs)]  # joint learners per env
        self.joint_open: list[dict[str, tuple]] = [{} for _ in range(self.num_envs)]
        self.matchmaker = matchmaker
        for i in range(self.num_envs):
            self.assign(i, agents, explore, learn)
        self.pending: dict[int, Any] = {}
        self.open: list[dict[str, list]] = [{} for _ in range(self.num_envs)]
        self.ep_return = np.zeros((self.num_envs, self.num_agents))
        self.ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self.env_steps = np.zeros(self.num_envs, dtype=np.int64)  # per env, over this collector's life

    def assign(self, i: int, agents: Sequence[Any], explore: Sequence[bool], learn: Sequence[bool],
               tag: Any = None) -> None:
        """Seat ``agents`` in env ``i`` (from its next action on); ``tag`` is reported per episode."""
        for seat, (agent, ex, ln) in enumerate(zip(agents, explore, learn)):
            key = (id(agent), bool(ex))
            if key not in self._group_index:
                self._group_index[key] = len(self.group_agent)
                self.group_agent.append(agent)
                self.group_explore.append(bool(ex))
            self.env_group[i, seat] = self._group_index[key]
            if ln:
                # seat actors of a centralised learner (MADDPG) share one `joint_learner`
                owner = getattr(agent, "joint_learner", None) or agent
                if id(owner) not in self._learner_index:
                    if owner is not agent and self.spec.turn_based:
                        raise TypeError(f"{type(owner).__name__} learns from joint per-step data, which needs a "
                                        f"Parallel env; this env is turn-based")
                    self._learner_index[id(owner)] = len(self.learners)
                    self.learners.append(owner)
                    self.buffers.append(_JointStream(self.spec) if owner is not agent else _Stream())
                self.env_learner[i, seat] = self._learner_index[id(owner)]
            else:
                self.env_learner[i, seat] = -1
        self.env_tag[i] = tag
        self.env_joint[i] = sorted({int(k) for k in self.env_learner[i] if k >= 0 and self.buffers[k].joint})

    def _matchmake(self, i: int) -> None:
        if self.matchmaker is not None:
            self.assign(i, *self.matchmaker(i))

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (env i seeded ``seed + i``) and drop unfinished transitions."""
        pending = self.venv.reset(seed=seed)
        if self.finite is not None:
            self.finite.reset(pending, self.env_steps)
        self.pending = pending
        for i in range(self.num_envs):
            self._matchmake(i)
        self.open = [{} for _ in range(self.num_envs)]
        self.ep_return[:] = 0
        self.ep_len[:] = 0

    def collect(self, n_steps: int | None = None, n_episodes: int | None = None) -> CollectStats:
        """Step until ``n_steps`` env steps (all envs advance together) or ``n_episodes`` episodes.

        With ``n_episodes`` each env gets an even share of the episodes and stops once it has
        finished them, so the result is not biased towards short episodes.
        """
        if (n_steps is None) == (n_episodes is None):
            raise ValueError("collect needs exactly one of n_steps or n_episodes")
        if not self.pending:
            self.reset()
        stats = CollectStats()
        active = list(range(self.num_envs))
        quota = None
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
            if self.finite is not None:
                self.finite.step(results, self.ep_len, self.env_steps)
            for i, res in results.items():
                stats.env_steps += 1
                if self._absorb(i, res, stats) and quota is not None:
                    done_eps[i] += 1
            if quota is not None:
                active = [i for i in active if done_eps[i] < quota[i]]
            elif stats.env_steps >= n_steps:
                break
        return stats

    def _act(self, active: list[int]) -> dict[int, dict[str, Any]]:
        spec = self.spec
        ngroups = len(self.group_agent)
        who: list[list[tuple[int, str]]] = [[] for _ in range(ngroups)]
        obs: list[list[Any]] = [[] for _ in range(ngroups)]
        masks: list[list[Any]] = [[] for _ in range(ngroups)]
        env_group, seat_of = self.env_group, self.seat_of
        for i in active:
            res = self.pending[i]
            for agent, ob in res.obs.items():
                g = env_group[i, seat_of[agent]]
                who[g].append((i, agent))
                obs[g].append(ob)
                if spec.has_action_mask:
                    masks[g].append(res.masks[agent])
        actions: dict[int, dict[str, Any]] = {i: {} for i in active}
        for g in range(ngroups):
            if not who[g]:
                continue
            batch = stack_obs(obs[g])
            mask = np.stack(masks[g]) if spec.has_action_mask else None
            agent = self.group_agent[g]
            if getattr(agent, "accepts_env_ids", False):
                env_ids = np.fromiter((i for i, _ in who[g]), np.int64, len(who[g]))
                raw = agent.act(batch, mask, explore=self.group_explore[g], env_ids=env_ids)
            else:
                raw = agent.act(batch, mask, explore=self.group_explore[g])
            # all seats of a group share one action space (checked by the trainer)
            first = who[g][0][1]
            stored, for_env = check_actions(raw, spec.action_spaces[first], mask, len(who[g]),
                                            f"agent {type(agent).__name__} in seat {first!r}")
            for k, (i, name) in enumerate(who[g]):
                actions[i][name] = for_env[k]
                if self.env_joint[i]:
                    self.joint_open[i][name] = (obs[g][k], stored[k], None if mask is None else mask[k])
                elif self.env_learner[i, seat_of[name]] >= 0:
                    self.open[i][name] = [obs[g][k], stored[k], None if mask is None else mask[k], 0.0]
        return actions

    def _absorb(self, i: int, res: Any, stats: CollectStats) -> bool:
        """Fold one env's step result into returns and transitions; True if an episode ended."""
        seat_of, opened = self.seat_of, self.open[i]
        self.ep_len[i] += 1
        self.env_steps[i] += 1
        if self.env_joint[i] and self.joint_open[i]:
            for k in self.env_joint[i]:
                self.buffers[k].add(i, self.joint_open[i], res)
            self.joint_open[i] = {}
        for agent, r in res.rewards.items():
            self.ep_return[i, seat_of[agent]] += r
            if agent in opened:
                opened[agent][3] += r
        for agent, ob in res.final_obs.items():
            if agent in opened:
                self._close(i, agent, ob, res.final_masks.get(agent), res.terminated[agent], res.truncated[agent])
        ended = res.episode_over
        if ended:
            for agent in list(opened):  # an agent that vanished without a final observation
                o = opened[agent]
                self._close(i, agent, o[0], o[2], False, True)
            stats.episodes += 1
            stats.returns.append(self.ep_return[i].copy())
            stats.lengths.append(int(self.ep_len[i]))
            stats.tags.append(self.env_tag[i])
            self.ep_return[i] = 0
            self.ep_len[i] = 0
            self._matchmake(i)
        for agent, ob in res.obs.items():
            if agent in opened:
                self._close(i, agent, ob, res.masks.get(agent), False, False)
        self.pending[i] = res
        return ended

    def _close(self, i: int, agent: str, next_obs: Any, next_mask: Any, term: bool, trunc: bool) -> None:
        ob, act, mask, rew = self.open[i].pop(agent)
        seat = self.seat_of[agent]
        buf = self.buffers[self.env_learner[i, seat]]
        buf.obs.append(ob)
        buf.act.append(act)
        buf.rew.append(rew)
        buf.next_obs.append(next_obs)
        buf.term.append(term)
        buf.trunc.append(trunc and not term)
        buf.mask.append(mask)
        buf.next_mask.append(next_mask if next_mask is not None else mask)
        buf.stream.append(i * self.num_agents + seat)

    def flush(self) -> int:
        """Hand every learning policy its closed transitions (``observe``, or ``observe_joint`` for
        centralised learners); return how many."""
        total = 0
        for agent, buf in zip(self.learners, self.buffers):
            if len(buf):
                total += len(buf)
                if buf.joint:
                    agent.observe_joint(buf.take())
                else:
                    agent.observe(buf.take(self.spec.has_action_mask))
        return total
