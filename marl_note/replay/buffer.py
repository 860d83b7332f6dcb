"""Uniform experience replay over preallocated numpy ring arrays."""
from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from marl_note.replay.memory import storage_nbytes
from marl_note.replay.storage import (
    RingStorage,
    Spec,
    as_column,
    check_batch_size,
    check_capacity,
    check_rng_state_array,
    rng_state_array,
    set_rng_state,
)
from marl_note.replay.window import SamplingWindow
from marl_note.types import NumpyState, Transitions, space_shape_dtype

REQUIRED_FIELDS = ("obs", "act", "rew", "next_obs", "terminated", "truncated")
OPTIONAL_FIELDS = ("mask", "next_mask", "discount")


def transition_specs(observation_space: gym.Space, action_space: gym.Space) -> dict[str, Spec]:
    """Item shape and dtype of each always-present Transitions field."""
    obs_shape, obs_dtype = space_shape_dtype(observation_space)
    act_shape, act_dtype = space_shape_dtype(action_space)
    return {"obs": (obs_shape, obs_dtype), "act": (act_shape, act_dtype), "rew": ((), np.dtype(np.float32)),
            "next_obs": (obs_shape, obs_dtype), "terminated": ((), np.dtype(bool)),
            "truncated": ((), np.dtype(bool))}


