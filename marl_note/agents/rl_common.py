"""Backend-neutral pieces shared by :mod:`marl_note.agents.torch.rl` and :mod:`marl_note.agents.tf.rl`.

numpy only (no torch, no tensorflow): turning the forward pass of ``action(s)`` into actions
(masked argmax or the exploration ``policy`` for Discrete actions, ``noise`` added and clipped for
Box actions), the update schedule (``update_steps`` gradient steps once ``learning_starts``
transitions are stored, mean losses and policy metrics) and the ``policy.*`` / ``noise.*``
entries of ``state_dict``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from marl_note.agents.checks import check_mask
from marl_note.agents.policies import masked_argmax

__all__ = ["select_actions", "run_update_schedule", "run_updates", "explorer_state", "load_explorer_state"]


def select_actions(agent, out: np.ndarray, batch: int, mask, explore: bool) -> np.ndarray:
    """Greedy or exploring actions from the forward pass ``out`` of ``action(s)``."""
    name = type(agent).__name__
    if agent.discrete:
        if out.shape != (batch, agent.n_actions):
            raise ValueError(f"{name}.action returned shape {out.shape}; expected ({batch}, {agent.n_actions}) "
                             f"values for {agent.action_space}")
        mask = check_mask(mask, batch, agent.n_actions)
        a = agent.policy.select(out, mask, agent.rng) if explore else masked_argmax(out, mask)
        return a + agent.action_start
    space = agent.action_space
    if out.size != batch * math.prod(space.shape):
        raise ValueError(f"{name}.action returned shape {out.shape}; expected {(batch, *space.shape)} for {space}")
    out = out.reshape(batch, *space.shape).astype(np.float64)
    if explore:
        size = tuple(agent.noise.size)
        if size == (batch, *space.shape):
            out = out + agent.noise.sample()
        elif size == tuple(space.shape):
            out = out + np.stack([agent.noise.sample() for _ in range(batch)])
        else:
            raise ValueError(f"noise of size {size} fits neither one action {space.shape} nor the batch "
                             f"{(batch, *space.shape)}")
        out = np.clip(out, np.where(np.isfinite(space.low), space.low, -np.inf),
                      np.where(np.isfinite(space.high), space.high, np.inf))
    return out.astype(space.dtype)


def _mean_metrics(totals: dict[Any, float], steps: int) -> dict[str, Any]:
    return {k: v / steps for k, v in totals.items()} if steps else {}


def run_update_schedule(agent, batch_size: int, step: Callable[[int], Mapping[Any, float]], *, new: int = 0,
                        extra: Callable[[], Mapping[str, Any]] = dict,
                        summarise: Callable[[dict[Any, float], int], dict[str, Any]] = _mean_metrics
                        ) -> dict[str, Any]:
    """One ``update()`` call's gradient steps, shared by the DQN, DDPG and RL base classes.

    Nothing happens before ``agent.learning_starts`` transitions are stored (``{"gradient_steps": 0}``).
    Otherwise ``step(batch_size)`` runs ``agent.update_steps`` times, or, when that is None,
    ``max(1, round(agent.replay_ratio * new))`` times for ``new`` transitions observed since the last
    call; its metrics are summed per key and handed to ``summarise(totals, steps)`` (the mean by
    default), then ``extra()`` (e.g. policy metrics) and ``gradient_steps`` are added.

    Example:
        >>> from types import SimpleNamespace
        >>> agent = SimpleNamespace(replay=[0] * 8, learning_starts=4, update_steps=None, replay_ratio=0.5)
        >>> losses = iter([1.0, 3.0])
        >>> run_update_schedule(agent, 2, lambda b: {"loss": next(losses)}, new=4, extra=lambda: {"eps": 0.1})
        {'loss': 2.0, 'eps': 0.1, 'gradient_steps': 2}
        >>> agent.learning_starts = 9; run_update_schedule(agent, 2, lambda b: {}, new=4)
        {'gradient_steps': 0}
    """
    if len(agent.replay) == 0 or len(agent.replay) < agent.learning_starts:
        return {"gradient_steps": 0}
    steps = agent.update_steps if agent.update_steps is not None else max(1, round(agent.replay_ratio * new))
    totals: dict[Any, float] = {}
    for _ in range(steps):
        for k, v in step(int(batch_size)).items():
            totals[k] = totals[k] + v if k in totals else v
    metrics = summarise(totals, steps)
    metrics.update(extra())
    metrics["gradient_steps"] = steps
    return metrics


def _loss_metrics(totals: dict[int, float], steps: int) -> dict[str, Any]:
    losses = list(totals.values())
    metrics: dict[str, Any] = {}
    if steps:
        metrics["loss"] = sum(losses) / steps
        if len(losses) > 1:
            metrics.update({f"loss_{i}": t / steps for i, t in enumerate(losses)})
    return metrics


def run_updates(agent, batch_size: int) -> dict[str, Any]:
    """``agent.update_steps`` calls of ``agent._gradient_step`` (none before ``learning_starts``); mean losses."""
    def policy_metrics() -> dict[str, float]:
        return {} if agent.policy is None else {k: float(v) for k, v in agent.policy.metrics().items()}

    return run_update_schedule(agent, batch_size, lambda b: dict(enumerate(agent._gradient_step(b))),
                               extra=policy_metrics, summarise=_loss_metrics)


def explorer_state(agent) -> dict[str, np.ndarray]:
    """``policy.<key>`` / ``noise.<key>`` arrays of the agent's exploration state."""
    state = {}
    for prefix in ("policy", "noise"):
        obj = getattr(agent, prefix)
        if obj is not None and hasattr(obj, "state_dict"):
            state.update({f"{prefix}.{k}": np.asarray(v) for k, v in obj.state_dict().items()})
    return state


def load_explorer_state(agent, state: Mapping[str, Any]) -> None:
    """Inverse of :func:`explorer_state` (keys the agent has no object for are ignored)."""
    for prefix in ("policy", "noise"):
        obj = getattr(agent, prefix)
        part = {k[len(prefix) + 1:]: v for k, v in state.items() if k.startswith(prefix + ".")}
        if obj is not None and part and hasattr(obj, "load_state_dict"):
            obj.load_state_dict(part)
