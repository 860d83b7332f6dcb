"""Conformance checks for a replay buffer, shipped as library code (as ``check_env`` is for envs).

:func:`check_buffer` fills a copy of an empty buffer past its capacity with trajectories drawn from
its spaces (several interleaved streams, episodes of 3 to 6 steps, masks for Discrete actions;
each item's reward is its number, so every row read back is matched field by field to the item
that was added) and checks:

- ``add`` returns the storage indices written (where the buffer returns any) and ``len`` counts
  what is stored; past the capacity the oldest items go and the newest stay (wrap-around);
- every row read back (``get``, ``sample``) is an item that was added, with the shapes and
  dtypes of the spaces; ``sample`` draws from what is stored; prioritized buffers give
  importance weights in (0, 1] (the largest 1) before and after ``update_priorities``, and an
  effective sample size between 1 and ``len``;
- ``state_dict()`` is numpy only; ``load_state_dict`` of it into an empty copy gives the same state
  and the same samples; ``check_state_dict`` accepts it and refuses garbage (an empty dict, a
  stored column cut short by a row, any array replaced by text) with an error (a ValueError naming
  the problem; a TypeError, KeyError, IndexError or OverflowError is taken as a refusal too, as
  checkpoint loading does), and a refused ``load_state_dict`` changes nothing;
- episode buffers (HER, triplets) store whole episodes only, and triplets are ordered steps of
  one episode; a :class:`~marl_note.replay.rollout.RolloutBuffer` keeps arrival order and its
  extras aligned and refuses a chunk of another form; a :class:`~marl_note.replay.feed.ReplayFeed`
  with ``num_steps > 1`` stores n-step returns ``sum gamma**i r`` with ``discount = gamma**k``, the
  window cut at episode ends (then its buffer is checked too).

The buffer passed is not changed (the checks run on copies). A failure raises
:class:`BufferCheckError` naming the buffer and what is wrong.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.replay import PrioritizedReplayBuffer
    >>> report = check_buffer(PrioritizedReplayBuffer(32, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4)))
    >>> "prioritized weights" in report.checks and "wrap-around" in report.checks
    True
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import ReplayBuffer
from marl_note.replay.compact import CompactReplayBuffer
from marl_note.replay.episodes import EpisodeRingBuffer
from marl_note.replay.feed import ReplayFeed
from marl_note.replay.her_buffer import HERReplayBuffer
from marl_note.replay.joint import JointReplayBuffer
from marl_note.replay.prioritized import PrioritizedReplayBuffer
from marl_note.replay.reservoir import ReservoirBuffer
from marl_note.replay.rollout import RolloutBuffer
from marl_note.types import JointTransitions, Transitions, space_shape_dtype

__all__ = ["BufferCheckError", "BufferReport", "check_buffer"]

MAX_CAPACITY = 4096  # the checks fill the buffer one and a half times
# what loading a checkpoint's replay contents takes as a refusal (marl_note.agents.checkpoints.state_check)
_REFUSALS = (ValueError, TypeError, KeyError, IndexError, OverflowError)


class BufferCheckError(AssertionError):
    """A buffer that breaks its contract; the message names the buffer and the problem."""


@dataclass
class BufferReport:
    """What :func:`check_buffer` checked, in order.

    Example:
        >>> BufferReport("ReplayBuffer", ["add"]).checks
        ['add']
    """

    name: str
    checks: list[str] = field(default_factory=list)

    def passed(self, check: str) -> None:
        if check not in self.checks:
            self.checks.append(check)


class _Items:
    """Trajectories drawn from spaces: ``streams`` interleaved streams, episodes of 3 to 6 steps.

    Item ``i`` has reward ``i`` (``base(stream) + step`` with ``ids="stream"``, for n-step windows);
    ``items[i]`` keeps its fields, ``episode_of[i]`` its episode."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, rng: np.random.Generator,
                 streams: int = 3, masked: bool = True):
        self.rng = rng
        self.obs_space, self.act_space = copy.deepcopy(observation_space), copy.deepcopy(action_space)
        seed = int(rng.integers(0, 2**31))
        self.obs_space.seed(seed)
        self.act_space.seed(seed + 1)
        self.masked = masked and isinstance(action_space, gym.spaces.Discrete)
        self.streams = streams
        self.items: dict[int, dict[str, Any]] = {}
        self.episode_of: dict[int, int] = {}
        self.stream_of: dict[int, int] = {}
        self.done_items: list[int] = []  # items of finished episodes
        self._episodes = 0
        self._state = [self._new_episode() for _ in range(streams)]
        self._next = 0
        self._step = [0] * streams

    def _mask(self) -> np.ndarray | None:
        if not self.masked:
            return None
        n = int(self.act_space.n)  # type: ignore[attr-defined]
        mask = self.rng.random(n) < 0.6
        mask[self.rng.integers(0, n)] = True
        return mask

    def _new_episode(self) -> dict[str, Any]:
        self._episodes += 1
        return {"obs": self.obs_space.sample(), "mask": self._mask(), "left": int(self.rng.integers(3, 7)),
                "episode": self._episodes, "pending": []}

    def batch(self, n: int, stream_ids: bool = False) -> Transitions:
        rows = []
        for _ in range(n):
            s = int(self.rng.integers(0, self.streams))
            st = self._state[s]
            i = s * 100_000 + self._step[s] if stream_ids else self._next
            self._step[s] += 1
            self._next += 1
            st["left"] -= 1
            done = st["left"] == 0
            term = bool(done and self.rng.random() < 0.5)
            item = {"obs": st["obs"], "act": self.act_space.sample(), "next_obs": self.obs_space.sample(),
                    "terminated": term, "truncated": bool(done and not term), "mask": st["mask"],
                    "next_mask": self._mask(), "stream": s}
            self.items[i], self.episode_of[i], self.stream_of[i] = item, st["episode"], s
            st["pending"].append(i)
            rows.append((i, item))
            if done:
                self.done_items += st["pending"]
                self._state[s] = self._new_episode()
            else:
                st["obs"], st["mask"] = item["next_obs"], item["next_mask"]
        return Transitions(obs=_stack([r["obs"] for _, r in rows]),
                           act=np.stack([np.asarray(r["act"]) for _, r in rows]),
                           rew=np.array([i for i, _ in rows], np.float32),
                           next_obs=_stack([r["next_obs"] for _, r in rows]),
                           terminated=np.array([r["terminated"] for _, r in rows]),
                           truncated=np.array([r["truncated"] for _, r in rows]),
                           mask=np.stack([r["mask"] for _, r in rows]) if self.masked else None,
                           next_mask=np.stack([r["next_mask"] for _, r in rows]) if self.masked else None,
                           stream=np.array([r["stream"] for _, r in rows], np.int64))


