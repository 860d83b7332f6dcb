"""The numpy side of an agent: networks as named float32 arrays, Adam, checked steps, numpy state.

:class:`NumpyNetworks` mirrors :class:`marl_note.agents.torch.networks.TorchNetworks` at the seam
the cores use: the same names, ``state_dict`` keys and layouts (PyTorch's, so a checkpoint moves
between the three backends), ``version``, ``sync``, learning rates and ``numpy_weights``. An
algorithm's subclass adds forward passes and a ``train_step`` written with
:mod:`marl_note.agents.numpy.layers` (hand-written backward passes); nothing here imports a framework.

Conv torsos and user-supplied torsos are not in this backend: :meth:`NumpyNetworks.refuse_torso`
and :meth:`NumpyNetworks.user_torso_width` refuse them naming ``torch`` and ``tf`` as the alternative.

Example:
    >>> import numpy as np
    >>> from marl_note.agents.networks import mlp_weights
    >>> nets = NumpyNetworks()
    >>> q = nets.mlp("q_net", mlp_weights("q_net", 3, (4,), 2, np.random.default_rng(0)), "relu")
    >>> opt = nets.adam("optimizer", ["q_net"], lr=1e-3)
    >>> sorted(nets.state_dict())[:3], nets.weight_names
    (['optimizer.lr', 'q_net.0.bias', 'q_net.0.weight'], ('q_net',))
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.numpy.layers import MLP, Adam, FlatGrads, clip_grad_norm, mlp_keys, polyak
from marl_note.agents.numpy_policy import named_by
from marl_note.agents.spaces import raise_if_nonfinite_update

__all__ = ["NumpyNetworks", "NumpyBackendError"]


class NumpyBackendError(ValueError):
    """What the numpy backend cannot build (a conv or user torso, an accelerator), naming the alternative.

    Example:
        >>> NumpyNetworks.refuse_torso("DQN", "conv")
        Traceback (most recent call last):
        ...
        marl_note.agents.numpy.networks.NumpyBackendError: the numpy backend builds MLP networks only, \
