"""The one observation encoder of the built-in agents, numpy only: any gymnasium space to network input.

:class:`ObsEncoder` decides, from the observation space alone, three things every agent needs:

- what a stored observation looks like (``shape``, ``store_space``): Box, Discrete, MultiBinary
  and MultiDiscrete observations are stored as the env gives them (uint8 images stay uint8);
  Dict and Tuple observations (nested at any depth) are flattened once, at the agent's boundary,
  to one float32 vector per observation (Discrete and MultiDiscrete parts one-hot, the order of
  ``gymnasium.spaces.flatten``), so replay and rollout buffers only ever hold flat numpy arrays;
- which torso reads it (``torso``): ``"mlp"`` (a flat ``[B, dim]`` float32 input) or ``"conv"``
  (an image ``[B, H, W, C]`` float32 input, channels last as Gymnasium and PettingZoo give them,
  uint8 scaled by 1/255). ``torso="auto"`` picks ``"conv"`` for a rank-3 Box that is uint8 or at
  least 8x8 (images, Go or chess planes) and ``"mlp"`` otherwise (vectors, small boards such as
  tic-tac-toe and connect four, whose default stays the MLP); ``torso="conv"`` forces a conv torso
  on any rank-2 (``HxW``, one channel) or rank-3 Box;
- or a user-supplied torso (DQN): ``torso=factory`` (a function at the top level of a module, or
  its ``"module:qualname"`` path) called with the network input's shape (a Box's own shape, else
  ``(dim,)``) and returning a ``torch.nn.Module`` / Keras layer that gives flat features;
  :func:`torso_factory` checks that a checkpoint can import it again;
- the conv layers (``conv_layers``: ``(channels, kernel, stride, padding)`` per layer), by default
  the Atari network for images of 36 pixels or more a side and two 3x3 "same" layers below that.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> enc = ObsEncoder(gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,)))))
    >>> enc.shape, enc.torso
    ((5,), 'mlp')
    >>> enc((np.array([2, 0]), np.ones((2, 2), np.float32))).tolist()
    [[0.0, 0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0, 1.0]]
    >>> img = ObsEncoder(gym.spaces.Box(0, 255, (12, 10, 3), np.uint8))
    >>> img.torso, img.image_shape, img.conv_layers
    ('conv', (12, 10, 3), ((32, 3, 1, 1), (64, 3, 1, 1)))
    >>> float(img(np.full((1, 12, 10, 3), 255, np.uint8)).max())
    1.0
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.types import Transitions

__all__ = ["ObsEncoder", "agent_encoder", "torso_factory", "replay_space", "flat_obs_dim", "TORSOS",
           "check_conv_layers", "default_conv_layers", "conv_output_shape"]

TORSOS = ("auto", "mlp", "conv")
_LEAVES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
_NESTED = (gym.spaces.Dict, gym.spaces.Tuple)


def _leaf_dim(space: gym.Space) -> int:
    """Width of one observation of a leaf space once encoded (one-hot for Discrete/MultiDiscrete)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape or (), dtype=np.int64))


def flat_obs_dim(space: gym.Space) -> int:
    """Input width of an MLP for ``space``: one-hot Discrete and MultiDiscrete parts, Dict/Tuple flattened.

    Example:
        >>> flat_obs_dim(gym.spaces.Dict({"a": gym.spaces.MultiDiscrete([2, 3]), "b": gym.spaces.MultiBinary(4)}))
        9
    """
    if isinstance(space, gym.spaces.Dict):
        return sum(flat_obs_dim(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(flat_obs_dim(s) for s in space.spaces)
    if isinstance(space, _LEAVES):
        return _leaf_dim(space)
    raise TypeError(f"unsupported observation space {space!r}: use Box, Discrete, MultiBinary, MultiDiscrete, "
                    f"or Dict/Tuple of those")


def _one_hot(idx: np.ndarray, n: int, name: str) -> np.ndarray:
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"{name} holds {int(idx.min())}..{int(idx.max())}, outside the space's 0..{n - 1}")
    out = np.zeros((*idx.shape, n), np.float32)
    np.put_along_axis(out, idx[..., None], 1.0, axis=-1)
    return out


def _encode_leaf(space: gym.Space, arr: np.ndarray) -> np.ndarray:
    """A checked batch of a leaf space as float32 ``[B, width]``."""
    b = len(arr)
    if isinstance(space, gym.spaces.Discrete):
        return _one_hot(arr - int(space.start), int(space.n), "a Discrete observation")
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = np.broadcast_to(np.asarray(getattr(space, "start", 0)), space.nvec.shape)
        idx = (arr - start).reshape(b, -1)
        return np.concatenate([_one_hot(idx[:, i], int(n), "a MultiDiscrete observation")
                               for i, n in enumerate(space.nvec.reshape(-1))], axis=1)
    return np.ascontiguousarray(arr.reshape(b, -1), dtype=np.float32)


def _leaf_shape(space: gym.Space) -> tuple[int, ...]:
    return () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape or ())


