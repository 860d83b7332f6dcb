"""What enters the collector: non-finite values, and observations that do not fit their spaces.

An env that returns a NaN (or infinite) reward or observation turns an agent's weights NaN a few
updates after the value is learned from, far from its cause. An observation of the wrong shape,
or a string, fails deep in numpy when a batch is stacked ("all input arrays must have the same
shape"), and a NaN in an integer observation space is stored as -9223372036854775808 and trained
on. :class:`StepCheck` looks at every step result (and every reset observation) before the
collector folds it into returns and transitions:

- ``finite``: a NaN/inf reward or float observation raises :class:`~marl_note.types.NonFiniteError`.
- ``spaces``: every observation leaf of a ``Box``, ``Discrete``, ``MultiBinary`` or ``MultiDiscrete``
  space (inside ``Dict`` and ``Tuple`` spaces too; other spaces are not looked at) must be numbers
  of the space's shape: any real numbers for a float space, whole numbers for an integer or bool
  space (a float array holding whole numbers converts without loss and is accepted). Anything
  else raises ``ValueError``. A value outside the space's bounds warns once per process for each
  space, as Gymnasium's env checker does, and is used as it is.

Each error names the env index, the agent, the env step, what was expected and what came. The
common case is cheap: all rewards of one vector step are summed in Python (NaN and inf survive a
sum), and the observations of each distinct leaf space are stacked into one array, so one shape
comparison, one dtype test and one or two reductions (``np.isfinite``; the min and max against the
bounds) cover every env and agent of the step. Bounds once exceeded are not looked at again by the
same check. Only when that says "wrong" is the culprit searched for, observation by observation.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.types import EnvSpec, NonFiniteError

__all__ = ["StepCheck", "float_leaves", "leaf_spaces"]

_HOW_TO_DISABLE = ("Fix or wrap the env, or turn this check off with check_finite=False "
                  "(Collector or DecentralizedTrainer).")
_FIX_SPACE = "Fix the env, or the observation space it declares."
_CHECKED = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
# a float batch of at most this many values is checked in Python, where each numpy call would cost
# more than comparing every value (one env of CartPole: 4 values)
_FEW = 64
# spaces already warned about for out-of-bounds values in this process (see StepCheck)
_WARNED: set[tuple] = set()


def leaf_spaces(space: gym.Space) -> list[tuple[tuple, gym.Space]]:
    """``(path, space)`` of every checked leaf (Box, Discrete, MultiBinary, MultiDiscrete) of a space.

    Example:
        >>> leaf_spaces(gym.spaces.Dict({"goal": gym.spaces.Box(-1, 1, (2,)), "n": gym.spaces.Discrete(3)}))
        [(('goal',), Box(-1.0, 1.0, (2,), float32)), (('n',), Discrete(3))]
    """
    if isinstance(space, _CHECKED):
        return [((), space)]
    if isinstance(space, gym.spaces.Dict):
        return [((key, *path), leaf) for key, sub in space.spaces.items() for path, leaf in leaf_spaces(sub)]
    if isinstance(space, gym.spaces.Tuple):
        return [((i, *path), leaf) for i, sub in enumerate(space.spaces) for path, leaf in leaf_spaces(sub)]
    return []


def float_leaves(space: gym.Space) -> list[tuple]:
    """Paths to the float ``Box`` leaves of an observation space (``[()]`` for a float Box itself).

    Integer/bool Boxes, Discrete, MultiBinary and MultiDiscrete spaces hold no NaN: no path.

    Example:
        >>> float_leaves(gym.spaces.Box(-1, 1, (3,))), float_leaves(gym.spaces.Box(0, 1, (3,), np.int8))
        ([()], [])
        >>> float_leaves(gym.spaces.Dict({"goal": gym.spaces.Box(-1, 1, (2,)), "bits": gym.spaces.MultiBinary(3)}))
        [('goal',)]
    """
    return [path for path, leaf in leaf_spaces(space) if _is_float(leaf)]


def _is_float(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and np.dtype(space.dtype).kind == "f"


def _leaf(obs: Any, path: tuple) -> Any:
    for key in path:
        obs = obs[key]
    return obs


def _at(arr: np.ndarray, bad: np.ndarray) -> str:
    """``"nan"`` for a 0-d array, ``"nan at index (1,)"`` for the first flagged element of an array."""
    if arr.ndim == 0:
        return str(arr[()])
    index = tuple(int(k) for k in np.argwhere(bad)[0])
    return f"{arr[index]} at index {index}"


def _whole(x: np.ndarray) -> np.ndarray:
    """Where the float array ``x`` holds a whole number (not NaN, not inf)."""
    with np.errstate(invalid="ignore"):  # fmod(inf, 1) is NaN, quietly
        return np.fmod(x, 1) == 0


def _integers_within(x: np.ndarray, lo: float, hi: float) -> bool:
    """Whether the bool/integer array ``x`` lies in [lo, hi], in one reduction where the bounds allow
    (a board in [0, 1], an image in [0, 255]), else two."""
    kind = x.dtype.kind
    if kind == "b" and lo <= 0 and hi >= 1:
        return True
    if kind == "u" and lo <= 0:
        return float(x.max()) <= hi
    if kind == "i" and lo == 0 and hi < 2 ** (8 * x.dtype.itemsize - 1):
        return float(x.view(f"u{x.dtype.itemsize}").max()) <= hi  # a negative value reads as a huge one
    return lo <= float(x.min()) and float(x.max()) <= hi


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of dtype {value.dtype}"
    return f"a {type(value).__name__} ({value!r:.60})"


def _first_bad(value: Any) -> str | None:
    """``"nan"`` / ``"nan at index (1,)"`` for a non-finite scalar / array, None when all finite."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None  # not numeric: the space check names that problem
    bad = ~np.isfinite(arr)
    return _at(arr, bad) if bad.any() else None


