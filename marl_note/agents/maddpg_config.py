"""Deprecated module: :class:`~marl_note.agents.maddpg.MADDPGConfig` lives in :mod:`marl_note.agents.maddpg`
(this import path goes away in the next release)."""
from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "MADDPGConfig":
        warnings.warn("marl_note.agents.maddpg_config is deprecated: import MADDPGConfig from marl_note.agents.maddpg",
                      DeprecationWarning, stacklevel=2)
        from marl_note.agents.maddpg import MADDPGConfig

        return MADDPGConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
