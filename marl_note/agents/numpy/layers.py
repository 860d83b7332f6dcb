"""Dense layers, activations, Adam and gradient clipping in plain numpy, with hand-written backward passes.

Every array is float32 (float64 works too: the gradient checks run in float64) and in PyTorch's
names and layouts (:mod:`marl_note.agents.networks`): a Linear layer is ``{key}.weight``
``[out, in]`` and ``{key}.bias`` ``[out]``. A network reads its arrays from a ``params`` dict and
never replaces them: optimiser steps, target syncs and loaded states write into the same arrays.

- :class:`Dense` / :class:`MLP`: ``forward(x)`` returns the output and what the backward pass needs;
  ``backward(grad_out, cache, grads)`` adds the parameter gradients to ``grads`` (by key) and
  returns the gradient of the input; ``predict(x)`` is the output alone (a target network's pass).
- :class:`FlatGrads`: a ``grads`` dict whose layers write each gradient straight into its place in the
  optimiser's flat gradient buffer, so a step clips and applies that buffer without copying.
- :func:`activation_grad`: the derivative of each activation of
  :data:`~marl_note.agents.networks.ACTIVATIONS`, as ``torch.nn.ReLU`` / ``Tanh`` / ``ELU`` / ``GELU``.
- :class:`Adam`: ``torch.optim.Adam``'s update rule, defaults and state (``step``, ``exp_avg``,
  ``exp_avg_sq`` per parameter, no slots before the first step).
- :func:`clip_grad_norm`: ``torch.nn.utils.clip_grad_norm_``; :func:`polyak`: a target update.

Example:
    >>> import numpy as np
    >>> from marl_note.agents.networks import mlp_weights
    >>> params = mlp_weights("q_net", 3, (4,), 2, np.random.default_rng(0))
    >>> net = MLP(params, "q_net", "tanh")
    >>> y, cache = net.forward(np.ones((5, 3), np.float32))
    >>> grads = {}
    >>> net.backward(np.ones_like(y), cache, grads, need_input=True).shape, sorted(grads)[:2]
    ((5, 3), ['q_net.0.bias', 'q_net.0.weight'])
    >>> opt = Adam([params[k] for k in sorted(grads)], lr=1e-3)
    >>> opt.step([grads[k] for k in sorted(grads)]); opt.steps
    [1, 1, 1, 1]
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.networks import ACTIVATIONS, activate
from marl_note.agents.numpy.fused import adam_update

__all__ = ["Dense", "MLP", "FlatGrads", "Adam", "activation_grad", "clip_grad_norm", "total_norm", "polyak",
           "mlp_keys", "flat_view"]

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def activation_grad(grad_y: np.ndarray, x: np.ndarray, y: np.ndarray, name: str) -> np.ndarray:
    """``d act(x) / dx * grad_y`` for the activation ``name`` (``y = act(x)``, both kept by the forward pass).

    Example:
        >>> x = np.array([-1.0, 0.0, 2.0]); g = np.ones(3)
        >>> activation_grad(g, x, activate(x, "relu"), "relu").tolist()
        [0.0, 0.0, 1.0]
    """
    if name == "relu":  # torch: the gradient passes where the output is positive (none at 0)
        return grad_y * (y > 0)
    if name == "tanh":
        return grad_y * (1.0 - y * y)
    if name == "elu":
        return np.where(x > 0, grad_y, grad_y * np.exp(np.minimum(x, 0.0)))
    if name == "gelu":  # d/dx x * Phi(x) = Phi(x) + x * phi(x)
        cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
        return grad_y * (cdf + x * np.exp(-0.5 * x * x) / _SQRT_2PI)
    raise ValueError(f"unknown activation {name!r}; choose one of {list(ACTIVATIONS)}")


class Dense:
    """One Linear layer ``y = x @ W.T + b`` over ``params[f"{key}.weight"]`` ``[out, in]`` and ``.bias``,
    followed by ``activation`` when one is given.

    Example:
        >>> params = {"l.weight": np.eye(2, dtype=np.float32), "l.bias": np.ones(2, np.float32)}
        >>> y, cache = Dense(params, "l", "relu").forward(np.array([[-3.0, 1.0]], np.float32))
        >>> y.tolist()
        [[0.0, 2.0]]
    """

    def __init__(self, params: Mapping[str, np.ndarray], key: str, activation: str | None = None):
        if activation is not None and activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}")
        self.wkey, self.bkey = f"{key}.weight", f"{key}.bias"
        if self.wkey not in params or self.bkey not in params:
            raise KeyError(f"no layer {key!r} in the weights (need {self.wkey} and {self.bkey})")
        self.weight, self.bias = params[self.wkey], params[self.bkey]
        self.activation = activation
        self._zeros: dict[tuple[tuple[int, ...], np.dtype], np.ndarray] = {}  # read-only zeros by output shape

    def _relu(self, z: np.ndarray) -> np.ndarray:
        """``np.maximum(z, 0)`` in place, against an array of zeros of ``z``'s shape (kept per shape): the same
        numbers as against the scalar 0, through numpy's vectorised loop (about 5x faster on a 64 x 256 batch)."""
        key = (z.shape, z.dtype)
        zeros = self._zeros.get(key)
        if zeros is None:
            zeros = self._zeros[key] = np.zeros(z.shape, z.dtype)
        return np.maximum(z, zeros, out=z)

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, Any]:
        z = x @ self.weight.T
        z += self.bias
        if self.activation is None:
            return z, (x, None, None)
        if self.activation == "relu":  # in place: the backward pass of a ReLU reads its output only
            y = self._relu(z)
            return y, (x, None, y)
        y = activate(z, self.activation)
        return y, (x, z, y)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """:meth:`forward`'s output alone, without a cache (the same numbers; a ReLU is applied in place)."""
        z = x @ self.weight.T
        z += self.bias
        if self.activation is None:
            return z
        if self.activation == "relu":
            return self._relu(z)
        return activate(z, self.activation)

    def backward(self, grad_y: np.ndarray, cache: Any, grads: dict[str, np.ndarray],
                 need_input: bool = True, params: bool = True, own: bool = False) -> np.ndarray | None:
        """Add ``dL/dW`` and ``dL/db`` to ``grads`` (not with ``params=False``: only the input's gradient is
        wanted); return ``dL/dx`` (None with ``need_input=False``). ``own=True``: ``grad_y`` is a temporary of
        the caller's that this pass may overwrite (a ReLU's gradient is then taken in place)."""
        x, z, y = cache
        if self.activation is None:
            g = grad_y
        elif self.activation == "relu" and own and grad_y.dtype == y.dtype:
            g = np.multiply(grad_y, y > 0, out=grad_y)  # activation_grad's numbers, without a new array
        else:
            g = activation_grad(grad_y, z, y, self.activation)
        if params:
            wslot = bslot = None
            if isinstance(grads, FlatGrads) and g.dtype == x.dtype:
                wslot, bslot = grads.slot(self.wkey, g.dtype), grads.slot(self.bkey, g.dtype)
            if wslot is not None:  # straight into the optimiser's flat gradient: no copy later
                grads[self.wkey] = np.matmul(g.T, x, out=wslot)
            else:
                _accumulate(grads, self.wkey, g.T @ x)
            if bslot is not None:
                grads[self.bkey] = np.add.reduce(g, axis=0, out=bslot)  # g.sum(axis=0), without its wrapper
            else:
                _accumulate(grads, self.bkey, g.sum(axis=0))
        return g @ self.weight if need_input else None