def _stack(values: list[Any]) -> Any:
    if isinstance(values[0], Mapping):
        return {k: np.stack([np.asarray(v[k]) for v in values]) for k in values[0]}
    return np.stack([np.asarray(v) for v in values])


class _Checker:
    def __init__(self, buffer: Any, rng: np.random.Generator):
        self.name = type(buffer).__name__
        self.rng = rng

    def fail(self, what: str) -> BufferCheckError:
        return BufferCheckError(f"check_buffer({self.name}): {what}")

    # -- rows against the items they came from ---------------------------------------------------------
    def same_rows(self, batch: Transitions, items: _Items, what: str, fields: tuple[str, ...], n: int) -> np.ndarray:
        """Check ``batch`` (``n`` rows) has the spaces' shapes and dtypes and each row equals its item; its ids."""
        ids = self.ids(batch.rew, what, n, items)
        obs_spec = space_shape_dtype(items.obs_space) if not isinstance(items.obs_space, gym.spaces.Dict) else None
        specs = {"obs": obs_spec, "next_obs": obs_spec, "act": space_shape_dtype(items.act_space),
                 "terminated": ((), np.dtype(bool)), "truncated": ((), np.dtype(bool)),
                 "mask": ((int(getattr(items.act_space, "n", 0)),), np.dtype(bool)),
                 "next_mask": ((int(getattr(items.act_space, "n", 0)),), np.dtype(bool))}
        for name in fields:
            got = getattr(batch, name)
            if got is None:
                raise self.fail(f"{what} has no {name}, though every item added carried one")
            got = np.asarray(got)
            spec = specs[name]
            if spec is not None and (got.shape != (n, *spec[0]) or got.dtype != spec[1]):
                raise self.fail(f"{what}.{name} is {got.dtype} {got.shape}, expected {spec[1]} {(n, *spec[0])}")
            for row, i in enumerate(ids):
                want = np.asarray(items.items[int(i)][name])
                if not np.array_equal(got[row], want.astype(got.dtype, copy=False)):
                    raise self.fail(f"{what}: row {row} (item {int(i)}) has {name} {got[row].tolist()}, but the item "
                                    f"added had {want.tolist()}")
        return ids

    def ids(self, rew: Any, what: str, n: int, items: _Items) -> np.ndarray:
        rew = np.asarray(rew)
        if rew.shape != (n,) or rew.dtype != np.float32:
            raise self.fail(f"{what}.rew is {rew.dtype} {rew.shape}, expected float32 ({n},)")
        ids = rew.astype(np.int64)
        unknown = [int(i) for i in ids if int(i) not in items.items]
        if unknown or not np.array_equal(ids, rew):
            raise self.fail(f"{what} holds a row that was never added (reward {rew[0] if not unknown else unknown[0]})")
        return ids

    def state(self, buffer: Any, what: str) -> dict[str, Any]:
        state = buffer.state_dict()
        if not isinstance(state, Mapping):
            raise self.fail(f"{what}: state_dict() returned {type(state).__name__}, not a dict")
        bad = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, (np.ndarray, np.generic))]
        if bad:
            raise self.fail(f"{what}: state_dict() must hold numpy arrays and scalars under string keys only; "
                            f"{bad[0]!r} holds {type(state[bad[0]]).__name__}")
        return {k: np.array(v, copy=True) for k, v in state.items()}

    def same_state(self, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], what: str) -> None:
        if set(got) != set(want):
            raise self.fail(f"{what}: state_dict keys differ: {sorted(set(got) ^ set(want))[:5]}")
        for key, value in want.items():
            if got[key].shape != value.shape or got[key].dtype != value.dtype or not np.array_equal(got[key], value):
                raise self.fail(f"{what}: state_dict[{key!r}] differs")

    # -- state round trip and refusals ------------------------------------------------------------------
    def round_trip(self, buffer: Any, blank: Any, report: BufferReport, sample: Callable[[Any], Any] | None) -> None:
        state = self.state(buffer, "after the adds")
        if callable(getattr(blank, "check_state_dict", None)):
            try:
                blank.check_state_dict(state)
            except ValueError as exc:
                raise self.fail(f"check_state_dict refuses the buffer's own state_dict(): {exc}") from exc
        self.refusals(copy.deepcopy(blank), state)
        report.passed("garbage state refused, nothing changed")
        restored = copy.deepcopy(blank)
        restored.load_state_dict(state)
        self.same_state(self.state(restored, "after load_state_dict"), state, "load_state_dict(state_dict())")
        if len(restored) != len(buffer):
            raise self.fail(f"after load_state_dict len() is {len(restored)}, the saved buffer's {len(buffer)}")
        if sample is not None:
            a, b = sample(buffer), sample(restored)
            for name, value in vars(a).items():
                other = getattr(b, name)
                same = (value is None and other is None) or (
                    isinstance(value, Mapping) and all(np.array_equal(value[k], other[k]) for k in value)) or (
                    not isinstance(value, Mapping) and value is not None and np.array_equal(value, other))
                if not same:
                    raise self.fail(f"a buffer restored from state_dict() samples another {name} than the saved one "
                                    f"(is its generator missing from the state?)")
        report.passed("state_dict round trip")

    def refusals(self, blank: Any, state: Mapping[str, np.ndarray]) -> None:
        before = self.state(blank, "an empty buffer")
        garbage: list[tuple[str, dict[str, Any]]] = [("an empty dict", {})]
        rows = max((v.shape[0] for v in state.values() if v.ndim >= 1), default=0)
        for key, value in state.items():
            if value.ndim >= 1 and value.shape[0] == rows > 0:  # the stored columns (not the variable-length sets)
                garbage.append((f"{key!r} cut short by a row", {**state, key: value[:-1]}))
            garbage.append((f"{key!r} replaced by text", {**state, key: np.array(["garbage"] * max(1, value.size))
                                                          .reshape(value.shape if value.size else (1,))}))
        check = getattr(blank, "check_state_dict", None)
        for what, bad in garbage:
            for method in (check, blank.load_state_dict):
                if method is None:
                    continue
                try:
                    method(bad)
                except _REFUSALS:
                    pass
                except Exception as exc:
                    raise self.fail(f"{method.__name__} of a state with {what} raised {type(exc).__name__} ({exc}); "
                                    f"expected a ValueError naming the problem") from exc
                else:
                    raise self.fail(f"{method.__name__} accepted a state with {what}")
                self.same_state(self.state(blank, "after a refused load"), before,
                                f"a refused load_state_dict (state with {what}) changed the buffer")