def _check_leaf(space: gym.Space, obs: Any, name: str) -> np.ndarray:
    arr = np.asarray(obs)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    shape = _leaf_shape(space)
    if arr.shape[1:] != shape or arr.ndim != len(shape) + 1:
        hint = " (observations are batched: add a leading batch axis)" if arr.shape == shape else ""
        raise ValueError(f"{name} has shape {arr.shape}, expected (batch, *{shape}) for the observation space "
                         f"{space}{hint}")
    return arr


def _flatten_nested(space: gym.Space, obs: Any, name: str) -> list[np.ndarray]:
    """The encoded ``[B, width]`` parts of a batched (possibly nested) observation, in flatten order."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            raise ValueError(f"{name} must be a dict of batched arrays with keys {list(space.spaces)}, "
                             f"got {type(obs).__name__}")
        missing = [k for k in space.spaces if k not in obs]
        if missing:
            raise ValueError(f"{name} is missing the keys {missing} of its Dict space")
        return [p for k, s in space.spaces.items() for p in _flatten_nested(s, obs[k], f"{name}[{k!r}]")]
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, Sequence) or isinstance(obs, np.ndarray) or len(obs) != len(space.spaces):
            raise ValueError(f"{name} must be a tuple of {len(space.spaces)} batched arrays for its Tuple space, "
                             f"got {type(obs).__name__}")
        return [p for i, s in enumerate(space.spaces) for p in _flatten_nested(s, obs[i], f"{name}[{i}]")]
    return [_encode_leaf(space, _check_leaf(space, obs, name))]


def torso_factory(torso: Any) -> tuple[str, Any] | None:
    """``(import path, factory)`` of a user-supplied torso (a callable or a ``"module:qualname"``
    string), None for the named torsos; a ValueError for one a checkpoint could not import again.

    Example:
        >>> torso_factory("mlp") is None, torso_factory("numpy:zeros")[0]
        (True, 'numpy:zeros')
        >>> torso_factory(lambda space: None)
        Traceback (most recent call last):
        ...
        ValueError: torso=<lambda> cannot be imported again when a checkpoint is restored ...
    """
    import importlib

    if isinstance(torso, str) and torso in TORSOS:
        return None
    if isinstance(torso, str):
        module, _, qualname = torso.partition(":")
        if not module or not qualname:
            raise ValueError(f"torso must be one of {list(TORSOS)}, a function, or a 'module:qualname' import "
                             f"path, got {torso!r}")
        try:
            fn: Any = importlib.import_module(module)
            for part in qualname.split("."):
                fn = getattr(fn, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"torso={torso!r} cannot be imported ({type(exc).__name__}: {exc})") from None
        if not callable(fn):
            raise ValueError(f"torso={torso!r} is not callable")
        return torso, fn
    if not callable(torso):
        raise ValueError(f"torso must be one of {list(TORSOS)}, a function, or a 'module:qualname' import path, "
                         f"got {torso!r}")
    owner, name = getattr(torso, "__module__", None), str(getattr(torso, "__qualname__", ""))
    path = f"{owner}:{name}"
    if not owner or "<" in name:
        raise ValueError(f"torso={getattr(torso, '__name__', torso)} cannot be imported again when a checkpoint "
                         f"is restored (checkpoints hold no code): pass a function defined at the top level of an "
                         f"importable module, or its 'module:qualname' path")
    return path, torso


def check_conv_layers(layers: Any) -> tuple[tuple[int, int, int, int], ...]:
    """``layers`` as ``((channels, kernel, stride, padding), ...)`` of ints, or a ValueError.

    Example:
        >>> check_conv_layers([(8, 3, 1, 1)])
        ((8, 3, 1, 1),)
    """
    try:
        out = tuple(tuple(int(v) for v in layer) for layer in layers)
    except (TypeError, ValueError):
        raise ValueError(f"conv_layers must be a sequence of (channels, kernel, stride, padding), got {layers!r}") \
            from None
    if not out or any(len(layer) != 4 for layer in out):
        raise ValueError(f"conv_layers must be a non-empty sequence of (channels, kernel, stride, padding), "
                         f"got {layers!r}")
    for c, k, s, p in out:
        if c <= 0 or k <= 0 or s <= 0 or p < 0:
            raise ValueError(f"conv layer {(c, k, s, p)}: channels, kernel and stride must be positive and "
                             f"padding >= 0")
    return out  # type: ignore[return-value]


def default_conv_layers(image_shape: tuple[int, int, int]) -> tuple[tuple[int, int, int, int], ...]:
    """The Atari (Nature DQN) layers for images 36 pixels or more a side, else two 3x3 "same" layers."""
    if min(image_shape[:2]) >= 36:
        return ((32, 8, 4, 0), (64, 4, 2, 0), (64, 3, 1, 0))
    return ((32, 3, 1, 1), (64, 3, 1, 1))


def conv_output_shape(image_shape: tuple[int, int, int], layers: Sequence[tuple[int, int, int, int]]
                      ) -> tuple[int, int, int]:
    """``(H, W, C)`` after ``layers`` (a ValueError when the image is too small for them).

    Example:
        >>> conv_output_shape((6, 7, 2), ((4, 3, 1, 1), (8, 3, 2, 0)))
        (2, 3, 8)
    """
    h, w, c = image_shape
    for channels, k, s, p in layers:
        h, w, c = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, channels
        if h <= 0 or w <= 0:
            raise ValueError(f"the image {image_shape} is too small for conv_layers {tuple(layers)}: pass "
                             f"smaller kernels or strides, or torso='mlp'")
    return h, w, c


class ObsEncoder:
    """Checks a batch of observations against the space and turns it into a float32 network input.

    ``torso`` is ``"auto"``, ``"mlp"`` or ``"conv"`` (see the module docstring); ``conv_layers``
    overrides the default conv layers. Attributes: ``shape`` (one stored observation), ``dim``
    (the flat width of the network input), ``image_shape`` (``(H, W, C)`` for a conv torso, else
    None), ``nested`` (Dict/Tuple: flattened at the boundary by :meth:`flat`), ``store_space``
    (what a replay buffer allocates from). Calling it encodes: ``[B, dim]`` for an MLP,
    ``[B, H, W, C]`` for a conv torso.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> enc = ObsEncoder(gym.spaces.Box(0, 1, (3, 3, 2), np.int8))
        >>> x = enc(np.zeros((4, 3, 3, 2), np.int8)); x.shape, x.dtype
        ((4, 18), dtype('float32'))
        >>> ObsEncoder(gym.spaces.Discrete(3))(np.array([2])).tolist()
        [[0.0, 0.0, 1.0]]
        >>> ObsEncoder(gym.spaces.MultiDiscrete([2, 3]))(np.array([[1, 2]])).tolist()
        [[0.0, 1.0, 0.0, 0.0, 1.0]]
        >>> enc.check(np.zeros((3, 3, 2)))
        Traceback (most recent call last):
        ...
        ValueError: obs has shape (3, 3, 2), expected (batch, *(3, 3, 2)) ... add a leading batch axis)
    """

    def __init__(self, space: gym.Space, torso: str = "auto", conv_layers: Any = None):
        if not isinstance(space, (*_LEAVES, *_NESTED)):
            raise TypeError(f"unsupported observation space {space!r}: use Box, Discrete, MultiBinary, "
                            f"MultiDiscrete, or Dict/Tuple of those")
        self.factory = torso_factory(torso)  # a user-supplied torso: (import path, factory)
        if self.factory is not None:
            torso = "user"
        self.space = space
        self.nested = isinstance(space, _NESTED)
        self.dim = flat_obs_dim(space)
        if self.nested:
            self.shape: tuple[int, ...] = (self.dim,)
            self.store_space: gym.Space = gym.spaces.Box(-np.inf, np.inf, (self.dim,), np.float32)
        else:
            self.shape = _leaf_shape(space)
            self.store_space = space
        self.image_shape: tuple[int, int, int] | None = None
        self.scale = 1.0
        self.torso = self._resolve(torso)
        self.conv_layers: tuple[tuple[int, int, int, int], ...] = ()
        if self.torso == "conv":
            shape = tuple(int(v) for v in space.shape)  # type: ignore[union-attr]
            self.image_shape = (shape[0], shape[1], shape[2] if len(shape) == 3 else 1)
            self.scale = 1.0 / 255.0 if np.dtype(space.dtype) == np.uint8 else 1.0
            self.conv_layers = (default_conv_layers(self.image_shape) if conv_layers is None
                                else check_conv_layers(conv_layers))
            conv_output_shape(self.image_shape, self.conv_layers)
        elif conv_layers is not None:
            raise ValueError(f"conv_layers were given but the torso is {self.torso!r} for {space!r}: pass "
                             f"torso='conv' with them")

    def _resolve(self, torso: str) -> str:
        space = self.space
        if torso == "user":
            if self.nested:
                raise ValueError(f"a user-supplied torso reads Box, Discrete, MultiBinary or MultiDiscrete "
                                 f"observations, got {space!r}")
            return "user"
        rank = len(space.shape or ()) if isinstance(space, gym.spaces.Box) else 0
        if torso == "conv":
            if rank not in (2, 3):
                raise ValueError(f"torso='conv' needs a Box observation of rank 2 (HxW) or 3 (HxWxC, channels "
                                 f"last), got {space!r}")
            return "conv"
        if torso == "auto" and rank == 3:
            h, w, _ = space.shape  # type: ignore[misc]
            if np.dtype(space.dtype) == np.uint8 or min(h, w) >= 8:
                return "conv"
        return "mlp"

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one network input: ``image_shape``, a Box's own shape for a user torso, else ``(dim,)``."""
        if self.image_shape is not None:
            return self.image_shape
        if self.torso == "user" and isinstance(self.space, gym.spaces.Box):
            return tuple(self.space.shape)
        return (self.dim,)

    @property
    def conv_out_dim(self) -> int:
        """Width of the flattened conv output (0 without a conv torso)."""
        if self.image_shape is None:
            return 0
        return int(np.prod(conv_output_shape(self.image_shape, self.conv_layers)))

    def flat(self, obs: Any, name: str = "obs") -> Any:
        """A nested (Dict/Tuple) batch as its stored float32 ``[B, dim]`` form; other batches unchanged."""
        if not self.nested or isinstance(obs, np.ndarray):
            return obs
        return np.concatenate(_flatten_nested(self.space, obs, name), axis=1)

    def flat_transitions(self, t: Transitions) -> Transitions:
        """``t`` with nested observations flattened to their stored form (``t`` itself otherwise)."""
        if not self.nested:
            return t
        return replace(t, obs=self.flat(t.obs, "transitions.obs"),
                       next_obs=self.flat(t.next_obs, "transitions.next_obs"))

    def check(self, obs: Any, name: str = "obs") -> np.ndarray:
        """The batch in its stored form (nested batches flattened), or a ValueError naming the problem."""
        if self.nested and not isinstance(obs, np.ndarray):
            return self.flat(obs, name)
        arr = np.asarray(obs)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
        if arr.shape[1:] != self.shape or arr.ndim != len(self.shape) + 1:
            hint = " (observations are batched: add a leading batch axis)" if arr.shape == self.shape else ""
            raise ValueError(f"{name} has shape {arr.shape}, expected (batch, *{self.shape}) for the "
                             f"observation space {self.space}{hint}")
        return arr

    def __call__(self, obs: Any, name: str = "obs") -> np.ndarray:
        arr = self.check(obs, name)
        if self.nested:
            return np.ascontiguousarray(arr, dtype=np.float32)
        if self.torso == "user" and isinstance(self.space, gym.spaces.Box):  # the space's own shape
            x = arr.astype(np.float32)
            return x * np.float32(1 / 255) if np.dtype(self.space.dtype) == np.uint8 else x
        if self.image_shape is not None:
            x = arr.reshape(len(arr), *self.image_shape).astype(np.float32)
            return x * np.float32(self.scale) if self.scale != 1.0 else x
        return _encode_leaf(self.space, arr)

    def __repr__(self) -> str:
        return f"ObsEncoder({self.space}, torso={self.torso!r})"


def agent_encoder(observation_space: gym.Space, torso: str = "auto", conv_layers: Any = None) -> ObsEncoder:
    """The encoder of an agent over ``observation_space``: a goal env's Dict (``observation`` /
    ``achieved_goal`` / ``desired_goal``) is read as the flat ``[observation, desired_goal]`` that
    hindsight replay relabels; any other space as itself.

    Example:
        >>> from marl_note.envs.goal_envs import BitFlippingEnv
        >>> agent_encoder(BitFlippingEnv(n_bits=3).observation_space).shape
        (6,)
    """
    from marl_note.replay.feed import is_goal_space, network_space

    if is_goal_space(observation_space):
        return ObsEncoder(network_space(observation_space), torso, conv_layers)
    return ObsEncoder(observation_space, torso, conv_layers)


def replay_space(observation_space: gym.Space, encoder: ObsEncoder) -> gym.Space:
    """The observation space a replay buffer is built over: a goal env's Dict as it is (the replay
    feed flattens it), a nested Dict/Tuple as its flat stored form, anything else as it is."""
    from marl_note.replay.feed import is_goal_space

    return observation_space if is_goal_space(observation_space) else encoder.store_space
