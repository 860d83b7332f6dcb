"""Network weights in numpy: initialisation for both backends, and a numpy forward pass.

Every agent's weights are drawn here, from the agent's own ``numpy.random.Generator``, and handed
to the backend that builds the network, so a PyTorch and a TensorFlow agent with the same seed
start from the same weights and neither backend carries the other's random-number generator.

Weights use PyTorch's layout and names: an MLP is a ``torch.nn.Sequential`` of ``Linear`` layers
with activations between them, so Linear layer ``j`` is module ``2 * j`` and its arrays are
``{prefix}.{2j}.weight`` (``[out, in]``) and ``{prefix}.{2j}.bias`` (``[out]``).

A conv torso in front of a network ``prefix`` is a ``Conv2d -> act -> ...`` stack (every layer
activated, then flattened in PyTorch's ``C, H, W`` order) under ``{prefix}.conv.{2j}.weight``
(``[out, in, kh, kw]``) and ``.bias``; the network's own layers keep their names.

Before drawing a network, :func:`mlp_weights` and :func:`conv_weights` count its weights and
refuse one that cannot be trained in the machine's available memory with an
:class:`~marl_note.replay.memory.InsufficientMemoryError` naming ``hidden_sizes`` (the replay
buffers' check, :mod:`marl_note.replay.memory`): each weight takes at least
:data:`TRAINING_BYTES_PER_WEIGHT` bytes while training (the numpy draw, the framework's copy, its
gradient and Adam's two moments, all float32; target networks and acting copies come on top).

Example:
    >>> import numpy as np
    >>> w = mlp_weights("q_net", 4, (8,), 2, np.random.default_rng(0))
    >>> {k: v.shape for k, v in w.items()}
    {'q_net.0.weight': (8, 4), 'q_net.0.bias': (8,), 'q_net.2.weight': (2, 8), 'q_net.2.bias': (2,)}
    >>> mlp_forward(w, "q_net", np.zeros((3, 4), np.float32), "relu").shape
    (3, 2)
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from marl_note.replay.memory import check_memory

__all__ = ["ACTIVATIONS", "INITS", "TRAINING_BYTES_PER_WEIGHT", "activate", "init_linear", "mlp_weights",
           "mlp_forward", "check_hidden_sizes", "check_network_fits", "conv_weights", "conv_forward", "mlp_size",
           "torso_weights"]

ACTIVATIONS = ("relu", "tanh", "elu", "gelu")
INITS = ("default", "orthogonal")
# float32 bytes per weight while training, at least: the numpy draw, the framework's copy, its gradient,
# Adam's two moments (the draw's float64 temporary of one layer at a time fits within the last two)
TRAINING_BYTES_PER_WEIGHT = 5 * 4


def check_hidden_sizes(hidden_sizes: Iterable[int]) -> tuple[int, ...]:
    """``hidden_sizes`` as a tuple of positive ints, or a ValueError."""
    try:
        sizes = tuple(int(h) for h in hidden_sizes)
    except (TypeError, ValueError):
        raise ValueError(f"hidden_sizes must be a sequence of positive integers, got {hidden_sizes!r}") from None
    if any(h <= 0 for h in sizes):
        raise ValueError(f"hidden_sizes must be positive, got {sizes}")
    return sizes


def mlp_size(in_dim: int, hidden_sizes: Iterable[int], out_dim: int | None) -> int:
    """The number of weights (and biases) of the MLP ``in_dim -> hidden_sizes -> [out_dim]``, without drawing it.

    Example:
        >>> mlp_size(4, (8,), 2)  # 4 * 8 + 8 + 8 * 2 + 2
        58
    """
    sizes = [int(in_dim), *check_hidden_sizes(hidden_sizes)] + ([int(out_dim)] if out_dim is not None else [])
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


def check_network_fits(weights: int, what: str, available: int | None = None,
                       advice: str = "lower hidden_sizes (or the input size)") -> None:
    """Refuse (before drawing) a network of ``weights`` weights that cannot be trained in the available memory.

    Raises :class:`~marl_note.replay.memory.InsufficientMemoryError` naming ``what`` (the network
    and its ``hidden_sizes``) when :data:`TRAINING_BYTES_PER_WEIGHT` bytes per weight exceed the
    machine's available memory (``available``, default: what the machine reports), and warns above
    half of it; the message ends in ``advice``.

    Example:
        >>> check_network_fits(mlp_size(4, (8,), 2), "network q_net", available=8 * 10**9)  # 58 weights fit
        >>> check_network_fits(mlp_size(4, (100_000, 100_000), 2), "network q_net", available=8 * 10**9)
        Traceback (most recent call last):
        ...
        marl_note.replay.memory.InsufficientMemoryError: network q_net has 10,000,800,002 weights: training them \
