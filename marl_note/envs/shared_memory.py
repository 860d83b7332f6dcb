"""Shared-memory slots for :class:`~marl_note.envs.subproc.SubprocVectorEnv` observations.

One block per worker process holds, for every env and agent whose (mask-stripped) observation
space is a ``Box``, ``Discrete``, ``MultiBinary`` or ``MultiDiscrete``, two cache-line aligned
slots: one for ``obs`` and one for ``final_obs``. The worker writes an observation that fits its
slot exactly (dtype/shape) into it and puts a marker in its place in the pickled
:class:`~marl_note.envs.adapters.StepResult`; the parent copies it back out. Anything else travels
through the pipe unchanged.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.envs.adapters import strip_action_mask_space

__all__ = ["slot_spec", "layout", "views", "to_slots", "from_slots"]


class _Marker:
    """Stands for an observation that travelled through shared memory (pickled by reference)."""

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_IN_SHM_ARRAY = _Marker("_IN_SHM_ARRAY")    # an ndarray: parent returns a copy of the slot
_IN_SHM_SCALAR = _Marker("_IN_SHM_SCALAR")  # a numpy scalar (e.g. np.int64 of a Discrete space)


def slot_spec(space: gym.Space) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of a shared-memory slot for an observation space, or None if it has none.

    The action mask is stripped by the adapters' :func:`~marl_note.envs.adapters.strip_action_mask_space`:
    ``Dict(observation=..., action_mask=...)`` becomes its ``observation`` space (any other masked
    ``Dict`` stays a ``Dict``, which has no slot).
    """
    space, _ = strip_action_mask_space(space)
    if isinstance(space, gym.spaces.Box):
        return tuple(int(n) for n in space.shape), np.dtype(space.dtype).str
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(space.dtype).str
    if isinstance(space, (gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return tuple(int(n) for n in space.shape), np.dtype(space.dtype).str
    return None


def layout(env_specs: list[dict[str, tuple]]) -> tuple[list[dict[str, tuple]], int]:
    """Byte offsets of every (env, agent) obs and final-obs slot in one block.

    Returns ``[{agent: (shape, dtype, obs_offset, final_offset)}] per env`` and the block size.
    """
    layout, offset = [], 0
    for spec in env_specs:
        env_layout = {}
        for agent, (shape, dtype) in spec.items():
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            align = 64  # keep every slot cache-line aligned
            obs_off = offset
            final_off = obs_off + -(-nbytes // align) * align
            offset = final_off + -(-nbytes // align) * align
            env_layout[agent] = (shape, dtype, obs_off, final_off)
        layout.append(env_layout)
    return layout, offset


def views(buf: Any, layout: list[dict[str, tuple]]) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """numpy views ``[{agent: (obs_slot, final_slot)}]`` into a shared block."""
    out = []
    for env_layout in layout:
        out.append({agent: (np.ndarray(shape, dtype, buf, obs_off), np.ndarray(shape, dtype, buf, final_off))
                    for agent, (shape, dtype, obs_off, final_off) in env_layout.items()})
    return out


def to_slots(values: dict[str, Any], slots: dict[str, tuple], which: int) -> dict[str, Any]:
    """Write what fits into shared slots; return the dict with markers in their place."""
    out = {}
    for agent, value in values.items():
        slot = slots.get(agent)
        if slot is not None:
            slot = slot[which]
            if isinstance(value, np.ndarray) and value.dtype == slot.dtype and value.shape == slot.shape:
                slot[...] = value
                value = _IN_SHM_ARRAY
            elif isinstance(value, np.generic) and value.dtype == slot.dtype and slot.shape == ():
                slot[...] = value
                value = _IN_SHM_SCALAR
        out[agent] = value
    return out


def from_slots(values: dict[str, Any], slots: dict[str, tuple], which: int) -> dict[str, Any]:
    """Inverse of :func:`to_slots` (copies, since the slot is overwritten by the next step)."""
    out = {}
    for agent, value in values.items():
        if value is _IN_SHM_ARRAY:
            value = slots[agent][which].copy()
        elif value is _IN_SHM_SCALAR:
            value = slots[agent][which][()]
        out[agent] = value
    return out

