"""A vectorized sum tree: O(log n) batched priority updates and proportional sampling."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from marl_note.replay.storage import check_batch_size, check_capacity
from marl_note.types import NumpyState


class SumTree:
    """Binary tree of non-negative priorities whose inner nodes hold the sum of their children.

    Leaves live at ``tree[size + i]`` for item ``i`` (``size`` = capacity rounded up to a
    power of two; the padding leaves stay zero). Updates and searches work on whole
    batches at once, looping only over the ``log2(size)`` levels.

    Example:
        >>> tree = SumTree(4)
        >>> tree.add(np.array([1.0, 3.0, 0.0])).tolist()  # ring writes at a pointer
        [0, 1, 2]
        >>> tree.total, tree.find(np.array([0.5, 1.0, 3.99])).tolist()
        (4.0, [0, 1, 1])
        >>> tree.add(np.array([2.0, 5.0])).tolist()  # the second wraps around to item 0
        [3, 0]
        >>> tree.update(np.array([2]), np.array([0.5]))  # set priorities of chosen items
        >>> tree[np.array([0, 2, 3])].tolist(), tree.total
        ([5.0, 0.5, 2.0], 10.5)
    """

    def __init__(self, capacity: int):
        self.capacity = check_capacity(capacity)
        self._leaf0 = _first_leaf(self.capacity)  # first leaf's node index
        self._nodes = np.zeros(2 * self._leaf0, dtype=np.float64)
        self._ptr = 0

    @staticmethod
    def estimate_nbytes(capacity: int) -> int:
        """Bytes the tree of a ``capacity``-item buffer allocates (float64 nodes); allocates nothing."""
        return 2 * _first_leaf(check_capacity(capacity)) * np.dtype(np.float64).itemsize

    def __len__(self) -> int:
        return self.capacity

    @property
    def total(self) -> float:
        """Sum of all priorities."""
        return float(self._nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        """Read-only view of the ``capacity`` leaf priorities."""
        view = self._nodes[self._leaf0: self._leaf0 + self.capacity]
        view.flags.writeable = False
        return view

    def __getitem__(self, indices) -> np.ndarray:
        return self._nodes[self._leaf0 + self._check_indices(indices)]

    def _check_indices(self, indices) -> np.ndarray:
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu" or indices.ndim != 1:
            raise ValueError(f"indices must be a 1-D integer array, got {indices.dtype} {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise ValueError(f"indices must lie in [0, {self.capacity}), got range [{indices.min()}, {indices.max()}]")
        return indices.astype(np.int64)

    @staticmethod
    def check_priorities(priorities, n: int) -> np.ndarray:
        p = np.asarray(priorities, dtype=np.float64)
        if p.shape != (n,):
            raise ValueError(f"priorities have shape {p.shape}, expected ({n},)")
        if not np.all(np.isfinite(p)):
            raise ValueError("priorities must be finite (got NaN or inf)")
        if np.any(p < 0):
            raise ValueError(f"priorities must be non-negative, got minimum {p.min()}")
        return p

    def update(self, indices, priorities) -> None:
        """Set leaf priorities (a repeated index takes its last value) and refresh the sums above."""
        indices = self._check_indices(indices)
        p = self.check_priorities(priorities, indices.shape[0])
        if not indices.size:
            return
        # keep the last occurrence of each index so the result does not depend on numpy's
        # (unspecified) order for repeated fancy-index writes
        rev_unique, rev_pos = np.unique(indices[::-1], return_index=True)
        nodes = rev_unique + self._leaf0
        self._nodes[nodes] = p[::-1][rev_pos]
        while nodes[0] > 1:
            nodes = nodes >> 1  # still sorted, so duplicates are adjacent
            nodes = nodes[np.concatenate(([True], nodes[1:] != nodes[:-1]))]
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]

    def add(self, priorities) -> np.ndarray:
        """Write priorities at a ring pointer (like a ring buffer); return the item indices used."""
        p = np.atleast_1d(np.asarray(priorities, dtype=np.float64))
        dropped = max(0, p.shape[0] - self.capacity)
        idx = (self._ptr + dropped + np.arange(p.shape[0] - dropped)) % self.capacity
        self.update(idx, self.check_priorities(p, p.shape[0])[dropped:])
        self._ptr = (self._ptr + p.shape[0]) % self.capacity
        return idx

    def find(self, values) -> np.ndarray:
        """For each value in ``[0, total)``, the item whose cumulative-priority interval holds it.

        Never returns an item of zero priority while the total is positive.
        """
        values = np.array(values, dtype=np.float64, copy=True)
        if values.ndim != 1:
            raise ValueError(f"values must be 1-D, got shape {values.shape}")
        if values.size and (values.min() < 0 or values.max() > self.total):
            raise ValueError(f"values must lie in [0, total={self.total}]")
        node = np.ones(values.shape[0], dtype=np.int64)
        while node.size and node[0] < self._leaf0:
            left = self._nodes[2 * node]
            # go right when the value is past the left mass -- but never into an empty subtree,
            # which rounding at the upper edge could otherwise reach
            right = (values >= left) & (self._nodes[2 * node + 1] > 0)
            values -= np.where(right, left, 0.0)
            node = 2 * node + right
        return node - self._leaf0

    def prefix(self, positions) -> np.ndarray:
        """For each position ``i`` in ``[0, capacity]``, the sum of the priorities of items ``0 .. i - 1``
        (O(log n) each: the left siblings on the path from the root to leaf ``i``).

        Example:
            >>> tree = SumTree(5)
            >>> _ = tree.add(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
            >>> tree.prefix(np.array([0, 1, 3, 5])).tolist()
            [0.0, 1.0, 6.0, 15.0]
        """
        positions = np.asarray(positions, np.int64)
        if positions.ndim != 1 or (positions.size and (positions.min() < 0 or positions.max() > self.capacity)):
            raise ValueError(f"positions must be a 1-D array in [0, {self.capacity}]")
        node = self._leaf0 + np.minimum(positions, self._leaf0 - 1)
        out = np.where(positions >= self._leaf0, self._nodes[node], 0.0)  # past the last leaf: add it
        while node.size and node[0] > 1:
            out += np.where(node & 1, self._nodes[node - 1], 0.0)  # a right child: its left sibling comes first
            node = node >> 1
        return out

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` item indices drawn with replacement, P(i) = priority_i / total."""
        batch_size = check_batch_size(batch_size)
        if not self.total > 0:
            raise ValueError("cannot sample: every priority is zero")
        return self.find(rng.random(batch_size) * self.total)

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        return {"leaves": self.leaves.copy(), "ptr": np.int64(self._ptr)}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        if set(state) != {"leaves", "ptr"}:
            raise ValueError(f"SumTree state needs keys ['leaves', 'ptr'], got {sorted(state)}")
        leaves = self.check_priorities(state["leaves"], self.capacity)
        ptr = int(np.asarray(state["ptr"]))
        if not 0 <= ptr < self.capacity:
            raise ValueError(f"SumTree ptr {ptr} is outside [0, {self.capacity})")
        self._nodes[:] = 0.0
        self._nodes[self._leaf0: self._leaf0 + self.capacity] = leaves
        node = self._leaf0 // 2
        while node >= 1:
            nodes = np.arange(node, 2 * node)
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]
            node //= 2
        self._ptr = ptr


def _first_leaf(capacity: int) -> int:
    """Node index of the first leaf: ``capacity`` rounded up to a power of two."""
    return 1 << max(0, (capacity - 1).bit_length())