def transition_columns(t: Transitions, specs: Mapping[str, Spec], action_space: gym.Space,
                       known: Mapping | None = None, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Validate ``t`` and return its non-None fields as cast numpy columns.

    ``specs`` gives the required fields' item shapes/dtypes; ``known`` gives item
    shapes already fixed for optional fields (e.g. a stored mask width). ``extra``
    names further optional 1-D fields to keep (``stream``). Raises ValueError
    naming the problem; never mutates anything.
    """
    if not isinstance(t, Transitions):
        raise ValueError(f"expected a Transitions batch, got {type(t).__name__}")
    known = known or {}
    rew = np.asarray(t.rew)
    if rew.ndim != 1:
        raise ValueError(f"rew must be 1-D (one reward per transition), got shape {rew.shape}")
    n = rew.shape[0]
    cols = {name: as_column(name, getattr(t, name), *specs[name], n) for name in REQUIRED_FIELDS}
    for name in ("mask", "next_mask"):
        value = getattr(t, name)
        if value is None:
            continue
        arr = np.asarray(value)
        if name in known:
            shape = known[name][0]
        elif arr.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, num_actions), got {arr.shape}")
        else:
            shape = arr.shape[1:]
            if isinstance(action_space, gym.spaces.Discrete) and shape != (int(action_space.n),):
                raise ValueError(f"{name} has {shape[0]} entries per item but the action space has "
                                 f"{int(action_space.n)} actions")
        cols[name] = as_column(name, arr, shape, np.dtype(bool), n)
    if "mask" in cols and "next_mask" in cols and cols["mask"].shape[1:] != cols["next_mask"].shape[1:]:
        raise ValueError(f"mask {cols['mask'].shape} and next_mask {cols['next_mask'].shape} differ in width")
    if t.discount is not None:
        cols["discount"] = as_column("discount", t.discount, (), np.dtype(np.float32), n)
    for name in extra:
        if getattr(t, name) is not None:
            cols[name] = as_column(name, getattr(t, name), (), np.dtype(np.int64), n)
    return cols


class ReplayBuffer(SamplingWindow):
    """Uniform replay: a ring of the last ``capacity`` transitions, sampled with replacement.

    ``set_window(n)`` samples only the newest ``n`` of them (:mod:`marl_note.replay.window`).

    ``mask``/``next_mask`` (bool, shape ``[capacity, n]``) and ``discount`` (float32)
    are stored when the first batch carries them; once stored, every later batch
    must carry them too (and a field cannot first appear in a non-empty buffer).

    Storage is preallocated at full size. :attr:`nbytes_estimate` (or, before building one,
    :meth:`estimate_nbytes`) gives its bytes; construction raises
    :class:`~marl_note.replay.memory.ReplayMemoryError` (a MemoryError and a ValueError) before
    allocating when that exceeds the machine's available memory, and warns above half of it.
    ``extra_bytes`` counts memory a wrapper keeps beside the storage (a prioritized buffer's tree).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> buf = ReplayBuffer(100, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
        >>> buf.add(Transitions(obs=np.zeros((4, 3)), act=np.array([0, 1, 1, 0]), rew=np.ones(4),
        ...                     next_obs=np.ones((4, 3)), terminated=np.zeros(4, bool),
        ...                     truncated=np.zeros(4, bool))).tolist()
        [0, 1, 2, 3]
        >>> batch = buf.sample(8)
        >>> len(buf), batch.obs.shape, batch.obs.dtype, batch.indices.shape
        (4, (8, 3), dtype('float32'), (8,))
    """

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 seed: int | None = None, *, extra_bytes: int = 0):
        self.observation_space = observation_space
        self.action_space = action_space
        self._specs = transition_specs(observation_space, action_space)
        self._storage = RingStorage(capacity, self._specs, extra_bytes=extra_bytes)
        self._rng = np.random.default_rng(seed)

    @staticmethod
    def estimate_nbytes(capacity: int, observation_space: gym.Space, action_space: gym.Space) -> int:
        """Bytes a buffer of ``capacity`` transitions over these spaces would allocate (optional mask and
        discount columns, stored only when batches carry them, not counted); allocates nothing."""
        return storage_nbytes(check_capacity(capacity), transition_specs(observation_space, action_space))

    @property
    def nbytes_estimate(self) -> int:
        """Bytes this buffer's storage takes at full size (every stored column, plus ``extra_bytes``)."""
        return self._storage.nbytes_estimate

    @property
    def capacity(self) -> int:
        return self._storage.capacity

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    def __len__(self) -> int:
        return len(self._storage)

    def _window_ring(self) -> tuple[int, int, int]:
        return self._storage.ptr, len(self._storage), self._storage.capacity

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)}, capacity={self.capacity})"

    # -- writing ---------------------------------------------------------------------------------
    def validate(self, transitions: Transitions) -> dict[str, np.ndarray]:
        """Check a batch against this buffer and return its columns; raises ValueError, writes nothing."""
        known = {k: self._storage.spec(k) for k in OPTIONAL_FIELDS if self._storage.has(k)}
        cols = transition_columns(transitions, self._specs, self.action_space, known)
        present = {k for k in OPTIONAL_FIELDS if k in cols}
        stored = set(known)
        if present != stored and len(self._storage) > 0:
            if stored - present:
                raise ValueError(f"this buffer stores {sorted(stored - present)} but the batch has none")
            raise ValueError(f"the batch carries {sorted(present - stored)} but this buffer already holds "
                             f"{len(self)} items without them")
        return cols

    def add(self, transitions: Transitions) -> np.ndarray:
        """Append a batch (it may wrap around the ring); return the storage indices written.

        A batch longer than the capacity keeps its last ``capacity`` items.
        """
        cols = self.validate(transitions)
        self._sync_optional(cols)
        return self._storage.write(cols)

    def _sync_optional(self, cols: Mapping[str, np.ndarray]) -> None:
        if len(self._storage) > 0:
            return
        for name in OPTIONAL_FIELDS:
            if self._storage.has(name) and name not in cols:
                self._storage = _without(self._storage, name)
            elif name in cols and not self._storage.has(name):
                self._storage.allocate(name, cols[name].shape[1:], cols[name].dtype)

    # -- reading ---------------------------------------------------------------------------------
    def get(self, indices) -> Transitions:
        """The stored transitions at ``indices`` (copies), with ``indices`` set."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise ValueError(f"indices must lie in [0, {len(self)}), got range "
                             f"[{indices.min()}, {indices.max()}]")
        cols = self._storage.read(indices)
        return Transitions(**cols, indices=indices)

    def sample_indices(self, batch_size: int) -> np.ndarray:
        batch_size = check_batch_size(batch_size)
        filled = len(self._storage)
        if filled == 0:
            raise ValueError("cannot sample from an empty buffer")
        if self._window is None:  # every written position: the same draws as through the window's methods
            return self._rng.integers(0, filled, size=batch_size, dtype=np.int64)
        return self._in_window(self._rng.integers(0, self.window_span, size=batch_size, dtype=np.int64))

    def sample(self, batch_size: int) -> Transitions:
        """``batch_size`` transitions drawn uniformly with replacement (from the window, when one is set)."""
        indices = self.sample_indices(batch_size)  # valid by construction: not checked again as get() checks
        return Transitions(**self._storage.read(indices), indices=indices)

    def column(self, name: str) -> np.ndarray:
        """Read-only view of one stored field over the valid items (storage order)."""
        if not self._storage.has(name):
            raise KeyError(f"this buffer does not store {name!r}; it stores {list(self._storage.names)}")
        return self._storage.column(name)

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        """Numpy arrays and scalars only (``np.savez``-able, no pickle)."""
        state = self._storage.state_dict()
        state["rng_state"] = rng_state_array(self._rng)
        return state

    def check_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Raise ValueError naming the problem if ``load_state_dict(state)`` would refuse ``state``; changes nothing."""
        self._checked(state)

    def _checked(self, state: Mapping[str, np.ndarray]):
        state = dict(state)
        if "rng_state" not in state:
            raise ValueError("state_dict is missing keys ['rng_state']")
        rng_state = check_rng_state_array(state.pop("rng_state"))
        optional = {"mask": (None, bool), "next_mask": (None, bool), "discount": ((), np.float32)}
        self._storage.check_state_dict(state, optional)
        for name in ("mask", "next_mask"):
            if name in state and np.asarray(state[name]).ndim != 2:
                raise ValueError(f"state_dict[{name!r}] must be 2-D, got shape {np.asarray(state[name]).shape}")
        return state, rng_state, optional

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; raises ValueError naming the problem and changes nothing then."""
        state, rng_state, optional = self._checked(state)
        self._storage.load_state_dict(state, optional)
        set_rng_state(self._rng, rng_state)


def _without(storage: RingStorage, name: str) -> RingStorage:
    """A copy of an empty storage minus one column."""
    specs = {n: storage.spec(n) for n in storage.names if n != name}
    return RingStorage(storage.capacity, specs, extra_bytes=storage.extra_bytes)
