"""Non-finite rewards and observations, caught as the collector receives them.

The check lives in :mod:`marl_note.trainers.step_check` beside the observation space check, so that
both look at one gathering of each vector step; :class:`FiniteCheck` is its non-finite half alone
(NaN/inf rewards and float observations; shapes, dtypes and bounds are not looked at).
"""
from __future__ import annotations

from marl_note.trainers.step_check import StepCheck, float_leaves
from marl_note.types import EnvSpec

__all__ = ["FiniteCheck", "float_leaves"]


class FiniteCheck(StepCheck):
    """:class:`~marl_note.trainers.step_check.StepCheck` with only its non-finite check.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.envs.adapters import StepResult
        >>> from marl_note.types import NonFiniteError
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
        super().__init__(spec, finite=True, spaces=False)