class _Leaf:
    """One distinct checked leaf space: its shape, whether it holds integers, its bounds."""

    __slots__ = ("space", "key", "shape", "integer", "float", "low", "high", "lo", "hi", "uniform", "bounded",
                 "finite_low", "finite_high", "finite_lows", "finite_highs")

    def __init__(self, space: gym.Space, key: tuple):
        self.space, self.key = space, key
        self.shape = tuple(int(k) for k in space.shape or ())
        dtype = np.dtype(space.dtype)
        self.integer = dtype.kind in "biu"
        self.float = dtype.kind == "f"
        low: Any
        high: Any
        if isinstance(space, gym.spaces.Box):
            low, high = space.low, space.high
        elif isinstance(space, gym.spaces.Discrete):
            low, high = space.start, space.start + space.n - 1
        elif isinstance(space, gym.spaces.MultiBinary):
            low, high = 0, 1
        elif isinstance(space, gym.spaces.MultiDiscrete):
            low = np.asarray(getattr(space, "start", 0))  # ``start`` is new in Gymnasium 1.0
            high = low + space.nvec - 1
        else:
            raise TypeError(f"no checked leaf space: {space}")
        self.low = np.broadcast_to(np.asarray(low, np.float64), self.shape)
        self.high = np.broadcast_to(np.asarray(high, np.float64), self.shape)
        size = self.low.size
        self.bounded = size > 0 and bool(np.isfinite(self.low).any() or np.isfinite(self.high).any())
        self.uniform = size == 0 or bool((self.low == self.low.flat[0]).all()
                                         and (self.high == self.high.flat[0]).all())
        self.lo = float(self.low.flat[0]) if size else -math.inf
        self.hi = float(self.high.flat[0]) if size else math.inf
        # the bounds with an infinite one made the largest double: a float value lies within them
        # exactly when it is finite and within the space's bounds (NaN and inf fail a comparison)
        big = np.finfo(np.float64).max
        self.finite_low, self.finite_high = np.maximum(self.low, -big), np.minimum(self.high, big)
        self.finite_lows, self.finite_highs = self.finite_low.ravel().tolist(), self.finite_high.ravel().tolist()

    @staticmethod
    def key_of(space: gym.Space) -> tuple:
        low = getattr(space, "low", None)
        high = getattr(space, "high", None)
        return (type(space).__name__, tuple(space.shape or ()), np.dtype(space.dtype).str, repr(space),
                None if low is None else np.asarray(low).tobytes(),
                None if high is None else np.asarray(high).tobytes())