needs 200 GB, but only 8 GB of memory is available on this machine; lower hidden_sizes ...
    """
    check_memory(weights * TRAINING_BYTES_PER_WEIGHT, f"{what} has {weights:,} weights: training them",
                 f"{advice}: each weight takes at least {TRAINING_BYTES_PER_WEIGHT} "
                 f"bytes while training (float32: the numpy draw, the framework's copy, its gradient and Adam's two "
                 f"moments)",
                 available=available, stacklevel=5)


def init_linear(fan_in: int, fan_out: int, rng: np.random.Generator, init: str = "default",
                gain: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Weight ``[out, in]`` and bias ``[out]`` (float32).

    ``"default"``: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both (PyTorch's ``Linear`` default);
    ``"orthogonal"``: an orthogonal weight times ``gain`` (QR of a Gaussian matrix, signs fixed by
    diag(R)) and a zero bias, as is usual for PPO.
    """
    if init == "default":
        bound = 1.0 / math.sqrt(fan_in)
        return (rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                rng.uniform(-bound, bound, fan_out).astype(np.float32))
    if init == "orthogonal":
        flat = rng.standard_normal((fan_out, fan_in))
        if fan_out < fan_in:
            flat = flat.T
        q, r = np.linalg.qr(flat)
        q = q * np.sign(np.diag(r))
        if fan_out < fan_in:
            q = q.T
        return (gain * q).astype(np.float32), np.zeros(fan_out, np.float32)
    raise ValueError(f"unknown init {init!r}; use one of {list(INITS)}")


def mlp_weights(prefix: str, in_dim: int, hidden_sizes: Iterable[int], out_dim: int | None,
                rng: np.random.Generator, init: str = "default", out_gain: float = 1.0) -> dict[str, np.ndarray]:
    """Weights of ``Linear -> act -> ... [-> Linear(out_dim)]``, hidden layers with gain sqrt(2).

    A network too large to train in the available memory is refused before any layer is drawn
    (:func:`check_network_fits`).
    """
    sizes = list(check_hidden_sizes(hidden_sizes))
    check_network_fits(mlp_size(in_dim, sizes, out_dim),
                       f"network {prefix} (hidden_sizes={tuple(sizes)} on {int(in_dim)} inputs)")
    layers = [(h, math.sqrt(2)) for h in sizes] + ([(int(out_dim), out_gain)] if out_dim is not None else [])
    out, last = {}, int(in_dim)
    for j, (units, gain) in enumerate(layers):
        w, b = init_linear(last, units, rng, init, gain)
        out[f"{prefix}.{2 * j}.weight"], out[f"{prefix}.{2 * j}.bias"] = w, b
        last = units
    return out


def activate(x: np.ndarray, name: str) -> np.ndarray:
    """The activation ``name`` (one of :data:`ACTIVATIONS`) applied to ``x`` in numpy."""
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "tanh":
        return np.tanh(x)
    if name == "elu":
        return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))
    if name == "gelu":  # the exact (erf) form, as torch.nn.GELU() and keras' default
        from math import erf
        return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[x.dtype])(x / math.sqrt(2.0)))
    raise ValueError(f"unknown activation {name!r}; choose one of {list(ACTIVATIONS)}")


