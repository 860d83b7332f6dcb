"""Initial weights of actor-critic networks over a torso (DDPG, SAC), numpy only.

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

The torso options themselves (``torso``, ``conv_layers``) are checked by
:class:`~marl_note.agents.options.TorsoOptions`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from marl_note.agents.encoders import ObsEncoder
from marl_note.agents.networks import mlp_weights, torso_weights

__all__ = ["head_weights", "conv_of"]


def head_weights(prefix: str, encoder: ObsEncoder, hidden_sizes: tuple[int, ...], out_dim: int,
                 rng: np.random.Generator, extra_in: int = 0, init: str = "default") -> dict[str, np.ndarray]:
    """Initial weights of network ``prefix`` over ``encoder``'s observations: its conv torso (images
    only) then an MLP whose input is the torso's features plus ``extra_in`` (a critic's action)."""
    conv, width = torso_weights(prefix, encoder, rng, init)
    return {**conv, **mlp_weights(prefix, width + int(extra_in), hidden_sizes, out_dim, rng, init)}


def conv_of(cfg: Any) -> tuple[tuple[int, int, int, int], ...] | None:
    """The conv layers of a checked config whose torso resolved to ``"conv"``, else None."""
    return cfg.conv_layers if getattr(cfg, "torso", "mlp") == "conv" else None
