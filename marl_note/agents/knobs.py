"""Hyperparameters a built-in agent lets a controller change between updates (numpy only).

:class:`Adjustable` (mixed into :class:`~marl_note.agents.core.AgentCore`) gives every built-in
agent ``hyperparameters()`` (the adjustable ones with their current values) and
``set_hyperparameter(name, value)``. What is adjustable:

- the config fields a core names in ``_config_knobs()`` (``tau``, ``gamma``, PPO's ``clip_range``,
  ...): the core's config is replaced through its dataclass (so the value is checked as the
  constructor checks it) and the networks are told (``nets.set_hyperparameter``, where a traced
  TensorFlow step reads the value from a variable);
- ``eps`` of an epsilon-greedy exploration policy (it stays at the value set, its annealing ends);
- ``alpha`` and ``beta`` of a prioritized replay buffer (``agent.replay``);
- ``window_size`` of a replay buffer with a sampling window (uniform, prioritized or compact; not
  HER): the newest items sampling draws from (its capacity while unrestricted), a whole number in
  ``[1, capacity]``.

What was set is not in the agent's ``state_dict()``: the controller that sets it keeps its own
state and sets it again after a resume. Values already baked into stored data (n-step returns
discounted at insertion) keep the discount they were stored with.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.agents.torch import DDPG
    >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), hidden_sizes=(4,), seed=0)
    >>> agent.hyperparameters()  # the sampling window is the whole replay until it is set
    {'tau': 0.05, 'gamma': 0.98, 'window_size': 100000.0}
    >>> agent.set_hyperparameter("window_size", 5000), agent.replay.window
    (5000.0, 5000)
    >>> agent.set_hyperparameter("tau", 0.01)
    0.01
    >>> agent.cfg.tau, agent.nets.cfg.tau
    (0.01, 0.01)
    >>> agent.set_hyperparameter("tau", 2.0)
    Traceback (most recent call last):
    ...
    ValueError: tau must be in (0, 1] (the rate at which the target networks follow), got 2.0
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from marl_note.agents.exploration.policies import LinearSchedule

__all__ = ["Adjustable"]


class Adjustable:
    """``hyperparameters()`` / ``set_hyperparameter()`` over a core's config, policy and replay."""

    cfg: Any
    nets: Any

    def _config_knobs(self) -> tuple[str, ...]:
        """The config fields that may change at run time (each core names its own)."""
        return ()

    def _eps_policy(self) -> Any:
        policy = getattr(self, "policy", None)
        return policy if type(policy).__name__ == "EpsGreedyQPolicy" else None

    def _prioritized_replay(self) -> Any:
        replay = getattr(self, "replay", None)
        return replay if callable(getattr(replay, "set_alpha", None)) else None

    def _windowed_replay(self) -> Any:
        replay = getattr(self, "replay", None)
        return replay if callable(getattr(replay, "set_window", None)) else None

    def hyperparameters(self) -> dict[str, float]:
        """``{name: current value}`` of every hyperparameter :meth:`set_hyperparameter` accepts."""
        out = {name: float(getattr(self.cfg, name)) for name in self._config_knobs()
               if getattr(self.cfg, name) is not None}
        if self._eps_policy() is not None:
            out["eps"] = float(self._eps_policy().eps)
        replay = self._prioritized_replay()
        if replay is not None:
            out["alpha"], out["beta"] = float(replay.alpha), float(replay.beta)
        replay = self._windowed_replay()
        if replay is not None:
            out["window_size"] = float(replay.capacity if replay.window is None else replay.window)
        return out

    def set_hyperparameter(self, name: str, value: float) -> float:
        """Set one hyperparameter from the next step on (checked first; nothing changes on an error);
        returns the value now in force."""
        known = self.hyperparameters()
        replay = getattr(self, "replay", None)
        if name == "window_size" and name not in known and replay is not None:
            raise KeyError(f"{type(self).__name__}'s replay ({type(replay).__name__}) has no sampling window "
                           f"(uniform, prioritized and compact replay buffers have one)")
        if name not in known:
            raise KeyError(f"{type(self).__name__} has no adjustable hyperparameter {name!r}; "
                           f"it has {sorted(known)}")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
        if name in self._config_knobs():
            self.cfg = dataclasses.replace(self.cfg, **{name: value})  # the config checks it
            for attr in ("cfg", "config"):
                if hasattr(self.nets, attr):
                    setattr(self.nets, attr, self.cfg)
            if callable(getattr(self.nets, "set_hyperparameter", None)):
                self.nets.set_hyperparameter(name, float(getattr(self.cfg, name)))
            if name == "gamma" and "gamma" in vars(self):
                self.gamma = self.cfg.gamma
        elif name == "eps":
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"eps must be in [0, 1], got {value}")
            self._eps_policy().schedule = LinearSchedule(value, None, 1)
        elif name == "window_size":
            if not value.is_integer():
                raise ValueError(f"window_size must be a whole number of items, got {value}")
            self._windowed_replay().set_window(int(value))
        elif name == "alpha":
            self._prioritized_replay().set_alpha(value)
        else:
            self._prioritized_replay().set_beta(value)
        return self.hyperparameters()[name]
