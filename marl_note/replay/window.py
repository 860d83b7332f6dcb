"""A replay buffer's sampling window: sampling draws from the newest ``window`` ring positions only.

The items outside the window stay stored (and keep their priorities); they are only not sampled,
and widening the window brings them back. ``None`` (the default) samples everything. For
:class:`~marl_note.replay.buffer.ReplayBuffer` and
:class:`~marl_note.replay.prioritized.PrioritizedReplayBuffer` the window counts transitions; for
:class:`~marl_note.replay.compact.CompactReplayBuffer` it counts slots (stored observations), as its
capacity does. The window is a sampling setting, not stored data: ``state_dict`` does not carry it
(a controller that sets it, like :class:`~marl_note.contrib.adaptive.Adaptive`, sets it again on
resume), and loading a state keeps the window a buffer has.

The newest ``span`` positions of a ring whose next write goes to ``head`` are
``head - span, ..., head - 1`` (mod capacity): one range of positions, or two when it wraps.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from marl_note.replay import ReplayBuffer
    >>> from marl_note.types import Transitions
    >>> buf = ReplayBuffer(4, gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), seed=0)
    >>> _ = buf.add(Transitions(obs=np.arange(6.0)[:, None] / 10, act=np.zeros(6, int), rew=np.arange(6.0),
    ...                         next_obs=np.zeros((6, 1)), terminated=np.zeros(6, bool), truncated=np.zeros(6, bool)))
    >>> buf.set_window(2)  # the ring wrapped: rows 0, 1 hold rewards 4, 5 (the newest)
    >>> buf.window, buf.window_positions().tolist(), sorted(set(buf.sample(64).rew.tolist()))
    (2, [0, 1], [4.0, 5.0])
    >>> buf.set_window(None); sorted(set(buf.sample(64).rew.tolist()))  # everything again
    [2.0, 3.0, 4.0, 5.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SamplingWindow", "check_window"]


def check_window(window: Any, capacity: int) -> int | None:
    """``window`` as an int in ``[1, capacity]``, or None; otherwise a ValueError naming the problem.

    Example:
        >>> check_window(None, 10), check_window(np.int64(3), 10)
        (None, 3)
        >>> check_window(0, 10)
        Traceback (most recent call last):
        ...
        ValueError: window must be an integer in [1, 10] (the newest items sampling draws from) or None, got 0
    """
    if window is None:
        return None
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or not 1 <= window <= capacity:
        raise ValueError(f"window must be an integer in [1, {capacity}] (the newest items sampling draws from) "
                         f"or None, got {window!r}")
    return int(window)


class SamplingWindow:
    """Mixin: ``window`` / ``set_window`` and the ring positions it covers, for an owner that reports
    ``_window_ring() -> (head, filled, capacity)`` (next write position, positions written, ring size)."""

    _window: int | None = None

    def _window_ring(self) -> tuple[int, int, int]:
        raise NotImplementedError

    @property
    def window(self) -> int | None:
        """The newest positions sampling draws from (None: all of them)."""
        return self._window

    def set_window(self, window: int | None) -> None:
        """Sample only the newest ``window`` positions from the next sample on (None: everything)."""
        self._window = check_window(window, self._window_ring()[2])

    @property
    def window_span(self) -> int:
        """How many positions sampling draws from now: the window, or fewer while fewer are written."""
        filled = self._window_ring()[1]
        return filled if self._window is None else min(self._window, filled)

    @property
    def window_restricts(self) -> bool:
        """Whether the window leaves out any written position now."""
        return self.window_span < self._window_ring()[1]

    def window_start(self) -> int:
        """The oldest ring position inside the window (the window runs from it in ring order)."""
        head, _, capacity = self._window_ring()
        return (head - self.window_span) % capacity

    def window_positions(self) -> np.ndarray:
        """The ring positions inside the window, oldest first."""
        return (self.window_start() + np.arange(self.window_span)) % self._window_ring()[2]

    def _in_window(self, offsets: np.ndarray) -> np.ndarray:
        """Uniform draws ``offsets`` in ``[0, window_span)`` as ring positions (unchanged without a
        restriction, so an unwindowed buffer samples exactly as before)."""
        if not self.window_restricts:
            return offsets
        head, _, capacity = self._window_ring()
        return (head - 1 - offsets) % capacity
