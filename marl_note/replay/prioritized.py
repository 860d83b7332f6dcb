"""Proportional prioritized replay: ReplayBuffer storage + a SumTree sampler."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import ReplayBuffer
from marl_note.replay.compact import CompactReplayBuffer
from marl_note.replay.storage import check_batch_size
from marl_note.replay.sum_tree import SumTree
from marl_note.types import NumpyState, Transitions

_PREFIX = "per_"


_Raw = TypeVar("_Raw", np.ndarray, float)  # a batch of raw priorities, or one


def _check_unit(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value


class PrioritizedReplayBuffer:
    """Prioritized experience replay (proportional variant) over :class:`ReplayBuffer` storage.

    Item ``i`` is sampled with probability ``P(i) = p_i / sum_k p_k`` where
    ``p_i = (priority_i + eps) ** alpha``. New items get the largest priority seen so far
    (``initial_TD`` to start with). Samples carry importance weights
    ``(N * P(i)) ** -beta`` divided by the largest weight in the batch; ``beta`` anneals
    linearly from ``beta`` to ``beta_final`` over ``beta_annealing_steps`` sample calls.
    :meth:`update_priorities` takes TD errors, or for PPO-style learners mixes
    ``lambda_ * |td| + (1 - lambda_) * |ratio - 1|``.

    With ``optimize_memory=True`` the storage is a :class:`~marl_note.replay.compact.CompactReplayBuffer`
    (each observation stored once; indices are its slots, and a slot holding only a frame, or whose
    transition was overwritten, has priority 0).

    ``set_window(n)`` samples only the newest ``n`` items (slots with ``optimize_memory``), exactly in
    proportion to priority within them: the window is one or two ranges of the sum tree's leaves in ring
    order, whose mass comes from two prefix sums, so a sample stays O(log n). Items outside keep their
    priorities; :meth:`priorities` is 0 for them and :meth:`effective_sample_size` counts the window.

    Like :class:`ReplayBuffer`, construction refuses (before allocating) a buffer whose
    :attr:`nbytes_estimate`, sum tree included, exceeds the machine's available memory.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> buf = PrioritizedReplayBuffer(8, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0)
        >>> _ = buf.add(Transitions(obs=np.zeros((4, 2)), act=np.zeros(4, int), rew=np.zeros(4),
        ...                         next_obs=np.zeros((4, 2)), terminated=np.zeros(4, bool),
        ...                         truncated=np.zeros(4, bool)))
        >>> round(buf.effective_sample_size(), 6)  # all at the initial max priority
        4.0
        >>> batch = buf.sample(3)
        >>> batch.weights.tolist(), batch.indices.shape
        ([1.0, 1.0, 1.0], (3,))
        >>> buf.update_priorities(np.array([0, 1]), td_errors=np.array([0.0, -9.0]))
        >>> buf.effective_sample_size() < 4.0
        True
    """

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 alpha: float = 0.6, beta: float = 0.4, beta_final: float = 1.0,
                 beta_annealing_steps: int = 100_000, initial_TD: float = 1.0, eps: float = 1e-6,
                 seed: int | None = None, optimize_memory: bool = False):
        if not float(alpha) >= 0.0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = float(alpha)
        self.beta_initial = _check_unit("beta", beta)
        self.beta_final = _check_unit("beta_final", beta_final)
        if isinstance(beta_annealing_steps, bool) or int(beta_annealing_steps) != beta_annealing_steps \
                or beta_annealing_steps < 0:
            raise ValueError(f"beta_annealing_steps must be a non-negative integer, got {beta_annealing_steps}")
        self.beta_annealing_steps = int(beta_annealing_steps)
        if not (np.isfinite(initial_TD) and initial_TD > 0):
            raise ValueError(f"initial_TD must be a positive finite number, got {initial_TD}")
        if not (np.isfinite(eps) and eps >= 0):
            raise ValueError(f"eps must be a non-negative finite number, got {eps}")
        self.eps = float(eps)
        kind = CompactReplayBuffer if optimize_memory else ReplayBuffer
        self.optimize_memory = bool(optimize_memory)
        self._buffer: ReplayBuffer | CompactReplayBuffer = kind(
            capacity, observation_space, action_space, seed=seed,
            extra_bytes=SumTree.estimate_nbytes(capacity))  # memory checked with the tree
        self._tree = SumTree(capacity)
        self._max_priority = float(initial_TD)  # in |td| units, before eps and alpha
        self._sample_calls = 0

    @staticmethod
    def estimate_nbytes(capacity: int, observation_space: gym.Space, action_space: gym.Space,
                        optimize_memory: bool = False) -> int:
        """Bytes a buffer of ``capacity`` transitions would allocate, sum tree included; allocates nothing."""
        kind = CompactReplayBuffer if optimize_memory else ReplayBuffer
        return kind.estimate_nbytes(capacity, observation_space, action_space) + SumTree.estimate_nbytes(capacity)

    # -- delegated storage -----------------------------------------------------------------------
    @property
    def nbytes_estimate(self) -> int:
        """Bytes of the storage at full size plus the sum tree (checked against the available memory)."""
        return self._buffer.nbytes_estimate

    @property
    def capacity(self) -> int:
        return self._buffer.capacity

    @property
    def observation_space(self) -> gym.Space:
        return self._buffer.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self._buffer.action_space

    def __len__(self) -> int:
        return len(self._buffer)

    def __repr__(self) -> str:
        return (f"PrioritizedReplayBuffer(len={len(self)}, capacity={self.capacity}, alpha={self.alpha}, "
                f"beta={self.beta:.3f})")

    def get(self, indices) -> Transitions:
        return self._buffer.get(indices)

    @property
    def window(self) -> int | None:
        """The newest items (slots) sampling draws from; None: all of them."""
        return self._buffer.window

    def set_window(self, window: int | None) -> None:
        """Sample only the newest ``window`` items from the next sample on (None: everything)."""
        self._buffer.set_window(window)

    @property
    def window_span(self) -> int:
        """How many positions (items; slots with ``optimize_memory``) sampling draws from now."""
        return self._buffer.window_span

    def window_count(self) -> int:
        """Stored items inside the window (all of them without one)."""
        positions = self._buffer.window_positions()
        if isinstance(self._buffer, CompactReplayBuffer):
            return int(np.isin(positions, self._buffer.stored_indices()).sum())
        return int(positions.size)

    def column(self, name: str) -> np.ndarray:
        return self._buffer.column(name)

    # -- priorities ------------------------------------------------------------------------------
    @property
    def beta(self) -> float:
        """The beta the next :meth:`sample` call will use."""
        if self.beta_annealing_steps == 0:
            return self.beta_final
        frac = min(1.0, self._sample_calls / self.beta_annealing_steps)
        return self.beta_initial + frac * (self.beta_final - self.beta_initial)

    @property
    def max_priority(self) -> float:
        return self._max_priority

    def _to_tree(self, raw: _Raw) -> _Raw:
        return (raw + self.eps) ** self.alpha

    def priorities(self) -> np.ndarray:
        """Sampling probabilities P(i) of the stored items (storage order)."""
        p = np.asarray(self._tree.leaves).copy()
        if self.window is not None:
            inside = np.zeros(self.capacity, bool)
            inside[self._buffer.window_positions()] = True
            p[~inside] = 0.0
        p = p[self._stored()]
        return p / p.sum()

    def _stored(self) -> np.ndarray:
        if isinstance(self._buffer, CompactReplayBuffer):
            return self._buffer.stored_indices()
        return np.arange(len(self))

    def effective_sample_size(self) -> float:
        """``1 / sum_i P(i)^2``: equals ``len(self)`` for uniform priorities (:meth:`window_count` with a
        window), 1 when one item dominates."""
        if len(self) == 0:
            raise ValueError("effective sample size of an empty buffer is undefined")
        return float(1.0 / np.sum(self.priorities() ** 2))

    def add(self, transitions: Transitions) -> np.ndarray:
        """Store a batch at the current max priority; return the storage indices written."""
        idx = self._buffer.add(transitions)
        live = idx
        if isinstance(self._buffer, CompactReplayBuffer):
            if self._buffer.last_evicted.size:
                self._tree.update(self._buffer.last_evicted, np.zeros(self._buffer.last_evicted.size))
            # an add longer than the buffer evicts its own first rows: their slots may now hold only a frame
            live = idx[self._buffer.holds_transition(idx)]
        self._tree.update(live, np.full(live.shape[0], self._to_tree(self._max_priority)))
        return idx

    def sample(self, batch_size: int) -> Transitions:
        """Draw proportionally to priority; the result carries ``weights`` and ``indices``."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty buffer")
        if self._buffer.window_restricts:
            idx, mass = self._sample_window(batch_size)
        else:
            idx, mass = self._tree.sample(batch_size, self._buffer.rng), self._tree.total
        probs = self._tree[idx] / mass
        beta = self.beta
        w = (len(self) * probs) ** (-beta)  # the item count cancels in the normalised weights
        self._sample_calls += 1
        batch = self._buffer.get(idx)
        batch.weights = (w / w.max()).astype(np.float32)
        return batch

    def _sample_window(self, batch_size: int) -> tuple[np.ndarray, float]:
        """Draws in proportion to priority from the window's leaves ``start .. start + span - 1`` (ring
        order): a uniform value in ``[prefix(start), prefix(start) + mass)``, wrapped at the total."""
        buf, tree, cap, total = self._buffer, self._tree, self.capacity, self._tree.total
        start, span = buf.window_start(), buf.window_span
        end = start + span
        lo, hi = tree.prefix(np.array([start, min(end, cap)]))
        mass = hi - lo + (tree.prefix(np.array([end - cap]))[0] if end > cap else 0.0)
        if not mass > 0:
            raise ValueError(f"every item in the sampling window (newest {buf.window}) has priority 0: widen it")
        u = lo + buf.rng.random(check_batch_size(batch_size)) * mass
        idx = tree.find(np.minimum(np.where(u >= total, u - total, u), total))
        outside = (idx - start) % cap >= span  # only where rounding at the window's edges crossed it
        if outside.any():
            positions = buf.window_positions()
            p = tree[positions]
            idx[outside] = buf.rng.choice(positions, size=int(outside.sum()), p=p / p.sum())
        return idx, mass

    def update_priorities(self, indices, td_errors, ratios=None, lambda_: float | None = None) -> None:
        """Set the priorities of sampled items from their TD errors (validated first; nothing changes on error).

        With ``ratios`` (new/old policy probability ratios) and ``lambda_`` in [0, 1],
        the priority is ``lambda_ * |td| + (1 - lambda_) * |ratio - 1|``.
        """
        indices = self._check_indices(indices)
        td = np.asarray(td_errors, dtype=np.float64)
        if td.shape != indices.shape:
            raise ValueError(f"td_errors have shape {td.shape}, expected {indices.shape} like indices")
        if not np.all(np.isfinite(td)):
            raise ValueError("td_errors must be finite (got NaN or inf)")
        raw = np.abs(td)
        if (ratios is None) != (lambda_ is None):
            raise ValueError("the PPO priority needs both ratios and lambda_ (or neither)")
        if ratios is not None and lambda_ is not None:  # (both or neither, checked above)
            lam = _check_unit("lambda_", lambda_)
            r = np.asarray(ratios, dtype=np.float64)
            if r.shape != indices.shape:
                raise ValueError(f"ratios have shape {r.shape}, expected {indices.shape} like indices")
            if not np.all(np.isfinite(r)) or np.any(r < 0):
                raise ValueError("ratios must be finite and non-negative")
            raw = lam * raw + (1.0 - lam) * np.abs(r - 1.0)
        self.set_priorities(indices, raw)

    def _check_indices(self, indices) -> np.ndarray:
        if isinstance(self._buffer, CompactReplayBuffer):
            return self._buffer.check_indices(indices)
        indices = np.asarray(indices)
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            raise ValueError(f"indices must be a 1-D integer array, got {indices.dtype} {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise ValueError(f"indices must lie in [0, {len(self)}) (stored items), got range "
                             f"[{indices.min()}, {indices.max()}]")
        return indices

    def set_alpha(self, alpha: float) -> None:
        """Change the prioritization exponent of every stored item (from ``alpha``'s tree values back to
        raw priorities and on); ``alpha = 0`` is uniform, and from 0 the stored raw priorities are lost,
        so a buffer at 0 refuses a positive alpha while it holds items."""
        alpha = float(alpha)
        if not (np.isfinite(alpha) and alpha >= 0.0):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
        n = len(self)
        if n and self.alpha == 0.0 and alpha != 0.0:
            raise ValueError("this buffer's alpha is 0 (uniform): its items' priorities are not kept, so alpha "
                             "cannot rise from 0 while it holds items")
        if n and alpha != self.alpha:
            base = np.asarray(self._tree.leaves[:n], np.float64) ** (1.0 / self.alpha)  # raw + eps
            self._tree.update(np.arange(n), base ** alpha)
        self.alpha = alpha

    def set_beta(self, beta: float) -> None:
        """Fix the importance-weight exponent at ``beta`` from the next sample on (any annealing ends)."""
        self.beta_initial = self.beta_final = _check_unit("beta", beta)
        self.beta_annealing_steps = 0

    def set_priorities(self, indices, priorities) -> None:
        """Set raw priorities (``|td|`` units, before ``eps`` and ``alpha``) directly."""
        indices = self._check_indices(indices)
        raw = SumTree.check_priorities(priorities, indices.shape[0])
        tree_values = self._to_tree(raw)
        self._tree.update(indices, tree_values)  # validates indices before writing
        if raw.size:
            self._max_priority = max(self._max_priority, float(raw.max()))

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        """Storage state plus the tree's priorities, the max priority, alpha and the beta schedule position."""
        state = self._buffer.state_dict()
        state[_PREFIX + "tree_leaves"] = np.asarray(self._tree.leaves).copy()
        state[_PREFIX + "tree_ptr"] = np.int64(self._tree.state_dict()["ptr"])
        state[_PREFIX + "max_priority"] = np.float64(self._max_priority)
        state[_PREFIX + "alpha"] = np.float64(self.alpha)
        state[_PREFIX + "sample_calls"] = np.int64(self._sample_calls)
        return state

    def check_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Raise ValueError naming the problem if ``load_state_dict(state)`` would refuse ``state``; changes nothing."""
        rest = self._checked(state)[0]
        self._buffer.check_state_dict(rest)

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; on a ValueError nothing has changed."""
        state, tree, max_p, calls, alpha = self._checked(state)
        self._buffer.load_state_dict(state)  # validates storage; raises before changing it
        self.alpha = alpha
        self._tree = tree
        self._max_priority = max_p
        self._sample_calls = calls

    def _checked(self, state: Mapping[str, np.ndarray]):
        state = dict(state)
        keys = ["tree_leaves", "tree_ptr", "max_priority", "alpha", "sample_calls"]
        missing = [_PREFIX + k for k in keys if _PREFIX + k not in state]
        if missing:
            raise ValueError(f"state_dict is missing keys {missing}")
        ours = {k: state.pop(_PREFIX + k) for k in keys}
        for k, v in ours.items():
            arr = np.asarray(v)
            want = "a 1-D array of numbers" if k == "tree_leaves" else "one number"
            if arr.dtype.kind not in "iuf" or arr.ndim != (1 if k == "tree_leaves" else 0):
                raise ValueError(f"state_dict[{_PREFIX + k!r}] must be {want}, got {arr.dtype} {arr.shape}")
        alpha = float(ours["alpha"])  # the tree's values were raised to it; the buffer adopts it
        if not (np.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"state_dict alpha must be finite and >= 0, got {alpha}")
        max_p = float(ours["max_priority"])
        if not (np.isfinite(max_p) and max_p >= 0):
            raise ValueError(f"state_dict max_priority must be finite and >= 0, got {max_p}")
        calls = int(ours["sample_calls"])
        if calls < 0:
            raise ValueError(f"state_dict sample_calls must be >= 0, got {calls}")
        tree = SumTree(self.capacity)
        try:
            tree.load_state_dict({"leaves": ours["tree_leaves"], "ptr": ours["tree_ptr"]})
        except ValueError as err:
            raise ValueError(f"state_dict {_PREFIX}tree_*: {err}") from None
        if isinstance(self._buffer, CompactReplayBuffer):
            nxt = np.asarray(state.get("next", np.zeros(0)))
            stored = np.zeros(self.capacity, bool)
            stored[: nxt.size] = nxt >= 0
        else:
            stored = np.arange(self.capacity) < int(np.asarray(state.get("size", 0)))
        if np.any(np.asarray(tree.leaves)[~stored] != 0):
            raise ValueError("state_dict tree has non-zero priorities beyond the stored items")
        return state, tree, max_p, calls, alpha