def _stored_rows(buffer: Any) -> Any:
    """Every stored item, read with ``get`` (a compact buffer's slots holding transitions)."""
    if isinstance(buffer, CompactReplayBuffer):
        return buffer.get(buffer.stored_indices())
    if isinstance(buffer, PrioritizedReplayBuffer):
        return buffer.get(buffer._stored())
    return buffer.get(np.arange(len(buffer)))


def _check_transitions(buffer: Any, report: BufferReport, rng: np.random.Generator) -> None:
    """Uniform, prioritized and compact buffers (and anything with their interface)."""
    ck = _Checker(buffer, rng)
    blank = copy.deepcopy(buffer)
    cap = int(buffer.capacity)
    compact = isinstance(buffer, CompactReplayBuffer) or getattr(buffer, "optimize_memory", False)
    items = _Items(buffer.observation_space, buffer.action_space, rng)
    fields = ("obs", "act", "next_obs", "terminated", "truncated", "mask", "next_mask") if items.masked \
        else ("obs", "act", "next_obs", "terminated", "truncated")
    added = 0
    while added < cap + cap // 2 + 3:
        n = int(rng.integers(1, 8))
        idx = buffer.add(items.batch(n))
        added += n
        idx = np.asarray(idx)
        if idx.shape != (n,) or idx.dtype.kind not in "iu" or idx.min() < 0 or idx.max() >= cap:
            raise ck.fail(f"add() of {n} items returned indices {idx.tolist()[:8]} ({idx.dtype} {idx.shape}); expected "
                          f"{n} integers in [0, {cap})")
        if not compact and len(buffer) != min(added, cap):
            raise ck.fail(f"len() is {len(buffer)} after adding {added} items to capacity {cap}; expected "
                          f"{min(added, cap)}")
        if compact and not 0 < len(buffer) <= min(added, cap):
            raise ck.fail(f"len() is {len(buffer)} after adding {added} items to {cap} slots")
    report.passed("add")
    stored = _stored_rows(buffer)
    ids = ck.same_rows(stored, items, "get(stored indices)", fields, len(buffer))
    if compact:
        if len(set(ids.tolist())) != len(ids) or added - 1 not in set(ids.tolist()):
            raise ck.fail(f"after wrapping around the buffer holds items {sorted(ids.tolist())[:8]}...: each item at "
                          f"most once and the newest ({added - 1}) among them")
    elif sorted(ids.tolist()) != list(range(added - cap, added)):
        raise ck.fail(f"after {added} adds to capacity {cap} it holds items {sorted(ids.tolist())[:4]}...; expected "
                      f"the newest {cap} ({added - cap} to {added - 1})")
    report.passed("wrap-around")
    batch = buffer.sample(16)
    ck.same_rows(batch, items, "sample(16)", fields, 16)
    if batch.indices is None or np.asarray(batch.indices).shape != (16,):
        raise ck.fail("sample(16) must carry the storage indices of its rows (indices of shape (16,))")
    report.passed("sample")
    if callable(getattr(buffer, "update_priorities", None)):
        _check_weights(ck, batch, "sample(16)")
        buffer.update_priorities(batch.indices, rng.normal(size=16) * 3)
        _check_weights(ck, buffer.sample(16), "sample(16) after update_priorities")
        ess = buffer.effective_sample_size()
        if not 1.0 - 1e-9 <= ess <= len(buffer) + 1e-9:
            raise ck.fail(f"effective_sample_size() is {ess}, outside [1, len() = {len(buffer)}]")
        report.passed("prioritized weights")
    ck.round_trip(buffer, blank, report, lambda b: b.sample(8))


