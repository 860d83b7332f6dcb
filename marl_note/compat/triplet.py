"""Triplet replay (the original library's ``TRL``): whole episodes in a ring, ordered step triplets.

An agent that learns from the order of states within an episode (temporal-distance or
quasimetric objectives, triangle inequalities ``d(s_i, s_j) <= d(s_i, s_k) + d(s_k, s_j)``)
trains on three steps ``i < k < j`` of one episode instead of on single transitions.
:class:`TripletReplayBuffer` stores whole episodes and samples such triplets.
"""
from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from marl_note.replay.buffer import transition_specs
from marl_note.replay.episodes import CheckedState, EpisodeRing, EpisodeRingBuffer
from marl_note.replay.storage import as_column, check_batch_size
from marl_note.types import Transitions

__all__ = ["TripletReplayBuffer", "distinct_sorted_triplets"]

_DATA = ("obs", "act", "rew", "next_obs", "terminated", "truncated")


def distinct_sorted_triplets(lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each length ``L >= 3``, three distinct positions ``i < k < j`` in ``[0, L)``, uniform over such sets.

    Example:
        >>> t = distinct_sorted_triplets(np.array([3, 10, 10]), np.random.default_rng(0))
        >>> t[0].tolist(), bool(((t[:, 0] < t[:, 1]) & (t[:, 1] < t[:, 2]) & (t[:, 2] < 10)).all())
        ([0, 1, 2], True)
    """
    lengths = np.asarray(lengths, np.int64)
    if np.any(lengths < 3):
        raise ValueError(f"a triplet needs at least 3 steps, got lengths {lengths[lengths < 3][:4].tolist()}")
    u = rng.random((len(lengths), 3))
    a = np.floor(u[:, 0] * lengths).astype(np.int64)
    b = np.floor(u[:, 1] * (lengths - 1)).astype(np.int64)
    b += b >= a  # b: uniform over [0, L) without a
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    c = np.floor(u[:, 2] * (lengths - 2)).astype(np.int64)
    c += c >= lo
    c += c >= hi  # c: uniform over [0, L) without a and b
    return np.sort(np.stack([a, b, c], axis=1), axis=1)


class TripletReplayBuffer(EpisodeRingBuffer):
    """Whole episodes in a ring of ``capacity`` transitions; ``sample`` draws ordered step triplets.

    ``add`` takes :class:`~marl_note.types.Transitions` (``stream`` separates interleaved envs or
    seats); a stream's transitions are held until its episode ends (``terminated`` or
    ``truncated``) and then stored as one contiguous block. ``sample(batch_size)`` draws, per
    item, one stored episode uniformly (among those with at least 3 stored steps) and three
    distinct steps ``i < k < j`` of it uniformly, and returns a Transitions whose fields have a
    pair axis after the batch axis: the jump from ``i`` to ``k`` and the jump from ``k`` to ``j``::

        obs        = (obs[i], obs[k])            act        = (act[i], act[k])
        next_obs   = (obs[k], next_obs[j])       rew        = (rew[i], rew[k])
        terminated = (terminated[i], terminated[k])   truncated likewise

    so the three states are ``obs[i]``, ``obs[k]`` and ``next_obs[j]`` (the state after step ``j``).
    ``indices`` is ``[B, 3]``: the storage rows of ``i``, ``k`` and ``j``. Legal-action masks are
    not stored. When the ring overwrites the start of an episode its remaining steps stay usable.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> buf = TripletReplayBuffer(100, gym.spaces.Box(-9, 9, (1,)), gym.spaces.Discrete(2), seed=0)
        >>> t = np.arange(5.0)
        >>> buf.add(Transitions(obs=t[:, None], act=np.zeros(5, int), rew=t, next_obs=t[:, None] + 1,
        ...                     terminated=t == 4, truncated=np.zeros(5, bool)))
        >>> batch = buf.sample(8)
        >>> batch.obs.shape, batch.rew.shape, batch.indices.shape
        ((8, 2, 1), (8, 2), (8, 3))
        >>> i, k, after_j = batch.obs[:, 0, 0], batch.obs[:, 1, 0], batch.next_obs[:, 1, 0]
        >>> bool((i < k).all() and (k < after_j).all())
        True
    """

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 seed: int | None = None):
        self.observation_space = observation_space
        self.action_space = action_space
        self._specs = transition_specs(observation_space, action_space)
        self._ring = EpisodeRing(capacity, self._specs, seed)  # ep_first, ep_len per item
        self._episodes = np.zeros((0, 2), np.int64)  # (global first item, length) of every stored episode

    def __repr__(self) -> str:
        return f"TripletReplayBuffer(len={len(self)}, pending={self.num_pending}, capacity={self.capacity})"

    # -- writing ---------------------------------------------------------------------------------
    def add(self, transitions: Transitions) -> None:
        """Queue transitions per stream; store each stream's episode when it ends."""
        if not isinstance(transitions, Transitions):
            raise ValueError(f"expected a Transitions batch, got {type(transitions).__name__}")
        rew = np.asarray(transitions.rew)
        if rew.ndim != 1:
            raise ValueError(f"rew must be 1-D (one reward per transition), got shape {rew.shape}")
        n = rew.shape[0]
        cols = {name: np.array(as_column(name, getattr(transitions, name), *self._specs[name], n)) for name in _DATA}
        written = self._ring.add(cols, transitions.stream)
        if written:
            episodes = np.concatenate([self._episodes, np.array(written, np.int64)])
            self._episodes = episodes[episodes.sum(axis=1) > self._ring.oldest]  # drop fully overwritten ones

    # -- sampling --------------------------------------------------------------------------------
    def _usable(self) -> tuple[np.ndarray, np.ndarray]:
        """Global first stored item and stored length of every episode with at least 3 stored steps."""
        first = np.maximum(self._episodes[:, 0], self._ring.oldest)
        length = self._episodes.sum(axis=1) - first
        keep = length >= 3
        return first[keep], length[keep]

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Storage rows ``[B, 3]`` of ``batch_size`` triplets ``i < k < j`` (one episode per row)."""
        batch_size = check_batch_size(batch_size)
        first, length = self._usable()
        if len(first) == 0:
            raise ValueError(f"no stored episode has 3 steps yet ({len(self)} stored transitions, "
                             f"{self.num_pending} in unfinished episodes): a triplet needs 3 steps of one episode")
        pick = self._ring.rng.integers(0, len(first), size=batch_size)
        steps = distinct_sorted_triplets(length[pick], self._ring.rng)
        return (first[pick, None] + steps) % self.capacity

    def sample(self, batch_size: int) -> Transitions:
        """``batch_size`` triplets as pair-axis Transitions (see the class docstring)."""
        idx = self.sample_indices(batch_size)
        i, k, j = (self._ring.storage.read(idx[:, c], _DATA) for c in range(3))

        def pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.stack([a, b], axis=1)

        return Transitions(obs=pair(i["obs"], k["obs"]), act=pair(i["act"], k["act"]), rew=pair(i["rew"], k["rew"]),
                           next_obs=pair(k["obs"], j["next_obs"]),
                           terminated=pair(i["terminated"], k["terminated"]),
                           truncated=pair(i["truncated"], k["truncated"]), indices=idx)

    # -- persistence -----------------------------------------------------------------------------
    def check_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Raise ValueError naming the problem if ``load_state_dict(state)`` would refuse ``state``; changes nothing."""
        self._checked(state)

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; raises ValueError naming the problem and changes nothing then."""
        checked = self._checked(state)
        self._ring.load_checked(checked)
        firsts, where = np.unique(np.asarray(checked.storage["ep_first"], np.int64), return_index=True)
        lengths = np.asarray(checked.storage["ep_len"], np.int64)[where]
        self._episodes = np.stack([firsts, lengths], axis=1) if len(firsts) else np.zeros((0, 2), np.int64)

    def _checked(self, state: Mapping[str, np.ndarray]) -> CheckedState:
        checked = self._ring.check_state_dict(state)
        first, length = np.asarray(checked.storage["ep_first"]), np.asarray(checked.storage["ep_len"])
        if np.any(length < 1) or np.any(first < 0) or np.any(first + length > checked.added):
            raise ValueError("state_dict ep_first/ep_len describe episodes outside the items ever added")
        return checked