and this DQN has a conv torso (torso='conv'): use marl_note.agents.torch.DQN or marl_note.agents.tf.DQN \
(--backend torch or tf), or torso='mlp' to flatten the observations
    """


class NumpyNetworks:
    """Named networks (dicts of float32 arrays in PyTorch's names), Adam optimisers, numpy state.

    ``modules`` maps a network name to its arrays (``{"q_net": {"q_net.0.weight": ..., ...}}``),
    in PyTorch's ``parameters()`` order; ``optimizers`` maps an optimiser name to an
    :class:`~marl_note.agents.numpy.layers.Adam` over some networks' arrays. Every change writes
    into the same arrays, so the forward passes built over them always see the current weights.
    ``version`` counts weight changes (steps, syncs, loads) for the numpy acting copy.
    """

    numpy_conv_acting = True

    @staticmethod
    def restorable_device(device: Any, where: str = "the checkpoint") -> Any:
        """The numpy backend runs on the CPU: a checkpoint saved on any device restores there (with a
        warning when it named another)."""
        if device in ("cpu", "auto", None):
            return "cpu"
        warnings.warn(f"{where} was saved on device {str(device)!r}; the numpy backend runs on the CPU",
                      RuntimeWarning, stacklevel=4)
        return "cpu"

    @staticmethod
    def refuse_torso(algorithm: str, torso: str) -> None:
        """Raise :class:`NumpyBackendError` for a conv (``torso="conv"``) or user torso."""
        what = "a conv torso (torso='conv')" if torso == "conv" else f"a user-supplied torso ({torso})"
        hint = ", or torso='mlp' to flatten the observations" if torso == "conv" else ""
        raise NumpyBackendError(f"the numpy backend builds MLP networks only, and this {algorithm} has {what}: use "
                                f"marl_note.agents.torch.{algorithm} or marl_note.agents.tf.{algorithm} "
                                f"(--backend torch or tf){hint}")

    @staticmethod
    def user_torso_width(factory: Any, shape: tuple[int, ...]) -> int:
        """A user torso is a framework module: refused (see :meth:`refuse_torso`)."""
        name = getattr(factory, "__qualname__", type(factory).__name__)
        NumpyNetworks.refuse_torso("DQN", f"torso={name}")
        raise AssertionError("unreachable")  # pragma: no cover

    def __init__(self, device: Any = "cpu", compile: bool = False):
        if device not in ("cpu", "auto", None):
            raise NumpyBackendError(f"the numpy backend runs on the CPU, got device={device!r}: use the torch or tf "
                                    f"backend for an accelerator")
        if compile:
            warnings.warn("compile=True has nothing to compile in the numpy backend (its steps are plain numpy); "
                          "ignored", RuntimeWarning, stacklevel=4)
        self.device = "cpu"
        self.compile = False
        self.modules: dict[str, dict[str, np.ndarray]] = {}
        self.flat: dict[str, np.ndarray] = {}  # each network's arrays are views of one flat buffer
        self.optimizers: dict[str, Adam] = {}
        self._optimizer_keys: dict[str, list[str]] = {}
        self._grad_flat: dict[str, np.ndarray] = {}  # per optimiser: the flat gradient buffer of grads()
        self._grad_views: dict[str, dict[str, np.ndarray]] = {}
        self.version = 0

    # -- building --------------------------------------------------------------------------------------
    def add(self, name: str, weights: Mapping[str, np.ndarray], keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Register network ``name``: float32 copies of ``weights[k]`` for ``keys`` (parameters() order)."""
        missing = [k for k in keys if k not in weights]
        if missing:
            raise KeyError(f"no weights {missing} for network {name!r}")
        shapes = [np.shape(weights[k]) for k in keys]
        flat = np.empty(sum(int(np.prod(shape)) for shape in shapes), np.float32)  # one buffer: one-op updates
        arrays, at = {}, 0
        for k, shape in zip(keys, shapes):
            size = int(np.prod(shape))
            arrays[k] = flat[at:at + size].reshape(shape)
            arrays[k][...] = weights[k]
            at += size
        self.modules[name] = arrays
        self.flat[name] = flat
        return arrays

    def mlp(self, name: str, weights: Mapping[str, np.ndarray], activation: str) -> MLP:
        """Register and return the MLP ``name`` built from ``weights`` (its arrays ``{name}.{2j}.*``)."""
        keys = [f"{key}.{part}" for key in mlp_keys(weights, name) for part in ("weight", "bias")]
        return MLP(self.add(name, weights, keys), name, activation)

    def adam(self, name: str, modules: Iterable[str], lr: float, eps: float = 1e-8) -> Adam:
        """Register and return an Adam optimiser over the arrays of ``modules``."""
        keys = [k for m in modules for k in self.modules[m]]
        arrays = {k: v for m in modules for k, v in self.modules[m].items()}
        opt = Adam([arrays[k] for k in keys], lr=lr, eps=eps)
        self.optimizers[name] = opt
        self._optimizer_keys[name] = keys
        return opt

    def grads(self, optimizer: str) -> FlatGrads:
        """An empty gradient dict for ``optimizer``'s arrays whose backward passes write each gradient in
        its place in one flat float32 buffer (:class:`~marl_note.agents.numpy.layers.FlatGrads`), so
        :meth:`step` clips and steps that buffer as it is. The buffer is this optimiser's, reused by each
        call: read a step's gradients before the next call."""
        if optimizer not in self._grad_flat:
            params = self.optimizers[optimizer].params
            flat = np.empty(sum(p.size for p in params), np.float32)
            views, at = {}, 0
            for k, p in zip(self._optimizer_keys[optimizer], params):
                views[k] = flat[at:at + p.size].reshape(p.shape)
                at += p.size
            self._grad_flat[optimizer], self._grad_views[optimizer] = flat, views
        return FlatGrads(self._grad_flat[optimizer], self._grad_views[optimizer])

    @property
    def weight_names(self) -> tuple[str, ...]:
        return tuple(self.modules)

    # -- one checked optimiser step ------------------------------------------------------------------
    def step(self, optimizer: str, loss: float, grads: Mapping[str, np.ndarray], max_grad_norm: float | None,
             who: str, update: int, name: str = "loss") -> float:
        """Clip ``grads`` (keyed by array name) and step ``optimizer`` unless the loss or gradient norm is
        not finite; returns the norm before clipping.

        Raises :class:`~marl_note.types.NonFiniteError` naming ``who`` and ``update`` before any
        weight is written.
        """
        self.version += 1
        keys = self._optimizer_keys[optimizer]
        if isinstance(grads, FlatGrads) and grads.flat is self._grad_flat.get(optimizer) and grads.complete(keys):
            flat = grads.flat  # the backward pass wrote every gradient in place
        else:
            flat = np.concatenate([np.ravel(grads[k]) for k in keys]).astype(np.float32, copy=False)
        norm = clip_grad_norm([flat], max_grad_norm)
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise_if_nonfinite_update(who, update, {name: float(loss), f"{name} gradient norm": norm})
        self.optimizers[optimizer].step_flat(flat)
        return norm

    def replica_grad_sq(self, optimizer: str, rows: int) -> None:
        """One process, no replicas: nothing to fold (the torch/tf backends measure over ranks)."""
        return None

    def sync(self, target: str, source: str, tau: float | None = None) -> None:
        """Copy ``source`` into ``target`` (``tau=None``) or move it ``tau`` of the way (Polyak)."""
        self.version += 1
        polyak([self.flat[target]], [self.flat[source]], tau)

    # -- learning rates --------------------------------------------------------------------------------
    def learning_rates(self) -> dict[str, float]:
        """``{optimizer name: learning rate}``, as the state saves them."""
        return {name: float(opt.lr) for name, opt in self.optimizers.items()}

    def set_learning_rate(self, name: str, lr: float) -> None:
        """Set optimiser ``name``'s learning rate to ``lr`` (checked by the caller)."""
        self.optimizers[name].lr = float(lr)

    # -- numpy state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for arrays in self.modules.values():
            out.update((k, v.copy()) for k, v in arrays.items())
        for name, opt in self.optimizers.items():
            out.update(opt.state(name))
        return out

    def numpy_weights(self, prefixes: Iterable[str]) -> dict[str, np.ndarray]:
        """Copies of the weight arrays named by ``prefixes`` (see :func:`~marl_note.agents.numpy_policy.named_by`)."""
        prefixes = tuple(prefixes)
        return {k: v.copy() for arrays in self.modules.values() for k, v in arrays.items() if named_by(prefixes, k)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load weights and optimiser slots written by any backend; every array is checked before any is written."""
        missing = [k for arrays in self.modules.values() for k in arrays if k not in state]
        if missing:
            raise KeyError(f"state_dict is missing {missing}")
        new = {}
        for arrays in self.modules.values():
            for k, v in arrays.items():
                arr = np.asarray(state[k])
                if arr.shape != v.shape:
                    raise ValueError(f"{k} has shape {arr.shape}, this network expects {v.shape}")
                new[k] = arr
        self.version += 1
        for arrays in self.modules.values():
            for k, v in arrays.items():
                v[...] = new[k]
        for name, opt in self.optimizers.items():
            opt.load(name, state)

    def optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        """Optimiser name -> the shapes of its parameters, in order (what its saved slots must have)."""
        return {name: [tuple(p.shape) for p in opt.params] for name, opt in self.optimizers.items()}
