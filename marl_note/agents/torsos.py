"""Torso options and initial weights of actor-critic networks (DDPG, SAC, MADDPG), numpy only.

An actor reads the encoded observation; a critic ``Q(s, a)`` reads it too and takes the action
*after* the torso: an image goes through the critic's own conv torso ``{prefix}.conv``, the flat
features are joined by the action, then the MLP ``{prefix}`` runs. Without a conv torso this is
the plain ``[obs, act]`` MLP of before (same names, shapes and random draws).

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from marl_note.agents.encoders import ObsEncoder
    >>> enc = ObsEncoder(gym.spaces.Box(0, 255, (8, 8, 3), np.uint8), conv_layers=[(4, 3, 2, 0)])
    >>> w = head_weights("critic", enc, (16,), 1, np.random.default_rng(0), extra_in=2)
    >>> {k: v.shape for k, v in w.items() if k.endswith("weight")}  # 3x3x4 conv features + 2 action units
    {'critic.conv.0.weight': (4, 3, 3, 3), 'critic.0.weight': (16, 38), 'critic.2.weight': (1, 16)}
    >>> check_torso("auto", None), check_torso("conv", [(8, 3, 1, 1)])
    (('auto', None), ('conv', ((8, 3, 1, 1),)))
"""
from __future__ import annotations

from typing import Any

import numpy as np

from marl_note.agents.encoders import TORSOS, ObsEncoder, check_conv_layers
from marl_note.agents.networks import mlp_weights, torso_weights

__all__ = ["check_torso", "head_weights", "conv_of"]


def check_torso(torso: Any, conv_layers: Any, who: str = "DDPG, SAC and MADDPG") -> tuple[str, Any]:
    """``(torso, conv_layers)`` checked: a named torso (``"auto"``, ``"mlp"``, ``"conv"``) and
    ``(channels, kernel, stride, padding)`` layers or None; a ValueError otherwise."""
    if not isinstance(torso, str) or torso not in TORSOS:
        raise ValueError(f"torso must be one of {list(TORSOS)} for {who} (a user-supplied torso is for DQN), "
                         f"got {torso!r}")
    return torso, None if conv_layers is None else check_conv_layers(conv_layers)


def head_weights(prefix: str, encoder: ObsEncoder, hidden_sizes: tuple[int, ...], out_dim: int,
                 rng: np.random.Generator, extra_in: int = 0, init: str = "default") -> dict[str, np.ndarray]:
    """Initial weights of network ``prefix`` over ``encoder``'s observations: its conv torso (images
    only) then an MLP whose input is the torso's features plus ``extra_in`` (a critic's action)."""
    conv, width = torso_weights(prefix, encoder, rng, init)
    return {**conv, **mlp_weights(prefix, width + int(extra_in), hidden_sizes, out_dim, rng, init)}


def conv_of(cfg: Any) -> tuple[tuple[int, int, int, int], ...] | None:
    """The conv layers of a checked config whose torso resolved to ``"conv"``, else None."""
    return cfg.conv_layers if getattr(cfg, "torso", "mlp") == "conv" else None