def _check_weights(ck: _Checker, batch: Transitions, what: str) -> None:
    w = batch.weights
    if w is None:
        raise ck.fail(f"{what} of a prioritized buffer carries no importance weights")
    w = np.asarray(w)
    if w.shape != (len(batch),) or w.dtype != np.float32 or not np.all((w > 0) & (w <= 1)) or w.max() != 1:
        raise ck.fail(f"{what} importance weights must be float32, one per row, in (0, 1] with the largest 1; got "
                      f"{w.dtype} {w.shape} in [{w.min()}, {w.max()}]")


def _check_episodes(buffer: Any, report: BufferReport, rng: np.random.Generator) -> None:
    """HER and triplet buffers: whole episodes in a ring."""
    ck = _Checker(buffer, rng)
    blank = copy.deepcopy(buffer)
    cap = buffer.capacity
    her = isinstance(buffer, HERReplayBuffer)
    items = _Items(buffer.observation_space, buffer.action_space, rng, masked=False)
    added = 0
    while added < cap + cap // 2 + 3:
        n = int(rng.integers(1, 8))
        buffer.add(items.batch(n))
        added += n
        finished = len(items.done_items)
        if len(buffer) != min(cap, finished) or buffer.num_pending != added - finished:
            raise ck.fail(f"after {added} adds ({finished} in finished episodes) len() is {len(buffer)} and "
                          f"num_pending {buffer.num_pending}; expected {min(cap, finished)} and {added - finished} "
                          f"(whole episodes are stored when they end, the newest {cap} items kept)")
    report.passed("add")
    report.passed("wrap-around")
    stored = ck.ids(buffer._ring.storage.column("rew"), "the stored rewards", len(buffer), items)
    if not set(stored.tolist()) <= set(items.done_items):
        raise ck.fail("it stores items of an episode that has not ended")
    report.passed("whole episodes")
    batch = buffer.sample(16)
    if her:
        assert isinstance(buffer, HERReplayBuffer)
        flat = buffer.flat_observation_space.shape
        want = {"obs": (16, *flat), "next_obs": (16, *flat), "rew": (16,), "terminated": (16,)}
    else:
        shape = space_shape_dtype(buffer.observation_space)[0]
        want = {"obs": (16, 2, *shape), "next_obs": (16, 2, *shape), "rew": (16, 2), "terminated": (16, 2)}
    for name, shape in want.items():
        if np.shape(getattr(batch, name)) != shape:
            raise ck.fail(f"sample(16).{name} has shape {np.shape(getattr(batch, name))}, expected {shape}")
    if not np.isfinite(batch.rew).all():
        raise ck.fail("sample(16) has non-finite rewards")
    if not her:  # each row: steps i < k of one episode (their rewards are their item numbers)
        i, k = batch.rew[:, 0].astype(np.int64), batch.rew[:, 1].astype(np.int64)
        same = [items.episode_of.get(int(a)) == items.episode_of.get(int(b)) for a, b in zip(i, k)]
        if not (np.all(i < k) and all(same)):
            raise ck.fail("sample(16) pairs steps that are not ordered steps i < k of one episode")
    report.passed("sample")
    ck.round_trip(buffer, blank, report, lambda b: b.sample(8))


