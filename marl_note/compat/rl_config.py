"""The ``RL`` base class's hyperparameters and the helpers its backends share (numpy only).

:class:`RLConfig` holds what the base class itself uses; :func:`discover` finds the user's networks
and optimisers by attribute; :func:`loss_list` checks what the user's loss returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from marl_note import validation
from marl_note.agents.options import ReplayOptions

__all__ = ["RLConfig", "REPLAY_FIELDS", "discover", "loss_list", "loss_metrics"]

# the RLConfig fields the replay buffer is built from
REPLAY_FIELDS = ("buffer_size", "num_steps", "prioritized", "alpha", "beta", "initial_td", "TRL")


@dataclass(frozen=True)
class RLConfig(ReplayOptions):
    """The hyperparameters the RL base class itself uses (the user's class adds its own).

    - ``buffer_size``, ``num_steps``, ``prioritized``, ``alpha``, ``beta``, ``initial_td``: the replay
      (:class:`~marl_note.agents.options.ReplayOptions`): n-step returns (the stored rows carry
      ``discount = gamma**k``, read by the loss from ``self.batch.discount``) and prioritized replay
      (the original ``PR`` and ``initial_TD``; the loss reads the importance weights from
      ``self.batch.weights``; the class defines ``td_error`` for the priorities).
    - ``update_steps``: gradient steps per ``update()`` call.
    - ``TRL``: the loss gets ordered step triplets of one episode
      (:class:`~marl_note.compat.triplet.TripletReplayBuffer`) instead of single transitions.
    - ``IRL``: ``action(s)`` returns ``(output, aux)``; acting uses ``output``.
    - ``update_param_steps`` / ``update_param_batches``: call ``update_param()`` once every that
      many agent steps (transitions observed) / gradient steps, instead of after every gradient step.

    Example:
        >>> RLConfig(learning_starts=8).update_steps
        1
        >>> RLConfig(gamma=1.5)
        Traceback (most recent call last):
        ...
        ValueError: gamma must be in [0, 1] (the discount factor), got 1.5
    """

    learning_starts: int = 1000
    update_steps: int = 1
    gamma: float = 0.99
    max_grad_norm: float | None = None
    TRL: bool = False
    IRL: bool = False
    update_param_steps: int | None = None
    update_param_batches: int | None = None

    def _check(self) -> None:
        v = validation
        checked = {
            "learning_starts": v.non_negative_int("learning_starts", self.learning_starts,
                                                  "stored transitions before the first update"),
            "update_steps": v.non_negative_int("update_steps", self.update_steps, "gradient steps per update() call"),
            "gamma": v.unit_interval("gamma", self.gamma, "the discount factor"),
            "max_grad_norm": v.optional(v.positive_float, "max_grad_norm", self.max_grad_norm,
                                        "the gradient norm clip"),
            "update_param_steps": v.optional(v.positive_int, "update_param_steps", self.update_param_steps,
                                             "agent steps between update_param() calls"),
            "update_param_batches": v.optional(v.positive_int, "update_param_batches", self.update_param_batches,
                                               "gradient steps between update_param() calls"),
        }
        for name in ("TRL", "IRL"):
            flag = getattr(self, name)
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
            checked[name] = bool(flag)
        for name, value in checked.items():
            self._put(name, value)
        if self.TRL and (self.prioritized or self.num_steps > 1):
            raise ValueError("TRL (triplets of one episode) cannot be combined with prioritized replay (prioritized) "
                             "or n-step returns (num_steps > 1)")
        if self.update_param_steps is not None and self.update_param_batches is not None:
            raise ValueError("give update_param_steps (agent steps) or update_param_batches (gradient steps) "
                             "between update_param() calls, not both")


def discover(agent: Any, module_type: type, optimizer_type: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """The user's networks and optimisers on ``agent``: ``({attribute: module}, {name: optimizer})``.

    Optimisers are one attribute (any name) or a list ``agent.optimizers``, named ``optimizers.<i>``.

    Example:
        >>> from types import SimpleNamespace
        >>> discover(SimpleNamespace(q=1.0, target=2.0, optimizer="adam", n=3), float, str)
        ({'q': 1.0, 'target': 2.0}, {'optimizer': 'adam'})
    """
    nets = {k: v for k, v in vars(agent).items() if isinstance(v, module_type)}
    optims = {k: v for k, v in vars(agent).items() if isinstance(v, optimizer_type)}
    many = getattr(agent, "optimizers", None)
    if many is not None:
        if not isinstance(many, (list, tuple)) or not all(isinstance(o, optimizer_type) for o in many):
            raise TypeError(f"self.optimizers must be a list of {optimizer_type.__module__.split('.')[0]} optimizers")
        if optims:
            raise TypeError(f"set either self.optimizers or single optimizer attributes, not both "
                            f"(found {sorted(optims)})")
        optims = {f"optimizers.{i}": o for i, o in enumerate(many)}
    elif len(optims) > 1:
        raise TypeError(f"several optimizer attributes {sorted(optims)}: put them in a list "
                        f"self.optimizers = [...] and return one loss per optimizer")
    return nets, optims


def loss_list(agent: Any, out: Any, n_optimizers: int) -> list:
    """What ``agent.__call__`` returned as a list with one loss per optimiser, or a ValueError."""
    losses = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(losses) != n_optimizers:
        raise ValueError(f"{type(agent).__name__}.__call__ returned {len(losses)} losses for {n_optimizers} "
                         f"optimizers; return one loss per optimizer")
    return losses


def loss_metrics(totals: dict[int, float], steps: int) -> dict[str, Any]:
    """``loss`` (the sum over optimisers, averaged over steps) and, with several, ``loss_<i>`` each.

    Example:
        >>> loss_metrics({0: 4.0, 1: 2.0}, 2)
        {'loss': 3.0, 'loss_0': 2.0, 'loss_1': 1.0}
    """
    losses = list(totals.values())
    metrics: dict[str, Any] = {}
    if steps:
        metrics["loss"] = sum(losses) / steps
        if len(losses) > 1:
            metrics.update({f"loss_{i}": t / steps for i, t in enumerate(losses)})
    return metrics
