"""Vector envs over adapted envs, with same-step auto-reset.

Every transport (in-process here; subprocess and Ray elsewhere) speaks one worker protocol:
``reset(seed) -> StepResult`` and ``step(actions) -> StepResult`` where a finished episode is
reset in the same step: the result then has ``episode_over=True``, the finished episode's
rewards/terminations/final observations, and ``obs``/``masks`` of the *next* episode's first
turn. No sub-env idles waiting for the slowest game. With ``state=True`` each result carries the
sub-env's global state where the env has one (``StepResult.state``, and ``final_state`` of the
finished episode when it reset), see :mod:`marl_note.envs.adapters`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from marl_note.envs.adapters import Adapter, StepResult, adapt


class AutoResetWorker:
    """One adapted env that resets itself in the step that ends an episode.

    Example:
        >>> import gymnasium as gym
        >>> w = AutoResetWorker(lambda: gym.make("CartPole-v1"))
        >>> list(w.reset(seed=0).obs)
        ['agent_0']
    """

    def __init__(self, env_fn: Callable[[], Any], state: bool = False):
        self.adapter: Adapter = adapt(env_fn(), state=state)

    def reset(self, seed: int | None = None) -> StepResult:
        return self.adapter.reset(seed=seed)

    def step(self, actions: dict[str, Any]) -> StepResult:
        res = self.adapter.step(actions)
        if res.episode_over:
            nxt = self.adapter.reset()
            res.obs, res.masks, res.state = nxt.obs, nxt.masks, nxt.state
        return res

    def close(self) -> None:
        self.adapter.close()


class SyncVectorEnv:
    """N envs stepped in this process, one after another.

    ``step`` takes ``{env_index: actions_dict}`` for the envs that should advance (envs missing from
    the dict stay put, which is how a test run gives each env its own episode quota) and returns
    ``{env_index: StepResult}``. ``state=True``: results carry each env's global state (module docstring).

    Example:
        >>> import gymnasium as gym
        >>> venv = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
        >>> sorted(venv.reset(seed=0))
        [0, 1]
        >>> res = venv.step({0: {"agent_0": 1}})
        >>> sorted(res), venv.num_envs
        ([0], 2)
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], state: bool = False):
        if len(env_fns) < 1:
            raise ValueError("a vector env needs at least one env")
        self.state = bool(state)
        self.workers = [AutoResetWorker(fn, state=self.state) for fn in env_fns]

    @property
    def num_envs(self) -> int:
        return len(self.workers)

    def reset(self, seed: int | None = None) -> dict[int, StepResult]:
        return {i: w.reset(None if seed is None else seed + i) for i, w in enumerate(self.workers)}

    def step(self, actions: dict[int, dict[str, Any]]) -> dict[int, StepResult]:
        return {i: self.workers[i].step(a) for i, a in actions.items()}

    def close(self) -> None:
        for w in self.workers:
            w.close()