def _check_joint(buffer: JointReplayBuffer, report: BufferReport, rng: np.random.Generator) -> None:
    ck = _Checker(buffer, rng)
    blank = copy.deepcopy(buffer)
    cap, agents = buffer.capacity, buffer.agents
    specs = {k: (v.shape[1:], v.dtype) for k, v in blank.state_dict().items() if v.ndim >= 1 and v.shape[0] == 0}
    rows: dict[int, dict[str, np.ndarray]] = {}
    added = 0

    def draw(shape: tuple[int, ...], dtype: np.dtype, n: int) -> np.ndarray:
        if dtype.kind == "f":
            return rng.normal(size=(n, *shape)).astype(dtype)
        if dtype.kind == "b":
            return rng.random((n, *shape)) < 0.5
        return rng.integers(0, 2, (n, *shape)).astype(dtype)

    while added < cap + cap // 2 + 3:
        n = int(rng.integers(1, 8))
        cols = {k: draw(*specs[k], n) for k in specs if "." in k}
        ids = np.arange(added, added + n)
        k = len(agents)
        jt = JointTransitions(agents, obs={a: cols[f"obs.{a}"] for a in agents},
                              act={a: cols[f"act.{a}"] for a in agents},
                              rew=np.repeat(ids[:, None], k, axis=1).astype(np.float32),
                              next_obs={a: cols[f"next_obs.{a}"] for a in agents},
                              terminated=rng.random((n, k)) < 0.2, truncated=np.zeros((n, k), bool),
                              alive=np.ones((n, k), bool))
        for r, i in enumerate(ids):
            rows[int(i)] = {key: value[r] for key, value in cols.items()}
        idx = np.asarray(buffer.add(jt))
        added += n
        if idx.shape != (n,) or idx.min() < 0 or idx.max() >= cap or len(buffer) != min(added, cap):
            raise ck.fail(f"add() of {n} rows returned {idx.tolist()[:8]} and len() {len(buffer)}; expected {n} "
                          f"indices in [0, {cap}) and len() {min(added, cap)}")
    report.passed("add")
    for what, batch, n in (("get(all)", buffer.get(np.arange(len(buffer))), len(buffer)),
                           ("sample(16)", buffer.sample(16), 16)):
        rew = np.asarray(batch.rew)
        if rew.shape != (n, len(agents)) or rew.dtype != np.float32:
            raise ck.fail(f"{what}.rew is {rew.dtype} {rew.shape}, expected float32 {(n, len(agents))}")
        ids = rew[:, 0].astype(np.int64)
        if what == "get(all)" and sorted(ids.tolist()) != list(range(added - cap, added)):
            raise ck.fail(f"after {added} adds to capacity {cap} it holds rows {sorted(ids.tolist())[:4]}...; expected "
                          f"the newest {cap}")
        for key, (shape, dtype) in specs.items():
            if "." not in key or key.startswith(("mask.", "next_mask.")):
                continue
            name, agent = key.split(".", 1)
            got = np.asarray(getattr(batch, name)[agent])
            if got.shape != (n, *shape) or got.dtype != dtype:
                raise ck.fail(f"{what}.{name}[{agent!r}] is {got.dtype} {got.shape}, expected {dtype} {(n, *shape)}")
            if any(not np.array_equal(got[r], rows[int(i)][key]) for r, i in enumerate(ids)):
                raise ck.fail(f"{what}.{name}[{agent!r}] holds a row other than the one added with it")
    report.passed("wrap-around")
    report.passed("sample")
    ck.round_trip(buffer, blank, report, lambda b: b.sample(8))


