"""Joint replay for centralised critics (MADDPG): one row = one env step of all agents.

A :class:`JointReplayBuffer` stores :class:`~marl_note.types.JointTransitions` in preallocated
numpy ring arrays: per agent ``obs.<agent>``, ``act.<agent>``, ``next_obs.<agent>`` (item shapes
from that agent's spaces, so heterogeneous agents are fine) and ``[capacity, num_agents]`` arrays
``rew``, ``terminated``, ``truncated``, ``alive``. Legal-action masks ``mask.<agent>`` and
``next_mask.<agent>`` (bool ``[capacity, n_actions]``, Discrete agents only) are stored when the first
batch carries them, and so are the env's global ``state`` / ``next_state`` when the buffer is built
with a ``state_space`` (a buffer built without one ignores them). Sampling is uniform with
replacement and draws the same rows for every agent. Numpy only.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from marl_note.replay.storage import (
    RingStorage,
    Spec,
    as_column,
    check_batch_size,
    check_rng_state_array,
    rng_state_array,
    set_rng_state,
)
from marl_note.types import JointTransitions, NumpyState, space_shape_dtype

__all__ = ["JointReplayBuffer"]

PER_AGENT_FIELDS = ("obs", "act", "next_obs")
MASK_FIELDS = ("mask", "next_mask")
STATE_FIELDS = ("state", "next_state")
JOINT_FIELDS = {"rew": np.float32, "terminated": bool, "truncated": bool, "alive": bool}


class JointReplayBuffer:
    """Uniform replay of joint per-step rows over ``agents`` (a ring of the last ``capacity`` rows).

    ``mask``/``next_mask`` are optional and come together: they are stored when the first batch
    carries them (every agent must then have a Discrete action space), and once stored every later
    batch must carry them too; a buffer holding rows without masks refuses a batch with them.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import JointTransitions
        >>> obs = {"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Box(-1, 1, (3,))}
        >>> act = {"a": gym.spaces.Discrete(4), "b": gym.spaces.Discrete(2)}
        >>> buf = JointReplayBuffer(10, ("a", "b"), obs, act, seed=0)
        >>> jt = JointTransitions(("a", "b"), obs={"a": np.zeros((3, 2)), "b": np.ones((3, 3))},
        ...     act={"a": np.array([0, 1, 3]), "b": np.array([1, 0, 1])}, rew=np.ones((3, 2)),
        ...     next_obs={"a": np.zeros((3, 2)), "b": np.ones((3, 3))}, terminated=np.zeros((3, 2), bool),
        ...     truncated=np.zeros((3, 2), bool), alive=np.ones((3, 2), bool))
        >>> buf.add(jt).tolist()
        [0, 1, 2]
        >>> batch = buf.sample(5)
        >>> len(buf), batch.obs["b"].shape, batch.rew.shape
        (3, (5, 3), (5, 2))
    """

    def __init__(self, capacity: int, agents: Sequence[str], observation_spaces: Mapping[str, gym.Space],
                 action_spaces: Mapping[str, gym.Space], seed: int | None = None, state_space: gym.Space | None = None):
        self.agents = tuple(agents)
        if not self.agents or len(set(self.agents)) != len(self.agents):
            raise ValueError(f"agents must be a non-empty sequence of distinct ids, got {list(agents)}")
        missing = [a for a in self.agents if a not in observation_spaces or a not in action_spaces]
        if missing:
            raise ValueError(f"no observation/action space for agents {missing}")
        n = len(self.agents)
        specs: dict[str, Spec] = {}
        for a in self.agents:
            obs_spec = space_shape_dtype(observation_spaces[a])
            specs[f"obs.{a}"] = obs_spec
            specs[f"act.{a}"] = space_shape_dtype(action_spaces[a])
            specs[f"next_obs.{a}"] = obs_spec
        for name, dtype in JOINT_FIELDS.items():
            specs[name] = ((n,), np.dtype(dtype))
        self._specs = specs
        num_actions = {a: int(space.n) for a, space in ((a, action_spaces[a]) for a in self.agents)
                       if isinstance(space, gym.spaces.Discrete)}
        self._mask_specs: dict[str, Spec] = {f"{field}.{a}": ((n_act,), np.dtype(bool))
                                             for field in MASK_FIELDS for a, n_act in num_actions.items()}
        self._maskable = len(self._mask_specs) == len(MASK_FIELDS) * n
        self._state_specs: dict[str, Spec] = ({} if state_space is None else
                                              dict.fromkeys(STATE_FIELDS, space_shape_dtype(state_space)))
        self._storage = RingStorage(capacity, specs)
        self._rng = np.random.default_rng(seed)

    @property
    def capacity(self) -> int:
        return self._storage.capacity

    @property
    def nbytes_estimate(self) -> int:
        """Bytes the storage takes at full size; construction refuses one that exceeds the available memory."""
        return self._storage.nbytes_estimate

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    def __len__(self) -> int:
        return len(self._storage)

    @property
    def has_state(self) -> bool:
        """Whether rows are stored with the env's ``state``/``next_state``."""
        return self._storage.has("state")

    @property
    def has_masks(self) -> bool:
        """Whether rows are stored with ``mask``/``next_mask``."""
        return self._storage.has(f"mask.{self.agents[0]}")

    def __repr__(self) -> str:
        return f"JointReplayBuffer(agents={list(self.agents)}, len={len(self)}, capacity={self.capacity})"

    # -- writing ---------------------------------------------------------------------------------
    def validate(self, jt: JointTransitions) -> dict[str, np.ndarray]:
        """Check a batch against this buffer and return its columns; raises ValueError, writes nothing."""
        if not isinstance(jt, JointTransitions):
            raise ValueError(f"expected a JointTransitions batch, got {type(jt).__name__}")
        if tuple(jt.agents) != self.agents:
            raise ValueError(f"batch is over agents {list(jt.agents)}, this buffer over {list(self.agents)}")
        rew = np.asarray(jt.rew)
        if rew.ndim != 2:
            raise ValueError(f"rew must have shape (batch, {self.num_agents}), got {rew.shape}")
        n = rew.shape[0]
        cols: dict[str, np.ndarray] = {}
        for field in PER_AGENT_FIELDS:
            self._per_agent_columns(jt, field, self._specs, n, cols)
        for name in JOINT_FIELDS:
            cols[name] = as_column(name, getattr(jt, name), *self._specs[name], n)
        cols.update(self._mask_columns(jt, n))
        carries = f"mask.{self.agents[0]}" in cols
        if len(self) and carries != self.has_masks:
            raise ValueError("this buffer stores mask/next_mask but the batch has none" if self.has_masks else
                             f"the batch carries mask/next_mask but this buffer already holds {len(self)} rows "
                             f"without them")
        if self._state_specs:
            cols.update(self._state_columns(jt, n))
        return cols

    def _state_columns(self, jt: JointTransitions, n: int) -> dict[str, np.ndarray]:
        if (jt.state is None) != (jt.next_state is None):
            raise ValueError("state and next_state come together: give both or neither")
        if jt.state is None:
            if len(self) and self.has_state:
                raise ValueError("this buffer stores the env's state/next_state but the batch has none")
            return {}
        if len(self) and not self.has_state:
            raise ValueError(f"the batch carries state/next_state but this buffer already holds {len(self)} rows "
                             f"without them")
        return {name: as_column(name, getattr(jt, name), *self._state_specs[name], n) for name in STATE_FIELDS}

    def _per_agent_columns(self, jt: JointTransitions, field: str, specs: Mapping[str, Spec], n: int,
                           cols: dict[str, np.ndarray]) -> None:
        per_agent = getattr(jt, field)
        if not isinstance(per_agent, Mapping) or set(per_agent) != set(self.agents):
            got = sorted(per_agent) if isinstance(per_agent, Mapping) else type(per_agent).__name__
            raise ValueError(f"{field} must be a dict over all agents {list(self.agents)}, got {got}")
        for a in self.agents:
            key = f"{field}.{a}"
            cols[key] = as_column(key, per_agent[a], *specs[key], n)

    def _mask_columns(self, jt: JointTransitions, n: int) -> dict[str, np.ndarray]:
        if jt.mask is None and jt.next_mask is None:
            return {}
        if jt.mask is None or jt.next_mask is None:
            raise ValueError("mask and next_mask come together: give both or neither")
        if not self._maskable:
            raise ValueError("action masks need Discrete action spaces for every agent")
        cols: dict[str, np.ndarray] = {}
        for field in MASK_FIELDS:
            self._per_agent_columns(jt, field, self._mask_specs, n, cols)
        return cols

    def add(self, jt: JointTransitions) -> np.ndarray:
        """Append a batch of joint rows (it may wrap around the ring); return the indices written."""
        cols = self.validate(jt)
        if not len(self) and set(cols) != set(self._storage.names):  # masks appear or go while empty
            specs = {**self._specs, **self._mask_specs, **self._state_specs}
            self._storage = RingStorage(self.capacity, {k: specs[k] for k in cols})
        return self._storage.write(cols)

    # -- reading ---------------------------------------------------------------------------------
    def get(self, indices) -> JointTransitions:
        """The stored rows at ``indices`` (copies) as JointTransitions."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise ValueError(f"indices must lie in [0, {len(self)}), got range [{indices.min()}, {indices.max()}]")
        cols = self._storage.read(indices)
        fields = PER_AGENT_FIELDS + (MASK_FIELDS if self.has_masks else ())
        per = {f: {a: cols[f"{f}.{a}"] for a in self.agents} for f in fields}
        return JointTransitions(self.agents, obs=per["obs"], act=per["act"], rew=cols["rew"], next_obs=per["next_obs"],
                                terminated=cols["terminated"], truncated=cols["truncated"], alive=cols["alive"],
                                mask=per.get("mask"), next_mask=per.get("next_mask"), state=cols.get("state"),
                                next_state=cols.get("next_state"))

    def sample_indices(self, batch_size: int) -> np.ndarray:
        batch_size = check_batch_size(batch_size)
        if len(self) == 0:
            raise ValueError("cannot sample from an empty buffer")
        return self._rng.integers(0, len(self), size=batch_size, dtype=np.int64)

    def sample(self, batch_size: int) -> JointTransitions:
        """``batch_size`` joint rows drawn uniformly with replacement (the same rows for all agents)."""
        return self.get(self.sample_indices(batch_size))

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> NumpyState:
        """Numpy arrays only: the valid rows of every column (``obs.<agent>``, ``rew``, ...), ring
        position, capacity and the sampling rng."""
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
        masks = self._mask_specs if self._maskable else {}
        optional = {**masks, **self._state_specs}
        brought = set(self._storage.check_state_dict(state, optional))
        if brought & set(masks) and not set(masks) <= brought:
            raise ValueError(f"state_dict has masks of only some agents: {sorted(brought & set(masks))}")
        if brought & set(STATE_FIELDS) and not set(STATE_FIELDS) <= brought:
            raise ValueError(f"state_dict has only {sorted(brought & set(STATE_FIELDS))} of state/next_state")
        return state, rng_state, optional

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict`; raises ValueError naming the problem and changes nothing then."""
        state, rng_state, optional = self._checked(state)
        self._storage.load_state_dict(state, optional)
        set_rng_state(self._rng, rng_state)
