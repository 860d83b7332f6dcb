"""Transition assembly: turning acted rows and step results into a learner's training batch.

The :class:`~marl_note.trainers.collector.Collector` gives every learner one assembler and tells it
two things: ``on_act`` for each row the learner should see (env index, agent id, observation,
stored action, action mask) and ``on_step`` for each step result of an env it listens to. The
assembler keeps whatever is open and hands its closed rows to the learner on ``deliver``.

- :class:`SeatAssembler` (``observe``): per-(env, agent) streams; a transition opens when an agent
  acts and closes when that same agent next acts or its episode ends (as terminal or truncated,
  with its own final observation). Rewards between the two are summed into it. It also counts the
  env steps in which the learner acted (in any of its seats) and reports them with each batch to a
  learner that has ``observe_env_steps`` (its ``replay_ratio`` counts them, not seats x steps).
- :class:`JointAssembler` (``observe_joint``): one row per env step with every acting agent's data,
  padded over ``possible_agents``, for a centralised learner (MADDPG).

Example:
    >>> import numpy as np
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.envs import adapt, make_spec
    >>> from marl_note.envs import StepResult
    >>> spec = make_spec(adapt(tictactoe_v3.env()))
    >>> asm = SeatAssembler(spec, num_envs=1)
    >>> board, legal = np.zeros((3, 3, 2), np.int8), np.ones(9, bool)
    >>> asm.on_act(0, "player_1", board, np.int64(4), legal)
    >>> asm.on_step(0, StepResult(obs={"player_2": board}, rewards={"player_1": 0.0}, masks={"player_2": legal}))
    >>> len(asm)  # player_1 has not acted again yet: its transition is still open
    0
    >>> won = StepResult(obs={}, masks={}, rewards={"player_1": 1.0}, terminated={"player_1": True},
    ...                  truncated={"player_1": False}, final_obs={"player_1": board}, episode_over=True)
    >>> asm.on_step(0, won)
    >>> t = asm.take()
    >>> t.act.tolist(), t.rew.tolist(), t.terminated.tolist()
    ([4], [1.0], [True])
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, cast

import gymnasium as gym
import numpy as np

from marl_note.agents.base import CountsEnvSteps, Learner
from marl_note.envs.adapters import StepResult
from marl_note.types import EnvSpec, JointTransitions, Transitions, space_shape_dtype, stack_obs, stack_rows

__all__ = ["Assembler", "JointAssembler", "OpenTransition", "SeatAssembler"]


@dataclass(slots=True)
class OpenTransition:
    """What an agent saw and did when it acted, and the reward it has collected since.

    Example:
        >>> t = OpenTransition(obs=np.zeros(2), act=np.int64(1), mask=None)
        >>> t.reward += 0.5
        >>> t.reward
        0.5
    """

    obs: Any
    act: Any
    mask: np.ndarray | None
    reward: float = 0.0


class Assembler(Protocol):
    """The collector's view of one learner's transition assembly.

    ``hears_every_seat``: True for a centralised learner, which is told every agent's action in
    the envs where it learns; False for one told only its own learning seats' actions.
    """

    hears_every_seat: bool

    def on_act(self, env: int, agent: str, obs: Any, act: Any, mask: np.ndarray | None) -> None:
        """``agent`` in env ``env`` acted ``act`` on ``obs`` (with its action mask, if any)."""

    def on_step(self, env: int, res: StepResult) -> None:
        """Env ``env`` stepped with the actions announced since its last step."""

    def reset(self, first: Mapping[int, StepResult] | None = None) -> None:
        """Drop everything still open (the envs were reset; ``first``: their first results, when known)."""

    def __len__(self) -> int:
        """How many closed rows wait to be taken."""

    def take(self) -> Any:
        """The closed rows as one batch; the assembler forgets them."""

    def deliver(self, learner: Any) -> None:
        """Hand the closed rows to ``learner`` (its ``observe`` or ``observe_joint``)."""


_COUNTS: dict[type, bool] = {}


def _counts_env_steps(learner: Learner) -> TypeGuard[CountsEnvSteps]:
    """``isinstance(learner, CountsEnvSteps)``, asked once per class (a method lives on its class, and a
    Protocol check costs tens of microseconds: this runs at every delivery)."""
    cls = type(learner)
    if cls not in _COUNTS:
        _COUNTS[cls] = isinstance(learner, CountsEnvSteps)
    return _COUNTS[cls]


class SeatAssembler:
    """Per-(env, agent) transitions for a learner that ``observe``\\ s its own seats' rows.

    Row ``k`` of the batch belongs to stream ``env * num_agents + seat``. A transition still open
    when its agent vanishes without a final observation (the episode ended) is cut as truncated.
    """

    hears_every_seat = False
    __slots__ = ("open", "seat_of", "num_agents", "has_mask", "obs", "act", "rew", "next_obs", "term", "trunc",
                 "mask", "next_mask", "stream", "acted", "env_steps")

    def __init__(self, spec: EnvSpec, num_envs: int):
        self.seat_of = {a: k for k, a in enumerate(spec.possible_agents)}
        self.num_agents, self.has_mask = spec.num_agents, spec.has_action_mask
        self.open: list[dict[str, OpenTransition]] = [{} for _ in range(num_envs)]
        self.acted = [False] * num_envs  # whether the learner acted in this env since its last step
        self.env_steps = 0  # env steps it acted in, not yet delivered
        self._clear()

    def _clear(self) -> None:
        self.obs: list[Any] = []
        self.act: list[Any] = []
        self.rew: list[float] = []
        self.next_obs: list[Any] = []
        self.term: list[bool] = []
        self.trunc: list[bool] = []
        self.mask: list[Any] = []
        self.next_mask: list[Any] = []
        self.stream: list[int] = []

    def __len__(self) -> int:
        return len(self.rew)

    def reset(self, first: Mapping[int, StepResult] | None = None) -> None:
        self.open = [{} for _ in self.open]
        self.acted = [False] * len(self.open)

    def on_act(self, env: int, agent: str, obs: Any, act: Any, mask: np.ndarray | None) -> None:
        self.open[env][agent] = OpenTransition(obs, act, mask)
        self.acted[env] = True

    def on_step(self, env: int, res: StepResult) -> None:
        if self.acted[env]:
            self.env_steps += 1
            self.acted[env] = False
        opened = self.open[env]
        if not opened:
            return
        for agent, r in res.rewards.items():
            if agent in opened:
                opened[agent].reward += r
        for agent, ob in res.final_obs.items():
            if agent in opened:
                self._close(env, agent, ob, res.final_masks.get(agent), res.terminated[agent], res.truncated[agent])
        if res.episode_over:
            for agent in list(opened):  # an agent that vanished without a final observation
                t = opened[agent]
                self._close(env, agent, t.obs, t.mask, False, True)
        for agent, ob in res.obs.items():
            if agent in opened:
                self._close(env, agent, ob, res.masks.get(agent), False, False)

    def _close(self, env: int, agent: str, next_obs: Any, next_mask: Any, term: bool, trunc: bool) -> None:
        t = self.open[env].pop(agent)
        self.obs.append(t.obs)
        self.act.append(t.act)
        self.rew.append(t.reward)
        self.next_obs.append(next_obs)
        self.term.append(term)
        self.trunc.append(trunc and not term)
        self.mask.append(t.mask)
        self.next_mask.append(next_mask if next_mask is not None else t.mask)
        self.stream.append(env * self.num_agents + self.seat_of[agent])

    def take(self) -> Transitions:
        # a goal env's observations stack to a dict of arrays
        obs: Any = stack_obs(self.obs)
        next_obs: Any = stack_obs(self.next_obs)
        t = Transitions(obs=obs, act=stack_rows(self.act), rew=np.asarray(self.rew, np.float32),
                        next_obs=next_obs, terminated=np.asarray(self.term, bool),
                        truncated=np.asarray(self.trunc, bool),
                        mask=stack_rows(self.mask) if self.has_mask else None,
                        next_mask=stack_rows(self.next_mask) if self.has_mask else None,
                        stream=np.asarray(self.stream, np.int64))
        self._clear()
        return t

    def deliver(self, learner: Learner) -> None:
        learner.observe(self.take())
        if self.env_steps and _counts_env_steps(learner):
            learner.observe_env_steps(self.env_steps)
        self.env_steps = 0


def zero_obs(space: gym.Space) -> Any:
    """A zero observation of a (nested) Dict/Tuple space: dicts and tuples of zero numpy leaves.

    Example:
        >>> zero_obs(gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (2,))}))))
        (array(0), {'x': array([0., 0.], dtype=float32)})
    """
    if isinstance(space, gym.spaces.Dict):
        return {k: zero_obs(s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(zero_obs(s) for s in space.spaces)
    shape, dtype = space_shape_dtype(space)
    return np.zeros(shape, dtype)


class JointAssembler:
    """Rows of joint per-step data for a centralised learner, padded over ``possible_agents``.

    With action masks, ``mask``/``next_mask`` rows the env gave no mask for (the agent did not act,
    or left without a final mask) are all True: unconstrained, never an all-illegal row. Where the
    env has a global state and its results carry it (a vector env built with ``state=True``), rows
    carry ``state`` (when the agents acted) and ``next_state`` (after the step; the final state of
    an episode that ended); otherwise both are None.
    """

    hears_every_seat = True

    def __init__(self, spec: EnvSpec, num_envs: int):
        self.spec = spec
        # Dict/Tuple observations stay nested (stacked entry-wise, zeros where a seat did not act)
        self.nested = {a: zero_obs(spec.observation_space(a)) for a in spec.possible_agents
                       if isinstance(spec.observation_space(a), (gym.spaces.Dict, gym.spaces.Tuple))}
        self.shapes = {a: space_shape_dtype(spec.observation_space(a)) for a in spec.possible_agents
                       if a not in self.nested}
        self.act_shapes = {a: space_shape_dtype(spec.action_space(a)) for a in spec.possible_agents}
        self.open: list[dict[str, OpenTransition]] = [{} for _ in range(num_envs)]
        self.rows: list[tuple[int, dict[str, OpenTransition], StepResult, np.ndarray | None]] = []
        self.state: list[np.ndarray | None] = [None] * num_envs  # each env's global state now, if known

    def __len__(self) -> int:
        return len(self.rows)

    def reset(self, first: Mapping[int, StepResult] | None = None) -> None:
        self.open = [{} for _ in self.open]
        self.state = [None if first is None or i not in first else first[i].state for i in range(len(self.open))]

    def on_act(self, env: int, agent: str, obs: Any, act: Any, mask: np.ndarray | None) -> None:
        self.open[env][agent] = OpenTransition(obs, act, mask)

    def on_step(self, env: int, res: StepResult) -> None:
        if self.open[env]:
            self.rows.append((env, self.open[env], res, self.state[env]))
            self.open[env] = {}
        self.state[env] = res.state  # (after an auto-reset: the next episode's first state)

    def take(self) -> JointTransitions:
        agents, spec = self.spec.possible_agents, self.spec
        n, size = len(agents), len(self.rows)
        obs: dict[str, Any] = {a: np.zeros((size, *self.shapes[a][0]), self.shapes[a][1]) if a in self.shapes
                               else [self.nested[a]] * size for a in agents}
        next_obs: dict[str, Any] = {a: np.zeros((size, *self.shapes[a][0]), self.shapes[a][1]) if a in self.shapes
                                    else [self.nested[a]] * size for a in agents}
        act = {a: np.zeros((size, *self.act_shapes[a][0]), self.act_shapes[a][1]) for a in agents}
        rew = np.zeros((size, n), np.float32)
        term = np.zeros((size, n), bool)
        trunc = np.zeros((size, n), bool)
        alive = np.zeros((size, n), bool)
        stream = np.zeros(size, np.int64)
        # with masks every action space is Discrete (make_spec checks)
        mask = ({a: np.ones((size, int(cast(gym.spaces.Discrete, spec.action_space(a)).n)), bool) for a in agents}
                if spec.has_action_mask else None)
        next_mask = None if mask is None else {a: m.copy() for a, m in mask.items()}
        state, next_state = self._states()
        for b, (i, acted, res, _) in enumerate(self.rows):
            stream[b] = i
            for j, a in enumerate(agents):
                if a not in acted:
                    continue
                t = acted[a]
                alive[b, j] = True
                obs[a][b], act[a][b] = t.obs, t.act
                rew[b, j] = res.rewards.get(a, 0.0)
                term[b, j] = res.terminated.get(a, False)
                trunc[b, j] = res.truncated.get(a, False)
                if a in res.final_obs:
                    next_obs[a][b], nm = res.final_obs[a], res.final_masks.get(a)
                elif a in res.obs:
                    next_obs[a][b], nm = res.obs[a], res.masks.get(a)
                else:  # vanished without a final observation: cut as truncated
                    next_obs[a][b], nm = t.obs, t.mask
                    trunc[b, j] = True
                if mask is not None and next_mask is not None:
                    mask[a][b] = t.mask
                    if nm is not None:
                        next_mask[a][b] = nm
        self.rows = []
        for a in self.nested:
            obs[a], next_obs[a] = stack_obs(obs[a]), stack_obs(next_obs[a])
        return JointTransitions(tuple(agents), obs, act, rew, next_obs, term, trunc, alive, stream,
                                mask=mask, next_mask=next_mask, state=state, next_state=next_state)

    def _states(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``state``/``next_state`` of the waiting rows: None unless the env has a state and every row has it."""
        if self.spec.state_space is None or not self.rows:
            return None, None
        before = [s for *_, s in self.rows if s is not None]
        after = [s for s in (res.final_state if res.episode_over else res.state for _, _, res, _ in self.rows)
                 if s is not None]
        if len(before) < len(self.rows) or len(after) < len(self.rows):
            return None, None
        return stack_rows(before), stack_rows(after)

    def deliver(self, learner: Any) -> None:
        learner.observe_joint(self.take())
