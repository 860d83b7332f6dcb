"""Non-finite rewards and observations, caught as the collector receives them.

An env that returns a NaN (or infinite) reward or observation turns an agent's weights NaN a
few updates after the value is learned from, far from its cause. :class:`FiniteCheck` looks at
every step result (and every reset observation) before the collector folds it into returns and
transitions, and raises :class:`~marl_note.types.NonFiniteError` naming the env index, the agent,
what was non-finite and the env step. The common case is cheap: all rewards of one vector step
are summed in Python (NaN and inf survive a sum) and the float observation leaves are flattened
into one array for a single ``np.isfinite``; integer, boolean and Discrete observations are
never looked at. Only when that says "non-finite" is the culprit searched for.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.types import EnvSpec, NonFiniteError

__all__ = ["FiniteCheck", "float_leaves"]

_HOW_TO_DISABLE = ("Fix or wrap the env, or turn this check off with check_finite=False "
                   "(Collector or DecentralizedTrainer).")


def float_leaves(space: gym.Space) -> list[tuple]:
    """Paths to the float ``Box`` leaves of an observation space (``[()]`` for a float Box itself).

    Integer/bool Boxes, Discrete, MultiBinary and MultiDiscrete spaces hold no NaN: no path.

    Example:
        >>> float_leaves(gym.spaces.Box(-1, 1, (3,))), float_leaves(gym.spaces.Box(0, 1, (3,), np.int8))
        ([()], [])
        >>> float_leaves(gym.spaces.Dict({"goal": gym.spaces.Box(-1, 1, (2,)), "bits": gym.spaces.MultiBinary(3)}))
        [('goal',)]
    """
    if isinstance(space, gym.spaces.Box):
        return [()] if np.dtype(space.dtype).kind == "f" else []
    if isinstance(space, gym.spaces.Dict):
        return [(key, *path) for key, sub in space.spaces.items() for path in float_leaves(sub)]
    if isinstance(space, gym.spaces.Tuple):
        return [(i, *path) for i, sub in enumerate(space.spaces) for path in float_leaves(sub)]
    return []


def _leaf(obs: Any, path: tuple) -> Any:
    for key in path:
        obs = obs[key]
    return obs


def _first_bad(value: Any) -> str | None:
    """``"nan"`` / ``"nan at index (1,)"`` for a non-finite scalar / array, None when all finite."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None  # not numeric: the agents' observation checks name that problem
    bad = ~np.isfinite(arr)
    if not bad.any():
        return None
    if arr.ndim == 0:
        return str(float(arr))
    index = tuple(int(k) for k in np.argwhere(bad)[0])
    return f"{arr[index]} at index {index}"


class FiniteCheck:
    """Raises :class:`~marl_note.types.NonFiniteError` for a NaN/inf reward or float observation.

    ``step(results, ep_len, env_steps)`` checks one vector step's ``{env index: StepResult}``
    (rewards, observations and final observations; ``ep_len[i]``/``env_steps[i]`` are env ``i``'s
    steps before this one, in its episode and in all); ``reset(results, env_steps)`` checks the
    first observations of fresh episodes.

    Example:
        >>> from marl_note.envs.adapters import StepResult
        >>> spec = EnvSpec(("a",), {"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(2)}, False, False)
        >>> check = FiniteCheck(spec)
        >>> check.step({0: StepResult({"a": np.zeros(2)}, {}, {"a": 1.0})}, np.zeros(1, int), np.zeros(1, int))
        >>> bad = {0: StepResult({"a": np.array([0.0, np.nan])}, {}, {"a": 1.0})}
        >>> try:
        ...     check.step(bad, np.array([4]), np.array([9]))
        ... except NonFiniteError as err:
        ...     print(str(err).split(". Fix")[0])
        env 0, agent 'a', step 5 of its episode (env 0's step 10 in all): observation is nan at index (1,)
    """

    def __init__(self, spec: EnvSpec):
        self.leaves = {a: float_leaves(spec.observation_space(a)) for a in spec.possible_agents}
        self.plain = {a: paths == [()] for a, paths in self.leaves.items()}
        self.any_float = any(self.leaves.values())
        self.all_plain = all(self.plain.values())

    # -- the cheap test -------------------------------------------------------------------------------
    def _gather(self, source: Mapping[str, Any], out: list) -> None:
        leaves, plain = self.leaves, self.plain
        for agent, ob in source.items():
            if plain[agent]:
                out.append(ob)
            elif leaves[agent]:
                out.extend(_leaf(ob, path) for path in leaves[agent])

    @staticmethod
    def _finite(arrays: list) -> bool:
        if not arrays:
            return True
        try:
            return bool(np.isfinite(np.concatenate(arrays, axis=None)).all())
        except (TypeError, ValueError):  # not numeric: let the thorough search decide
            return False

    def step(self, results: Mapping[int, Any], ep_len: np.ndarray, env_steps: np.ndarray) -> None:
        """Check one vector step's results before they are absorbed."""
        values = results.values()
        total = sum(r for res in values for r in res.rewards.values())
        arrays: list = []
        if self.all_plain:  # every agent sees one float array: no per-agent lookups
            arrays = [ob for res in values for ob in res.obs.values()]
            arrays += [ob for res in values if res.final_obs for ob in res.final_obs.values()]
        elif self.any_float:
            for res in values:
                self._gather(res.obs, arrays)
                if res.final_obs:
                    self._gather(res.final_obs, arrays)
        if total - total == 0 and self._finite(arrays):  # NaN or inf makes ``total - total`` NaN
            return
        for i in sorted(results):
            self._search(i, results[i], int(ep_len[i]) + 1, int(env_steps[i]) + 1)

    def reset(self, results: Mapping[int, Any], env_steps: np.ndarray) -> None:
        """Check the reset observations of ``{env index: StepResult}``."""
        if not self.any_float:
            return
        arrays: list = []
        for res in results.values():
            self._gather(res.obs, arrays)
        if not self._finite(arrays):
            for i in sorted(results):
                self._search_obs(i, results[i].obs, "observation", self._where(i, 0, int(env_steps[i])))

    # -- the search for the culprit -------------------------------------------------------------------
    @staticmethod
    def _where(i: int, step: int, total: int) -> str:
        if step == 0:
            return f"env {i}, agent {{agent!r}}, at reset (env {i} has run {total} steps in all)"
        return f"env {i}, agent {{agent!r}}, step {step} of its episode (env {i}'s step {total} in all)"

    def _search(self, i: int, res: Any, step: int, total: int) -> None:
        where = self._where(i, step, total)
        for agent, r in res.rewards.items():
            bad = _first_bad(r)
            if bad is not None:
                raise NonFiniteError(f"{where.format(agent=agent)}: reward is {bad}. {_HOW_TO_DISABLE}")
        self._search_obs(i, res.final_obs, "final observation", where)
        # after an episode ended, ``obs`` is the next episode's reset observation
        self._search_obs(i, res.obs, "observation", self._where(i, 0, total) if res.episode_over else where)

    def _search_obs(self, i: int, source: Mapping[str, Any], what: str, where: str) -> None:
        for agent, ob in source.items():
            for path in self.leaves.get(agent, ()):
                bad = _first_bad(_leaf(ob, path))
                if bad is not None:
                    name = what + "".join(f"[{k!r}]" for k in path)
                    raise NonFiniteError(f"{where.format(agent=agent)}: {name} is {bad}. {_HOW_TO_DISABLE}")