class StepCheck:
    """Checks rewards and observations of step results before the collector absorbs them.

    ``finite`` (NaN/inf rewards and float observations raise
    :class:`~marl_note.types.NonFiniteError`) and ``spaces`` (observations must fit their spaces'
    shape and dtype; out-of-bounds values warn once) are described in the module docstring.
    ``step(results, ep_len, env_steps)`` checks one vector step's ``{env index: StepResult}``
    (rewards, observations and final observations; ``ep_len[i]``/``env_steps[i]`` are env ``i``'s
    steps before this one, in its episode and in all); ``reset(results, env_steps)`` checks the
    first observations of fresh episodes.

    Example:
        >>> from marl_note.envs.adapters import StepResult
        >>> spec = EnvSpec(("a",), {"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(2)}, False, False)
        >>> check = StepCheck(spec)
        >>> check.step({0: StepResult({"a": np.zeros(2)}, {}, {"a": 1.0})}, np.zeros(1, int), np.zeros(1, int))
        >>> bad = {0: StepResult({"a": np.zeros(3)}, {}, {"a": 1.0})}
        >>> try:
        ...     check.step(bad, np.array([4]), np.array([9]))
        ... except ValueError as err:
        ...     print(str(err).split(": ")[1].split(". ")[0])
        observation has shape (3,), but its space Box(-1.0, 1.0, (2,), float32) has shape (2,)
    """

    def __init__(self, spec: EnvSpec, finite: bool = True, spaces: bool = True):
        self.finite, self.spaces = bool(finite), bool(spaces)
        self.possible_agents = tuple(spec.possible_agents)
        self.known = frozenset(self.possible_agents)
        self.groups: list[_Leaf] = []
        index: dict[tuple, int] = {}
        # per agent: (path, group) of every leaf looked at (every checked leaf with ``spaces``, the
        # float ones otherwise); observations of equal leaf spaces are stacked together
        self.leaves: dict[str, list[tuple[tuple, int]]] = {}
        for agent in self.possible_agents:
            self.leaves[agent] = []
            for path, space in leaf_spaces(spec.observation_space(agent)):
                if not (self.spaces or (self.finite and _is_float(space))):
                    continue
                key = _Leaf.key_of(space)
                if key not in index:
                    index[key] = len(self.groups)
                    self.groups.append(_Leaf(space, key))
                self.leaves[agent].append((path, index[key]))
        self.any_float = any(self.groups[g].float for paths in self.leaves.values() for _, g in paths)
        self.gathers = any(self.leaves.values())
        # every agent sees one leaf of one shared space: gather the observations with no lookups
        firsts = {tuple(paths) for paths in self.leaves.values()}
        only = next(iter(firsts)) if len(firsts) == 1 else ()
        self.single: int | None = only[0][1] if len(only) == 1 and only[0][0] == () else None
        self.plain = {a: paths[0][1] if len(paths) == 1 and paths[0][0] == () else None
                      for a, paths in self.leaves.items()}
        # leaf spaces whose bounds are still watched (until the first out-of-bounds value)
        self.watch = [g.bounded and self.spaces for g in self.groups]

    # -- the cheap test -------------------------------------------------------------------------------
    def _gather(self, source: Mapping[str, Any], lists: list[list]) -> None:
        leaves, plain = self.leaves, self.plain
        for agent, ob in source.items():
            g = plain[agent]
            if g is not None:
                lists[g].append(ob)
            else:
                for path, g in leaves[agent]:
                    lists[g].append(_leaf(ob, path))

    def _observations_ok(self, values: Iterable[Any], final: bool) -> bool:
        """Whether every observation (and final observation) of these results passes."""
        try:
            if self.single is not None:
                items = [ob for res in values for ob in res.obs.values()]
                if final:
                    items += [ob for res in values if res.final_obs for ob in res.final_obs.values()]
                return not items or self._batch_ok(self.single, items)
            lists: list[list] = [[] for _ in self.groups]
            for res in values:
                self._gather(res.obs, lists)
                if final and res.final_obs:
                    self._gather(res.final_obs, lists)
        except (KeyError, IndexError, TypeError):  # an unknown agent or a malformed Dict/Tuple observation
            return False
        return all(self._batch_ok(g, items) for g, items in enumerate(lists) if items)

    def _batch_ok(self, g: int, items: list) -> bool:
        """Whether the observations ``items`` of leaf space ``g``, stacked, pass every check."""
        leaf = self.groups[g]
        try:
            x = np.asarray(items)
        except (ValueError, TypeError):  # ragged: some observation has another shape
            return False
        kind = x.dtype.kind
        if x.shape[1:] != leaf.shape or kind not in "biuf":
            return False
        if x.size == 0:
            return True
        if kind == "f" and leaf.integer and not _whole(x).all():  # whole numbers only (NaN and inf are not)
            return False
        want_finite = self.finite and kind == "f" and not leaf.integer
        bounds = self.watch[g]
        if not bounds:
            return not want_finite or bool(np.isfinite(x).all())
        if want_finite and x.size <= _FEW:  # finite and within the bounds, in one pass of Python comparisons
            rows = len(x)
            return all(lo <= v <= hi for v, lo, hi in zip(x.ravel().tolist(), leaf.finite_lows * rows,
                                                          leaf.finite_highs * rows))
        if not leaf.uniform:
            if want_finite:  # finite and within the bounds, in one pass
                return bool(((x >= leaf.finite_low) & (x <= leaf.finite_high)).all())
            return not ((x < leaf.low).any() or (x > leaf.high).any())
        if kind in "bui":
            return _integers_within(x, leaf.lo, leaf.hi)
        low, high = float(x.min()), float(x.max())  # NaN propagates into both
        if want_finite and not (math.isfinite(low) and math.isfinite(high)):
            return False
        return leaf.lo <= low and high <= leaf.hi

    def step(self, results: Mapping[int, Any], ep_len: Sequence[int], env_steps: Sequence[int]) -> None:
        """Check one vector step's results before they are absorbed."""
        values = results.values()
        ok = True
        if self.finite:
            total = sum(r for res in values for r in res.rewards.values())
            ok = total - total == 0  # NaN or inf makes ``total - total`` NaN
        if ok and self.gathers:
            ok = self._observations_ok(values, final=True)
        if not ok:
            for i in sorted(results):
                self._search(i, results[i], int(ep_len[i]) + 1, int(env_steps[i]) + 1)

    def reset(self, results: Mapping[int, Any], env_steps: Sequence[int]) -> None:
        """Check the reset observations of ``{env index: StepResult}``."""
        if self.gathers and not self._observations_ok(results.values(), final=False):
            for i in sorted(results):
                where = self._where(i, 0, int(env_steps[i]))
                self._search_agents({"observation": results[i].obs}, where)
                self._search_obs(results[i].obs, "observation", where)

    # -- the search for the culprit -------------------------------------------------------------------
    @staticmethod
    def _where(i: int, step: int, total: int) -> str:
        if step == 0:
            return f"env {i}, agent {{agent!r}}, at reset (env {i} has run {total} steps in all)"
        return f"env {i}, agent {{agent!r}}, step {step} of its episode (env {i}'s step {total} in all)"

    def _search(self, i: int, res: Any, step: int, total: int) -> None:
        where = self._where(i, step, total)
        self._search_agents({"reward": res.rewards, "final observation": res.final_obs, "observation": res.obs}, where)
        if self.finite:
            for agent, r in res.rewards.items():
                bad = _first_bad(r)
                if bad is not None:
                    raise NonFiniteError(f"{where.format(agent=agent)}: reward is {bad}. {_HOW_TO_DISABLE}")
        self._search_obs(res.final_obs, "final observation", where)
        # after an episode ended, ``obs`` is the next episode's reset observation
        self._search_obs(res.obs, "observation", self._where(i, 0, total) if res.episode_over else where)

    def _search_agents(self, sources: dict[str, Mapping[str, Any]], where: str) -> None:
        """An agent outside ``possible_agents`` (the adapters refuse them; a custom vector env might not)."""
        if not self.spaces:
            return
        for what, source in sources.items():
            for agent in source:
                if agent not in self.known:
                    raise ValueError(f"{where.format(agent=agent)}: the env returned a {what} for agent {agent!r}, "
                                     f"which is not in its possible_agents {list(self.possible_agents)}. An env must "
                                     f"list every agent it can ever have in possible_agents.")

    def _search_obs(self, source: Mapping[str, Any], what: str, where: str) -> None:
        for agent, ob in source.items():
            for path, g in self.leaves.get(agent, ()):
                name = what + "".join(f"[{k!r}]" for k in path)
                here = f"{where.format(agent=agent)}: {name}"
                try:
                    value = _leaf(ob, path)
                except (KeyError, IndexError, TypeError):
                    if not self.spaces:
                        continue
                    raise ValueError(f"{here} is missing: the env returned {_describe(ob)} for the space "
                                     f"{self.groups[g].space} at that place. {_FIX_SPACE}") from None
                self._judge(value, g, here)

    def _judge(self, value: Any, g: int, here: str) -> None:
        """Raise (or warn, for bounds) about one observation leaf ``value`` of leaf space ``g``."""
        if not self.spaces:
            bad = _first_bad(value)
            if bad is not None:
                raise NonFiniteError(f"{here} is {bad}. {_HOW_TO_DISABLE}")
            return
        leaf = self.groups[g]
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError):
            arr = None
        if arr is None or arr.dtype.kind not in "biuf":
            raise ValueError(f"{here} is {_describe(value)}, not numbers for its space {leaf.space}. {_FIX_SPACE}")
        if arr.shape != leaf.shape:
            raise ValueError(f"{here} has shape {arr.shape}, but its space {leaf.space} has shape {leaf.shape}. "
                             f"{_FIX_SPACE}")
        if arr.dtype.kind == "f":
            if leaf.integer:
                fraction = ~_whole(arr)
                if fraction.any():
                    raise ValueError(f"{here} is {_at(arr, fraction)}, not a whole number as its integer space "
                                     f"{leaf.space} holds. {_FIX_SPACE}")
            elif self.finite:
                bad = ~np.isfinite(arr)
                if bad.any():
                    raise NonFiniteError(f"{here} is {_at(arr, bad)}. {_HOW_TO_DISABLE}")
        if self.watch[g]:
            out = (arr < leaf.low) | (arr > leaf.high)
            if out.any():
                self.watch[g] = False  # looked at once per collector; warned once per process
                if leaf.key not in _WARNED:
                    _WARNED.add(leaf.key)
                    warnings.warn(f"{here} is {_at(arr, out)}, outside its space {leaf.space} (used as it is; "
                                  f"warned once per space)", UserWarning, stacklevel=2)
