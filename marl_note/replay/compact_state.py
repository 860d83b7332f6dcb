"""Checks of a saved :class:`~marl_note.replay.compact.CompactReplayBuffer` state, before anything loads.

The layout a compact buffer saves (``compact_specs``: one frame per slot, the ``next`` slot and the
write ``stamp``; the ring counters; the per-stream pending slots) and :func:`check_compact_state`,
which refuses a state that does not fit the buffer, naming the problem, and changes nothing.

Example:
    >>> import gymnasium as gym
    >>> sorted(compact_specs(gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(3)))[:3]
    ['act', 'next', 'obs']
"""
from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import OPTIONAL_FIELDS, transition_specs
from marl_note.replay.storage import Spec, check_rng_state_array, state_int

__all__ = ["compact_specs", "check_compact_state"]

_SCALARS = ("head", "filled", "written", "capacity")
_PENDING = ("pending_stream", "pending_slot", "pending_stamp", "last_stream", "last_slot", "last_stamp", "ended")


def compact_specs(observation_space: gym.Space, action_space: gym.Space) -> dict[str, Spec]:
    """Per-slot columns: one frame, the transition fields, the ``next`` slot and the write ``stamp``."""
    specs = transition_specs(observation_space, action_space)
    del specs["next_obs"]
    specs["next"] = ((), np.dtype(np.int64))
    specs["stamp"] = ((), np.dtype(np.int64))
    return specs


def check_compact_state(state: Mapping[str, np.ndarray], observation_space: gym.Space, action_space: gym.Space,
                        own_capacity: int) -> dict[str, Spec]:
    """The column specs of ``state`` if a buffer of these spaces and ``own_capacity`` slots can load it;
    else ValueError naming the problem."""
    if "obs" in state and "next_obs" in state:
        raise ValueError("state_dict is a plain ReplayBuffer's (obs and next_obs per row); this buffer stores "
                         "each observation once: load it into a ReplayBuffer (optimize_memory=False)")
    required = set(compact_specs(observation_space, action_space)) | set(_SCALARS) | set(_PENDING)
    required.add("rng_state")
    missing = required - set(state)
    if missing:
        raise ValueError(f"state_dict is missing keys {sorted(missing)}")
    unknown = set(state) - required - set(OPTIONAL_FIELDS)
    if unknown:
        raise ValueError(f"state_dict has unknown keys {sorted(unknown)}")
    check_rng_state_array(state["rng_state"])
    capacity, head, filled, written = (state_int(state, k) for k in ("capacity", "head", "filled", "written"))
    if capacity != own_capacity:
        raise ValueError(f"state_dict is for capacity {capacity}, this buffer has capacity {own_capacity}")
    if not 0 <= filled <= capacity or not 0 <= head < capacity or (filled < capacity and head != filled):
        raise ValueError(f"state_dict head {head} / filled {filled} are inconsistent with capacity {capacity}")
    specs = compact_specs(observation_space, action_space)
    for name in set(state) & set(OPTIONAL_FIELDS):
        arr = np.asarray(state[name])
        if arr.ndim != (1 if name == "discount" else 2):
            raise ValueError(f"state_dict[{name!r}] has shape {arr.shape}")
        specs[name] = ((), np.dtype(np.float32)) if name == "discount" else (arr.shape[1:], np.dtype(bool))
    for name, (shape, dtype) in specs.items():
        arr = np.asarray(state[name])
        if arr.shape != (filled, *shape) or arr.dtype != dtype:
            raise ValueError(f"state_dict[{name!r}] is {arr.dtype} {arr.shape}, "
                             f"expected {dtype} {(filled, *shape)}")
    nxt, stamp = np.asarray(state["next"]), np.asarray(state["stamp"])
    if nxt.size and (nxt.min() < -1 or nxt.max() >= filled):
        raise ValueError(f"state_dict['next'] must hold -1 or a slot in [0, {filled})")
    if np.any(stamp[nxt[nxt >= 0]] <= stamp[nxt >= 0]) or (stamp.size and stamp.max() >= written):
        raise ValueError("state_dict['next'] / ['stamp'] break the write order (a next frame older than its "
                         "transition, or a stamp not yet written)")
    _check_streams(state, filled)
    return specs


def _check_streams(state: Mapping[str, np.ndarray], filled: int) -> None:
    """The per-stream bookkeeping of a saved state: int64 vectors, slots within the written ones."""
    ended = np.asarray(state["ended"])
    if ended.ndim != 1 or ended.dtype != np.int64:
        raise ValueError(f"state_dict['ended'] must be an int64 vector, got {ended.dtype} {ended.shape}")
    for prefix in ("pending", "last"):
        arrs = [np.asarray(state[f"{prefix}_{k}"]) for k in ("stream", "slot", "stamp")]
        if any(a.ndim != 1 or a.dtype != np.int64 or a.shape != arrs[0].shape for a in arrs):
            raise ValueError(f"state_dict {prefix}_* must be int64 vectors of one length")
        if arrs[1].size and (arrs[1].min() < 0 or arrs[1].max() >= max(filled, 1)):
            raise ValueError(f"state_dict {prefix}_slot must lie in [0, {filled})")