def _check_rollout(buffer: RolloutBuffer, report: BufferReport, rng: np.random.Generator) -> None:
    ck = _Checker(buffer, rng)
    items = _Items(buffer.observation_space, buffer.action_space, rng)
    fields = ("obs", "act", "next_obs", "terminated", "truncated", "mask", "next_mask") if items.masked \
        else ("obs", "act", "next_obs", "terminated", "truncated")
    added = 0
    logp: list[np.ndarray] = []
    for _ in range(6):
        n = int(rng.integers(1, 8))
        chunk = items.batch(n)
        logp.append(rng.normal(size=n))
        buffer.add(chunk, log_prob=logp[-1])
        added += n
        if len(buffer) != added:
            raise ck.fail(f"len() is {len(buffer)} after adding {added} transitions")
    report.passed("add")
    data = buffer.get()
    ids = ck.same_rows(data, items, "get()", fields, added)
    if ids.tolist() != list(range(added)) or data.stream is None:
        raise ck.fail("get() must return every transition in arrival order, with its stream")
    extras = buffer.extras()
    if set(extras) != {"log_prob"} or not np.array_equal(extras["log_prob"], np.concatenate(logp)):
        raise ck.fail("extras() must return the extras given to add(), aligned with get()")
    report.passed("arrival order and extras")
    other = items.batch(2)
    unmasked = Transitions(**{**vars(other), "mask": None, "next_mask": None})
    for what, call in (("without its masks", lambda: buffer.add(unmasked, log_prob=np.zeros(2))),
                       ("without its extras", lambda: buffer.add(other))):
        if not items.masked and what == "without its masks":
            continue
        try:
            call()
        except ValueError:
            pass
        else:
            raise ck.fail(f"add() accepted a chunk {what} after chunks that carried them")
        if len(buffer) != added:
            raise ck.fail(f"a refused add() ({what}) changed len()")
    report.passed("chunks of another form refused")
    buffer.clear()
    if len(buffer) != 0:
        raise ck.fail(f"len() is {len(buffer)} after clear()")
    report.passed("clear")


