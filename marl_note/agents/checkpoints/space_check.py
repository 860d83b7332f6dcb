"""Comparing the spaces a checkpoint records with those of the live agent that loads it.

Weights fit an agent only for the observations and actions they were trained on: a network
trained on ``Box(-1, 1, (4,), float32)`` observations has the same shapes as one for
``Box(0, 255, (4,), uint8)``, so the array checks alone would load it. :func:`space_differences`
lists every difference that matters: the kind of space, its shape and dtype, a Box's bounds, a
Discrete's ``n`` and ``start``, MultiBinary's ``n``, MultiDiscrete's ``nvec``, a Dict's keys and a
Tuple's length (and each part of those), and for agents that keep one space per agent (MADDPG's
``observation_spaces``), the agents and their order. :func:`check_agent_spaces` raises a
CheckpointError naming them.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> for line in space_differences(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Box(0, 255, (4,), np.uint8),
    ...                               "observation_space"):
    ...     print(line)
    observation_space: dtype uint8, the checkpoint has float32
    observation_space: bounds [0, 255], the checkpoint has [-1.0, 1.0]
    >>> space_differences(gym.spaces.Discrete(3), gym.spaces.Discrete(4), "action_space")
    ['action_space: n=4, the checkpoint has n=3']
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.checkpoints.format import CheckpointError, space_from_json, space_to_json

__all__ = ["space_differences", "check_agent_spaces", "spaces_to_json", "spaces_from_json"]

_KINDS = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete,
          gym.spaces.Dict, gym.spaces.Tuple)


def spaces_to_json(value: Any) -> dict[str, Any]:
    """A space as :func:`~marl_note.agents.checkpoints.format.space_to_json`, or a mapping of spaces
    (one per agent) as ``{"$spaces": [[key, space], ...]}`` in its order."""
    if isinstance(value, Mapping) and not isinstance(value, gym.spaces.Dict):
        return {"$spaces": [[str(k), space_to_json(v)] for k, v in value.items()]}
    return space_to_json(value)


def spaces_from_json(d: Any) -> Any:
    """The inverse of :func:`spaces_to_json`; CheckpointError for anything that is not such a description."""
    try:
        if isinstance(d, Mapping) and "$spaces" in d:
            pairs = d["$spaces"]
            if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                                      for p in pairs):
                raise CheckpointError("$spaces must be a list of [name, space] pairs")
            return {k: space_from_json(v) for k, v in pairs}
        if not isinstance(d, Mapping):
            raise CheckpointError(f"a space description must be an object, got {type(d).__name__}")
        return space_from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"not a valid space description ({type(exc).__name__}: {exc})") from None


def _kind(space: Any) -> str:
    for kind in _KINDS:
        if isinstance(space, kind):
            return kind.__name__
    return type(space).__name__


def _values(a: np.ndarray) -> str:
    """An array's values in a few characters: one number if all are equal."""
    a = np.asarray(a)
    if a.size and bool((a == a.flat[0]).all()):
        return str(a.flat[0].item())
    return np.array2string(a, threshold=8, max_line_width=60, separator=", ")


def space_differences(saved: Any, live: Any, name: str) -> list[str]:
    """How the live space (or mapping of spaces) ``live`` differs from the checkpoint's ``saved``: one
    line per difference, each starting with ``name`` (or a path inside it); empty when they match."""
    saved_per_agent = isinstance(saved, Mapping) and not isinstance(saved, gym.spaces.Dict)
    live_per_agent = isinstance(live, Mapping) and not isinstance(live, gym.spaces.Dict)
    if saved_per_agent != live_per_agent:
        return [f"{name}: one space per agent ({list(live)}), the checkpoint has one space" if live_per_agent
                else f"{name}: one space, the checkpoint has one per agent ({list(saved)})"]
    if saved_per_agent:
        if list(live) != list(saved):
            return [f"{name}: agents {list(live)}, the checkpoint has {list(saved)}"]
        return [line for k in saved for line in space_differences(saved[k], live[k], f"{name}[{k!r}]")]
    kind, live_kind = _kind(saved), _kind(live)
    if kind != live_kind:
        return [f"{name}: a {live_kind} space, the checkpoint has a {kind}"]
    if isinstance(saved, gym.spaces.Dict):
        if sorted(live.spaces) != sorted(saved.spaces):
            return [f"{name}: keys {sorted(live.spaces)}, the checkpoint has {sorted(saved.spaces)}"]
        return [line for k in saved.spaces for line in space_differences(saved[k], live[k], f"{name}[{k!r}]")]
    if isinstance(saved, gym.spaces.Tuple):
        if len(live.spaces) != len(saved.spaces):
            return [f"{name}: {len(live.spaces)} parts, the checkpoint has {len(saved.spaces)}"]
        return [line for k, (s, v) in enumerate(zip(saved.spaces, live.spaces))
                for line in space_differences(s, v, f"{name}[{k}]")]
    return _leaf_differences(saved, live, name)


def _leaf_differences(saved: Any, live: Any, name: str) -> list[str]:
    """``space_differences`` of two spaces of one kind that hold no other spaces."""
    if isinstance(saved, gym.spaces.Discrete):
        return [f"{name}: {key}={int(getattr(live, key))}, the checkpoint has {key}={int(getattr(saved, key))}"
                for key in ("n", "start") if int(getattr(live, key)) != int(getattr(saved, key))]
    if isinstance(saved, gym.spaces.MultiBinary):
        n, live_n = np.asarray(saved.n).tolist(), np.asarray(live.n).tolist()
        return [] if n == live_n else [f"{name}: n={live_n}, the checkpoint has n={n}"]
    if not isinstance(saved, (gym.spaces.Box, gym.spaces.MultiDiscrete)):
        return []  # a kind the format cannot record: never in a checkpoint
    if tuple(live.shape) != tuple(saved.shape):
        return [f"{name}: shape {tuple(live.shape)}, the checkpoint has {tuple(saved.shape)}"]
    out = []
    if np.dtype(live.dtype) != np.dtype(saved.dtype):
        out.append(f"{name}: dtype {np.dtype(live.dtype)}, the checkpoint has {np.dtype(saved.dtype)}")
    if isinstance(saved, gym.spaces.MultiDiscrete):
        if not np.array_equal(live.nvec, saved.nvec):
            out.append(f"{name}: nvec {_values(live.nvec)}, the checkpoint has {_values(saved.nvec)}")
    elif not (np.array_equal(live.low, saved.low) and np.array_equal(live.high, saved.high)):
        out.append(f"{name}: bounds [{_values(live.low)}, {_values(live.high)}], the checkpoint has "
                   f"[{_values(saved.low)}, {_values(saved.high)}]")
    return out


def check_agent_spaces(agent: Any, saved: Mapping[str, Any], what: str, names: Sequence[str],
                       hint: str = "") -> None:
    """Raise CheckpointError if the spaces ``saved`` (``{argument name: space or {agent: space}}``) differ
    from ``agent``'s own. Compared are the ``names`` that the agent also records (its
    ``saving_spaces``) and has set."""
    own = tuple(getattr(type(agent), "saving_spaces", ()))
    lines = []
    for name in names:
        live = getattr(agent, name, None) if name in own else None
        if live is not None and name in saved:
            lines += space_differences(saved[name], live, name)
    if lines:
        raise CheckpointError(f"{what}: the checkpoint was saved for other spaces than this agent's: "
                              f"{'; '.join(lines)}{hint}")
