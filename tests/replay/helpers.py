"""Shared builders for replay tests."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from marl_note.types import Transitions

OBS_SPACE = gym.spaces.Box(-10, 10, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(4)


def make_batch(n: int, start: int = 0, masks: bool = False, discount: bool = False, stream=None,
               obs_dim: int = 3) -> Transitions:
    """Transitions whose every field encodes the item's global number ``start + i``."""
    ids = np.arange(start, start + n)
    obs = np.repeat(ids[:, None], obs_dim, axis=1).astype(np.float32)
    mask = None
    if masks:
        mask = np.zeros((n, 4), bool)
        mask[np.arange(n), ids % 4] = True
    return Transitions(obs=obs, act=ids % 4, rew=ids.astype(np.float32), next_obs=obs + 0.5,
                       terminated=ids % 5 == 0, truncated=ids % 7 == 0,
                       mask=mask, next_mask=None if mask is None else ~mask,
                       discount=(0.9 ** (ids % 3)).astype(np.float32) if discount else None,
                       stream=None if stream is None else np.asarray(stream))