def _check_reservoir(buffer: ReservoirBuffer, report: BufferReport, rng: np.random.Generator) -> None:
    """Rows tagged by their number: only added rows are kept, at most ``capacity``, and the state round-trips."""
    name = f"check_buffer({type(buffer).__name__})"
    added = 0
    while added < 3 * buffer.capacity:
        n = int(rng.integers(1, 8))
        obs = np.zeros((n, buffer.obs_dim), np.float32)
        obs[:, 0] = added + np.arange(n)  # each row carries its number
        act = (added + np.arange(n)) % buffer.n_actions
        buffer.add(obs, act)
        added += n
        if len(buffer) != min(added, buffer.capacity):
            raise BufferCheckError(f"{name}: len() is {len(buffer)} after adding {added} rows")
    report.passed("add")
    ids = buffer.obs[:len(buffer), 0].astype(np.int64)
    if len(set(ids.tolist())) != len(ids) or ids.min() < 0 or ids.max() >= added \
            or not np.array_equal(buffer.act[:len(buffer)], ids % buffer.n_actions):
        raise BufferCheckError(f"{name}: the stored rows are not distinct rows that were added, each with its action")
    if ids.max() < buffer.capacity:
        raise BufferCheckError(f"{name}: no row added after the first {buffer.capacity} was ever kept")
    report.passed("wrap-around")
    obs, act, _ = buffer.sample(16)
    if not np.isin(obs[:, 0].astype(np.int64), ids).all() or not np.array_equal(act, obs[:, 0].astype(np.int64)
                                                                                 % buffer.n_actions):
        raise BufferCheckError(f"{name}: sample() returned rows that are not stored")
    report.passed("sample")
    state = buffer.state_dict()
    kept = {k: np.array(v, copy=True) for k, v in state.items()}
    try:
        buffer.load_state_dict({**state, "act": state["act"][:-1]})
    except ValueError:
        pass
    else:
        raise BufferCheckError(f"{name}: load_state_dict() accepted a state whose arrays disagree in length")
    if not all(np.array_equal(v, buffer.state_dict()[k]) for k, v in kept.items()):
        raise BufferCheckError(f"{name}: a refused load_state_dict() changed the buffer")
    report.passed("garbage state refused, nothing changed")
    other = ReservoirBuffer(buffer.capacity, buffer.obs_dim, buffer.n_actions, seed=int(rng.integers(1 << 30)))
    other.load_state_dict(state)
    if not all(np.array_equal(a, b) for a, b in zip(buffer.sample(8), other.sample(8))):
        raise BufferCheckError(f"{name}: a buffer loaded from state_dict() samples differently")
    report.passed("state_dict round trip")


