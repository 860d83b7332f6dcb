"""Backend-neutral pieces shared by :mod:`marl_note.agents.torch.rl` and :mod:`marl_note.agents.tf.rl`.

numpy only (no torch, no tensorflow): turning the forward pass of ``action(s)`` into actions
(masked argmax or the exploration ``policy`` for Discrete actions, ``noise`` added and clipped for
Box actions), the update schedule (``update_steps`` gradient steps once ``learning_starts``
transitions are stored, mean losses and policy metrics) and the ``policy.*`` / ``noise.*``
entries of ``state_dict``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from marl_note.agents.checks import check_mask
from marl_note.agents.policies import masked_argmax

__all__ = ["select_actions", "run_updates", "explorer_state", "load_explorer_state"]


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


def run_updates(agent, batch_size: int) -> dict[str, Any]:
    """``agent.update_steps`` calls of ``agent._gradient_step`` (none before ``learning_starts``); mean losses."""
    if len(agent.replay) == 0 or len(agent.replay) < agent.learning_starts:
        return {"gradient_steps": 0}
    totals: list[float] = []
    for _ in range(agent.update_steps):
        losses = agent._gradient_step(int(batch_size))
        totals = losses if not totals else [t + x for t, x in zip(totals, losses)]
    steps = agent.update_steps
    metrics: dict[str, Any] = {}
    if steps:
        metrics["loss"] = sum(totals) / steps
        if len(totals) > 1:
            metrics.update({f"loss_{i}": t / steps for i, t in enumerate(totals)})
    if agent.policy is not None:
        metrics.update({k: float(v) for k, v in agent.policy.metrics().items()})
    metrics["gradient_steps"] = steps
    return metrics


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