class FlatGrads(dict[str, np.ndarray]):
    """Gradients by array name (a plain ``dict`` to every reader) whose layers write each array's gradient
    straight into its place in one flat buffer, ``flat``, laid out as the optimiser's parameters.

    :meth:`Dense.backward` asks :meth:`slot` for the place of each gradient it computes and writes there
    with ``out=``; a gradient added to one already there (an array used twice) becomes a new array, and
    :meth:`complete` then says no: the caller concatenates, as for a plain dict. The buffer is reused by
    the next step's gradients (:meth:`~marl_note.agents.numpy.networks.NumpyNetworks.grads` hands the same
    one out again), so a step's gradients are read before the next backward pass.

    Example:
        >>> flat = np.zeros(3, np.float32)
        >>> grads = FlatGrads(flat, {"l.weight": flat[:2].reshape(1, 2), "l.bias": flat[2:]})
        >>> layer = Dense({"l.weight": np.ones((1, 2), np.float32), "l.bias": np.zeros(1, np.float32)}, "l")
        >>> _ = layer.backward(np.ones((4, 1), np.float32), (np.ones((4, 2), np.float32), None, None), grads)
        >>> flat.tolist(), grads.complete(["l.weight", "l.bias"])
        ([4.0, 4.0, 4.0], True)
    """

    def __init__(self, flat: np.ndarray, views: Mapping[str, np.ndarray]):
        super().__init__()
        self.flat = flat
        self.views = views

    def slot(self, key: str, dtype: np.dtype) -> np.ndarray | None:
        """Where ``key``'s gradient goes: its place, when it has one of ``dtype`` and nothing is there yet."""
        view = self.views.get(key)
        return view if view is not None and view.dtype == dtype and key not in self else None

    def put(self, key: str, value: np.ndarray) -> None:
        """Set ``key``'s gradient to ``value``, copied into its place when it has one of ``value``'s dtype."""
        slot = self.slot(key, value.dtype)
        if slot is None or slot.shape != value.shape:
            self[key] = value
        else:
            np.copyto(slot, value)
            self[key] = slot

    def complete(self, keys: Sequence[str]) -> bool:
        """Whether every one of ``keys`` has its gradient in its place in :attr:`flat` (then ``flat`` is the
        gradient of those arrays, in that order, when ``keys`` are the buffer's arrays in order)."""
        return all(self.get(k) is self.views.get(k) for k in keys)