def mlp_forward(weights: Mapping[str, np.ndarray], prefix: str, x: np.ndarray, activation: str) -> np.ndarray:
    """The MLP ``prefix`` of ``weights`` applied to ``x`` ``[B, in]`` in numpy (no activation at the end)."""
    j = 0
    while f"{prefix}.{2 * j}.weight" in weights:
        if j:
            x = activate(x, activation)
        x = x @ weights[f"{prefix}.{2 * j}.weight"].T + weights[f"{prefix}.{2 * j}.bias"]
        j += 1
    if j == 0:
        raise KeyError(f"no layers named {prefix}.0.weight in the weights")
    return x


def conv_weights(prefix: str, in_channels: int, layers, rng: np.random.Generator, init: str = "default"
                 ) -> dict[str, np.ndarray]:
    """Weights of the conv torso ``{prefix}.conv``: ``layers`` are ``(channels, kernel, stride, padding)``.

    ``"default"`` draws PyTorch's ``Conv2d`` default (U(+-1/sqrt(in * k * k)) for weight and bias),
    ``"orthogonal"`` an orthogonal ``[out, in * k * k]`` matrix with gain sqrt(2) and zero biases.

    Example:
        >>> w = conv_weights("q_net", 2, ((4, 3, 1, 1),), np.random.default_rng(0))
        >>> {k: v.shape for k, v in w.items()}
        {'q_net.conv.0.weight': (4, 2, 3, 3), 'q_net.conv.0.bias': (4,)}
    """
    sizes = [int(in_channels), *(int(layer[0]) for layer in layers)]
    check_network_fits(sum((a * k * k + 1) * b for a, b, (_, k, _, _) in zip(sizes, sizes[1:], layers)),
                       f"conv torso {prefix}.conv (conv_layers={tuple(tuple(layer) for layer in layers)})",
                       advice="use fewer or narrower conv_layers")
    out, last = {}, int(in_channels)
    for j, (channels, k, _, _) in enumerate(layers):
        w, b = init_linear(last * k * k, channels, rng, init, math.sqrt(2))
        out[f"{prefix}.conv.{2 * j}.weight"] = w.reshape(channels, last, k, k)
        out[f"{prefix}.conv.{2 * j}.bias"] = b
        last = channels
    return out


def torso_weights(prefix: str, encoder, rng: np.random.Generator, init: str = "default"
                  ) -> tuple[dict[str, np.ndarray], int]:
    """``(conv torso weights, width of the MLP input)`` of network ``prefix`` over ``encoder``'s
    observations: no weights and the flat width for an MLP torso."""
    if encoder.image_shape is None:
        return {}, int(encoder.dim)
    return conv_weights(prefix, encoder.image_shape[2], encoder.conv_layers, rng, init), encoder.conv_out_dim


def conv_forward(weights: Mapping[str, np.ndarray], prefix: str, x: np.ndarray, layers, activation: str
                 ) -> np.ndarray:
    """The conv torso ``{prefix}.conv`` on images ``x`` ``[B, H, W, C]`` in numpy: ``[B, C' * H' * W']``.

    Example:
        >>> w = conv_weights("q_net", 2, ((4, 3, 1, 1),), np.random.default_rng(0))
        >>> conv_forward(w, "q_net", np.ones((5, 6, 7, 2), np.float32), ((4, 3, 1, 1),), "relu").shape
        (5, 168)
    """
    from numpy.lib.stride_tricks import sliding_window_view

    h = np.asarray(x, np.float32)
    for j, (_, k, s, p) in enumerate(layers):
        if p:
            h = np.pad(h, ((0, 0), (p, p), (p, p), (0, 0)))
        win = sliding_window_view(h, (k, k), axis=(1, 2))[:, ::s, ::s]  # [B, H', W', C, kh, kw]
        w = weights[f"{prefix}.conv.{2 * j}.weight"]  # [out, C, kh, kw]
        h = activate(np.tensordot(win, w, axes=([3, 4, 5], [1, 2, 3])) + weights[f"{prefix}.conv.{2 * j}.bias"],
                     activation)
    return np.ascontiguousarray(h.transpose(0, 3, 1, 2)).reshape(len(h), -1)