def _check_nstep(feed: ReplayFeed, report: BufferReport, rng: np.random.Generator) -> None:
    """n-step returns through the feed: ``sum gamma**i r_{t+i}`` over ``k <= n`` steps, cut at episode ends."""
    ck = _Checker(feed, rng)
    assert feed.nstep is not None
    n, gamma = feed.nstep.n, feed.nstep.gamma
    replay = feed.replay
    items = _Items(feed.network_space, replay.action_space, rng)
    total = min(int(replay.capacity) // 2, 60)
    while len(items.items) < total:
        feed.add(items.batch(int(rng.integers(1, 6)), stream_ids=True))
    stored = _stored_rows(replay)
    if len(stored) != len(items.items) - len(feed.nstep):
        raise ck.fail(f"{len(items.items)} one-step transitions, {len(feed.nstep)} held back, but {len(stored)} stored")
    for row in range(len(stored)):
        d, r = float(stored.discount[row]), float(stored.rew[row])
        k = next((k for k in range(1, n + 1) if np.isclose(d, gamma ** k, rtol=1e-5)), None)
        if k is None or not 0.0 < gamma < 1.0:
            if k is None:
                raise ck.fail(f"stored discount {d} is no gamma**k for k in 1..{n} (gamma {gamma})")
            continue
        coef = sum(gamma ** i for i in range(k))
        first = int(round((r - sum(gamma ** i * i for i in range(k))) / coef))
        s = items.stream_of.get(first)
        window = [first + i for i in range(k)]
        if s is None or any(w not in items.items or items.stream_of[w] != s for w in window):
            raise ck.fail(f"stored n-step reward {r} (k={k}) matches no window of {k} steps of one stream")
        steps = [items.items[w] for w in window]
        if any(x["terminated"] or x["truncated"] for x in steps[:-1]):
            raise ck.fail(f"an n-step window of {k} steps from item {first} runs across an episode end")
        last = steps[-1]
        if k < n and not (last["terminated"] or last["truncated"]):
            raise ck.fail(f"an n-step window from item {first} stops after {k} < n = {n} steps without an episode end")
        for name, want in (("next_obs", last["next_obs"]), ("terminated", last["terminated"]),
                           ("obs", steps[0]["obs"]), ("act", steps[0]["act"])):
            got = np.asarray(getattr(stored, name))[row]
            if not np.array_equal(got, np.asarray(want).astype(got.dtype)):
                raise ck.fail(f"the n-step transition from item {first} (k={k}) has the wrong {name}")
    report.passed("n-step returns cut at episode ends")


def check_buffer(buffer: Any, *, seed: int = 0) -> BufferReport:
    """Check a replay buffer (or a :class:`~marl_note.replay.feed.ReplayFeed`) against its contract
    (module docstring) on copies of it; returns what was checked. ``buffer`` must be empty, with a
    capacity of at most :data:`MAX_CAPACITY`. A failure raises :class:`BufferCheckError`.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.replay import ReplayFeed
        >>> feed = ReplayFeed(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), buffer_size=200, gamma=0.9,
        ...                   num_steps=3)
        >>> check_buffer(feed).checks[0]
        'n-step returns cut at episode ends'
        >>> check_buffer(ReplayFeed(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), buffer_size=10**6, gamma=0.9))
        Traceback (most recent call last):
        ...
        marl_note.replay.checks.BufferCheckError: check_buffer(ReplayBuffer): capacity 1000000 is more than the \
checks fill (4096): check a buffer of the same class and options with a smaller capacity
    """
    rng = np.random.default_rng(seed)
    if isinstance(buffer, ReplayFeed):
        if buffer.augment is not None or buffer.her:
            raise BufferCheckError("check_buffer(ReplayFeed): check a feed without augment or HER (check its "
                                   "buffer itself)")
        report = BufferReport("ReplayFeed")
        if buffer.nstep is not None:
            _check_size(buffer.replay)
            _check_nstep(copy.deepcopy(buffer), report, rng)
        report.checks += check_buffer(buffer.replay, seed=seed).checks
        return report
    _check_size(buffer)
    report = BufferReport(type(buffer).__name__)
    work = copy.deepcopy(buffer)
    if isinstance(buffer, RolloutBuffer):
        _check_rollout(work, report, rng)
    elif isinstance(buffer, EpisodeRingBuffer):
        _check_episodes(work, report, rng)
    elif isinstance(buffer, JointReplayBuffer):
        _check_joint(work, report, rng)
    elif isinstance(buffer, ReservoirBuffer):
        _check_reservoir(work, report, rng)
    elif isinstance(buffer, (ReplayBuffer, CompactReplayBuffer, PrioritizedReplayBuffer)) or all(
            callable(getattr(buffer, m, None)) for m in ("add", "sample", "get", "state_dict", "load_state_dict")):
        _check_transitions(work, report, rng)
    else:
        raise BufferCheckError(f"check_buffer({type(buffer).__name__}): not a buffer it knows (a marl_note.replay "
                               f"buffer, or one with add, sample, get, state_dict and load_state_dict)")
    return report


def _check_size(buffer: Any) -> None:
    name = type(buffer).__name__
    if len(buffer):
        raise BufferCheckError(f"check_buffer({name}): the buffer holds {len(buffer)} items; pass an empty one")
    capacity = getattr(buffer, "capacity", 0)
    if capacity > MAX_CAPACITY:
        raise BufferCheckError(f"check_buffer({name}): capacity {capacity} is more than the checks fill "
                               f"({MAX_CAPACITY}): check a buffer of the same class and options with a smaller "
                               f"capacity")