def _accumulate(grads: dict[str, np.ndarray], key: str, value: np.ndarray) -> None:
    if key in grads:
        grads[key] = grads[key] + value
    else:
        grads[key] = value


def mlp_keys(params: Mapping[str, np.ndarray], prefix: str) -> list[str]:
    """The layer keys ``{prefix}.{2j}`` of the MLP ``prefix`` in ``params``, in order."""
    keys, j = [], 0
    while f"{prefix}.{2 * j}.weight" in params:
        keys.append(f"{prefix}.{2 * j}")
        j += 1
    if not keys:
        raise KeyError(f"no layers named {prefix}.0.weight in the weights")
    return keys


class MLP:
    """``Linear -> act -> ... -> Linear`` over the arrays ``{prefix}.{2j}.weight/bias`` of ``params``
    (``out_activation=True``: the last layer activated too, as a dueling torso).

    Example:
        >>> from marl_note.agents.networks import mlp_forward, mlp_weights
        >>> params = mlp_weights("pi", 3, (8, 8), 2, np.random.default_rng(0))
        >>> x = np.ones((4, 3), np.float32)
        >>> bool(np.allclose(MLP(params, "pi", "elu").forward(x)[0], mlp_forward(params, "pi", x, "elu")))
        True
    """

    def __init__(self, params: Mapping[str, np.ndarray], prefix: str, activation: str, out_activation: bool = False):
        keys = mlp_keys(params, prefix)
        self.layers = [Dense(params, key, activation if (j < len(keys) - 1 or out_activation) else None)
                       for j, key in enumerate(keys)]

    @property
    def keys(self) -> list[str]:
        """The parameter keys in PyTorch's ``parameters()`` order (weight, bias per layer)."""
        return [k for layer in self.layers for k in (layer.wkey, layer.bkey)]

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list[Any]]:
        caches = []
        for layer in self.layers:
            x, cache = layer.forward(x)
            caches.append(cache)
        return x, caches

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.predict(x)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The output alone (no cache for a backward pass): what a target network needs."""
        for layer in self.layers:
            x = layer.predict(x)
        return x

    def backward(self, grad_y: np.ndarray, caches: list[Any], grads: dict[str, np.ndarray],
                 need_input: bool = False, params: bool = True) -> np.ndarray | None:
        """Add every layer's gradients to ``grads`` (``params=False``: none, only ``dL/dx``); ``dL/dx`` with
        ``need_input=True``."""
        g: np.ndarray | None = grad_y
        last = len(self.layers) - 1
        for j in range(last, -1, -1):
            assert g is not None
            g = self.layers[j].backward(g, caches[j], grads, need_input=need_input or j > 0, params=params,
                                        own=j < last)  # below the last layer g is the layer above's dL/dx
        return g


# --------------------------------------------------------------------------- optimiser steps

def total_norm(grads: Sequence[np.ndarray]) -> float:
    """The 2-norm of all ``grads`` together (as ``torch.nn.utils.get_total_norm``: the norm of the norms)."""
    if len(grads) == 1 and grads[0].ndim == 1 and grads[0].dtype in (np.float32, np.float64):
        norm = np.sqrt(np.dot(grads[0], grads[0]))  # one flat gradient: the same numbers, no arrays built
        return float(np.sqrt(norm * norm))
    norms = np.array([np.sqrt(np.dot(g.ravel(), g.ravel())) for g in grads], dtype=grads[0].dtype if grads else None)
    return float(np.sqrt(np.dot(norms, norms)))


def clip_grad_norm(grads: Sequence[np.ndarray], max_norm: float | None) -> float:
    """Scale ``grads`` in place to a total norm of at most ``max_norm`` (``torch.nn.utils.clip_grad_norm_``:
    by ``min(1, max_norm / (norm + 1e-6))``); returns the norm before clipping. None: no clipping.

    Example:
        >>> g = [np.array([3.0, 4.0], np.float32)]
        >>> clip_grad_norm(g, 1.0), [round(float(v), 4) for v in g[0]]
        (5.0, [0.6, 0.8])
    """
    norm = total_norm(grads)
    if max_norm is not None and math.isfinite(norm):
        coef = min(1.0, float(max_norm) / (norm + 1e-6))
        if coef < 1.0:
            for g in grads:
                g *= g.dtype.type(coef)
    return norm


def polyak(target: Sequence[np.ndarray], source: Sequence[np.ndarray], tau: float | None) -> None:
    """Copy ``source`` into ``target`` (``tau=None``) or move ``target`` ``tau`` of the way, in place."""
    for t, s in zip(target, source, strict=True):
        if tau is None:
            np.copyto(t, s)
        else:
            t += t.dtype.type(tau) * (s - t)


def flat_view(arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """One 1-D array over all of ``arrays`` when they lie back to back in one buffer (in order, C-contiguous,
    one dtype), else None: an optimiser then writes every parameter with one operation."""
    if not arrays:
        return None
    owner = arrays[0].base
    if not isinstance(owner, np.ndarray) or owner.ndim != 1 or not owner.flags.c_contiguous:
        return None
    item = owner.itemsize
    start = (arrays[0].ctypes.data - owner.ctypes.data) // item
    at = start
    for a in arrays:
        if a.base is not owner or a.dtype != owner.dtype or not a.flags.c_contiguous \
                or a.ctypes.data != owner.ctypes.data + at * item:
            return None
        at += a.size
    return owner[start:at]


class Adam:
    """``torch.optim.Adam`` (``betas=(0.9, 0.999)``, ``eps=1e-8``, no weight decay) over numpy arrays,
    updated in place.

    The moments are created at the first step (torch keeps no slots before it); each parameter
    keeps its own step count, as torch does. The moments of all parameters are one flat array, and
    parameters that lie back to back in one buffer (:func:`flat_view`, as
    :class:`~marl_note.agents.numpy.networks.NumpyNetworks` lays out a network) are written with one
    operation: a small network's step costs a handful of numpy calls, not a dozen per array.
    :meth:`state` / :meth:`load` use torch's flattened state-dict names: ``{i}.step``,
    ``{i}.exp_avg``, ``{i}.exp_avg_sq`` per parameter index ``i``.

    Example:
        >>> p = np.array([1.0, -1.0], np.float32)
        >>> opt = Adam([p], lr=0.1)
        >>> opt.step([np.array([0.5, -2.0], np.float32)])
        >>> [round(float(x), 4) for x in p]
        [0.9, -0.9]
    """

    def __init__(self, params: Sequence[np.ndarray], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params = list(params)
        self.lr = float(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.steps: list[int] = [0] * len(self.params)
        sizes = [p.size for p in self.params]
        self._bounds = np.cumsum([0, *sizes]).tolist()
        self._flat = flat_view(self.params)
        self._dtype = self.params[0].dtype if self.params else np.dtype(np.float32)
        self._m: np.ndarray | None = None  # flat moments, None before the first step
        self._v: np.ndarray | None = None
        self._scratch: np.ndarray | None = None  # one flat temporary, reused by every step

    def _slot(self, flat: np.ndarray | None, i: int) -> np.ndarray | None:
        return None if flat is None else flat[self._bounds[i]:self._bounds[i + 1]].reshape(self.params[i].shape)

    @property
    def exp_avg(self) -> list[np.ndarray | None]:
        return [self._slot(self._m, i) for i in range(len(self.params))]

    @property
    def exp_avg_sq(self) -> list[np.ndarray | None]:
        return [self._slot(self._v, i) for i in range(len(self.params))]

    def step(self, grads: Sequence[np.ndarray]) -> None:
        """One update of every parameter with its gradient in ``grads`` (same order as the parameters)."""
        if len(grads) != len(self.params):
            raise ValueError(f"Adam has {len(self.params)} parameters, got {len(grads)} gradients")
        self.step_flat(np.concatenate([np.ravel(g) for g in grads]))

    def step_flat(self, flat_g: np.ndarray) -> None:
        """One update of every parameter from one flat gradient (the parameters' gradients raveled, in order)."""
        if flat_g.shape != (self._bounds[-1],):
            raise ValueError(f"Adam has {self._bounds[-1]} weights, got a gradient of {flat_g.size}")
        dtype = self._dtype.type
        if self._m is None or self._v is None:
            self._m = np.zeros(self._bounds[-1], self._dtype)
            self._v = np.zeros(self._bounds[-1], self._dtype)
        m, v = self._m, self._v
        steps = [t + 1 for t in self.steps]
        if self._flat is not None and len(set(steps)) == 1 and adam_update(
                self._flat, flat_g, m, v, self.betas, self.eps, self.lr, steps[0]):
            self.steps = steps  # one compiled loop (Numba), the same bits as the passes below
            return
        work = self._dtype if flat_g.dtype == self._dtype else np.result_type(flat_g, self._m)
        if self._scratch is None or self._scratch.dtype != work:
            self._scratch = np.empty(self._bounds[-1], work)
        tmp = self._scratch
        b1, b2 = self.betas
        # torch's m.lerp_(g, 1 - b1) and v.mul_(b2).addcmul_(g, g, 1 - b2), in place through one scratch array
        np.subtract(flat_g, m, out=tmp)
        np.multiply(dtype(1.0 - b1), tmp, out=tmp)
        m += tmp
        v *= dtype(b2)
        np.multiply(flat_g, flat_g, out=tmp)
        np.multiply(dtype(1.0 - b2), tmp, out=tmp)
        v += tmp
        self.steps = steps
        if len(set(self.steps)) == 1:  # one step count (always, unless a loaded state had several)
            update = self._update(m, v, self.steps[0], out=tmp if tmp.dtype == self._dtype else None)
        else:
            update = np.concatenate([self._update(m[a:b], v[a:b], t)
                                     for a, b, t in zip(self._bounds, self._bounds[1:], self.steps)])
        if self._flat is not None:
            self._flat -= update
        else:
            for i, p in enumerate(self.params):
                p -= update[self._bounds[i]:self._bounds[i + 1]].reshape(p.shape)

    def _update(self, m: np.ndarray, v: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """torch's ``step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` with ``step_size = lr / (1 - b1^t)``
        (written into ``out`` when given)."""
        b1, b2 = self.betas
        dtype = self._dtype.type
        denom = np.sqrt(v, out=out)
        denom /= dtype(math.sqrt(1.0 - b2 ** t))
        denom += dtype(self.eps)
        update = np.divide(m, denom, out=denom)
        update *= dtype(self.lr / (1.0 - b1 ** t))
        return update

    # -- numpy state -----------------------------------------------------------------------------
    def state(self, prefix: str) -> dict[str, np.ndarray]:
        """``{prefix}.lr`` and, after the first step, each parameter's slots (torch's names and dtypes)."""
        out = {f"{prefix}.lr": np.asarray(self.lr, np.float64)}
        if self._m is None:
            return out
        for i, (t, m, v) in enumerate(zip(self.steps, self.exp_avg, self.exp_avg_sq)):
            assert m is not None and v is not None
            out[f"{prefix}.{i}.step"] = np.asarray(t, np.float32)
            out[f"{prefix}.{i}.exp_avg"] = m.copy()
            out[f"{prefix}.{i}.exp_avg_sq"] = v.copy()
        return out

    def load(self, prefix: str, state: Mapping[str, Any]) -> None:
        """Take the slots and learning rate saved under ``prefix`` by any backend (checked before anything
        changes: every slot's shape, and complete slots for the parameters that have any). A parameter
        without slots starts from zero moments and step 0."""
        slots: dict[int, dict[str, np.ndarray]] = {}
        for key, value in state.items():
            if not key.startswith(prefix + ".") or key == f"{prefix}.lr":
                continue
            idx, slot = key[len(prefix) + 1:].split(".", 1)
            slots.setdefault(int(idx), {})[slot] = np.asarray(value)
        for i, found in slots.items():
            if not 0 <= i < len(self.params) or set(found) != {"step", "exp_avg", "exp_avg_sq"}:
                raise KeyError(f"state_dict has optimiser slots {sorted(found)} for parameter {i} of {prefix}, which "
                               f"has {len(self.params)} parameters (each needs step, exp_avg, exp_avg_sq)")
            for slot in ("exp_avg", "exp_avg_sq"):
                if found[slot].shape != self.params[i].shape:
                    raise ValueError(f"{prefix}.{i}.{slot} has shape {found[slot].shape}, this network expects "
                                     f"{self.params[i].shape}")
        if not slots:
            self._m = self._v = None
            self.steps = [0] * len(self.params)
        else:
            m = np.zeros(self._bounds[-1], self._dtype)
            v = np.zeros(self._bounds[-1], self._dtype)
            for i in range(len(self.params)):
                mine = slots.get(i)
                self.steps[i] = 0 if mine is None else int(float(mine["step"]))
                if mine is not None:
                    a, b = self._bounds[i], self._bounds[i + 1]
                    m[a:b] = np.ravel(mine["exp_avg"])
                    v[a:b] = np.ravel(mine["exp_avg_sq"])
            self._m, self._v = m, v
        if f"{prefix}.lr" in state:
            self.lr = float(np.asarray(state[f"{prefix}.lr"]))
