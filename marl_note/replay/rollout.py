"""On-policy storage (a growing list of chunks in arrival order) and generalized advantage estimation."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import transition_columns, transition_specs
from marl_note.types import Transitions


class RolloutBuffer:
    """Transitions of the current policy, kept in arrival order until :meth:`clear`.

    Within each ``stream`` id, arrival order must be time order (what :func:`compute_gae`
    relies on); streams may interleave freely. Per-step extras an on-policy learner needs
    later (old log-probs, value estimates, ...) can ride along as keyword arrays.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> buf = RolloutBuffer(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3))
        >>> chunk = Transitions(obs=np.zeros((2, 2)), act=np.array([0, 2]), rew=np.array([1.0, 0.0]),
        ...                     next_obs=np.zeros((2, 2)), terminated=np.array([False, True]),
        ...                     truncated=np.zeros(2, bool), stream=np.array([0, 1]))
        >>> buf.add(chunk, log_prob=np.array([-1.1, -0.7]))
        >>> buf.add(chunk, log_prob=np.array([-1.0, -0.9]))
        >>> len(buf), buf.get().stream.tolist(), buf.extras()["log_prob"].shape
        (4, [0, 1, 0, 1], (4,))
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space = observation_space
        self.action_space = action_space
        self._specs = transition_specs(observation_space, action_space)
        self._chunks: list[Transitions] = []
        self._extras: list[dict[str, np.ndarray]] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"RolloutBuffer(len={len(self)}, chunks={len(self._chunks)})"

    def add(self, transitions: Transitions, **extras) -> None:
        """Append a chunk (plus optional per-item extra arrays of the same length).

        Every chunk must carry the same optional fields (mask, next_mask, discount,
        stream) and the same extras as the first one; otherwise ValueError.
        """
        known = {}
        if self._chunks:
            first = self._chunks[0]
            known = {k: (getattr(first, k).shape[1:], bool) for k in ("mask", "next_mask")
                     if getattr(first, k) is not None}
        cols = transition_columns(transitions, self._specs, self.action_space, known, extra=("stream",))
        n = len(cols["rew"])
        ext = {}
        for name, value in extras.items():
            arr = np.asarray(value)
            if arr.ndim == 0 or arr.shape[0] != n:
                raise ValueError(f"extra {name!r} has shape {arr.shape}, expected a leading axis of {n}")
            ext[name] = arr
        if self._chunks:
            first = self._chunks[0]
            have = {k for k in ("mask", "next_mask", "discount", "stream") if getattr(first, k) is not None}
            new = {k for k in ("mask", "next_mask", "discount", "stream") if k in cols}
            if have != new:
                raise ValueError(f"this rollout's chunks carry optional fields {sorted(have)}, "
                                 f"the new chunk carries {sorted(new)}")
            if set(self._extras[0]) != set(ext):
                raise ValueError(f"this rollout's chunks carry extras {sorted(self._extras[0])}, "
                                 f"the new chunk carries {sorted(ext)}")
            for name, arr in ext.items():
                if arr.shape[1:] != self._extras[0][name].shape[1:]:
                    raise ValueError(f"extra {name!r} has item shape {arr.shape[1:]}, "
                                     f"earlier chunks have {self._extras[0][name].shape[1:]}")
        self._chunks.append(Transitions(**{k: np.array(v, copy=True) for k, v in cols.items()}))
        self._extras.append({k: v.copy() for k, v in ext.items()})
        self._len += n

    def get(self) -> Transitions:
        """All stored transitions concatenated in arrival order."""
        if not self._chunks:
            raise ValueError("the rollout buffer is empty")
        return Transitions.concatenate(self._chunks)

    def extras(self) -> dict[str, np.ndarray]:
        """The extras given to :meth:`add`, concatenated in the same order as :meth:`get`."""
        if not self._chunks:
            return {}
        return {name: np.concatenate([e[name] for e in self._extras]) for name in self._extras[0]}

    def clear(self) -> None:
        self._chunks.clear()
        self._extras.clear()
        self._len = 0


def compute_gae(rew, values, next_values, terminated, truncated, stream=None, gamma: float = 0.99,
                lam: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimates and returns, per stream, for arrays in arrival order.

    ``delta_t = r_t + gamma * next_values_t * (1 - terminated_t) - values_t`` and, going
    backwards through each stream, ``A_t = delta_t + gamma * lam * (1 - done_t) * A_next``
    where ``A_next`` is the advantage of the same stream's next transition
    (``done = terminated or truncated``; a stream's last transition in the batch has
    ``A_t = delta_t``). Truncation therefore bootstraps from ``next_values`` while
    termination does not. Returns ``(advantages, advantages + values)`` as float32.
    ``stream=None`` treats everything as one stream.

    Example:
        >>> adv, ret = compute_gae(rew=[1.0, 1.0], values=[0.0, 0.0], next_values=[0.0, 10.0],
        ...                        terminated=[False, False], truncated=[False, True], gamma=0.5, lam=1.0)
        >>> adv.tolist(), ret.tolist()
        ([4.0, 6.0], [4.0, 6.0])
    """
    if not (0.0 <= gamma <= 1.0) or not (0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    rew = np.asarray(rew, dtype=np.float64)
    if rew.ndim != 1:
        raise ValueError(f"rew must be 1-D, got shape {rew.shape}")
    n = rew.shape[0]
    arrays = {"values": values, "next_values": next_values, "terminated": terminated, "truncated": truncated}
    if stream is not None:
        arrays["stream"] = stream
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in arrays.items():
        if v.shape != (n,):
            raise ValueError(f"{k} has shape {v.shape}, expected ({n},) like rew")
    values = arrays["values"].astype(np.float64)
    next_values = arrays["next_values"].astype(np.float64)
    terminated = arrays["terminated"].astype(bool)
    done = terminated | arrays["truncated"].astype(bool)
    delta = rew + gamma * next_values * (~terminated) - values

    # Lay the streams out as rows of a padded [num_streams, max_len] matrix, then sweep the
    # columns backwards: one vectorized step per time index instead of one per transition.
    stream_ids = np.zeros(n, np.int64) if stream is None else arrays["stream"]
    _, row = np.unique(stream_ids, return_inverse=True)
    row = row.reshape(-1)
    order = np.argsort(row, kind="stable")
    counts = np.bincount(row)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    col = np.empty(n, np.int64)
    col[order] = np.arange(n) - np.repeat(starts, counts)
    width = int(counts.max()) if n else 0
    d = np.zeros((len(counts), width + 1))
    keep = np.zeros((len(counts), width + 1))  # gamma * lam * (1 - done), zero in padding
    d[row, col] = delta
    keep[row, col] = gamma * lam * (~done)
    adv = np.zeros_like(d)
    for j in range(width - 1, -1, -1):
        adv[:, j] = d[:, j] + keep[:, j] * adv[:, j + 1]
    advantages = adv[row, col]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)
