"""A published numpy copy of an agent's acting networks: versioned weights and a numpy forward pass.

A built-in agent acts through matrix products in numpy instead of a framework call (about ten
times faster on the small batches a collector hands it), and the same object is what an actor
without any framework needs: plain numpy arrays in PyTorch's names and layouts
(:mod:`marl_note.agents.networks`) plus the ``version`` of the networks they were copied from.

The agent owns the copy and refreshes it lazily: its networks count every change of their weights
(an optimiser step, a target sync, a loaded state), and the agent re-exports the acting weights the
first time it acts after the count moved, so the copy is never stale and costs one weight copy per
update round, not one per step.

A network is named by ``(kind, prefix)``:

- ``"mlp"``: ``Linear -> act -> ... -> Linear`` under ``{prefix}.{2j}.weight/bias``;
- ``"dueling"``: a torso ``{prefix}.torso.*`` (every layer activated) under the heads
  ``{prefix}.value`` and ``{prefix}.advantage``, ``Q = V + A - mean_a A``;
- ``"shared"``: an optional trunk ``{prefix}.trunk.*`` (every layer activated) under the MLP
  ``{prefix}.pi`` (PPO's actor with ``shared=True``).

Each may sit behind a conv torso ``{prefix}.conv.*`` (``conv``: its layers, channels-last images
in, see :func:`~marl_note.agents.networks.conv_forward`), or all behind one (``conv_prefix``).

Example:
    >>> import numpy as np
    >>> from marl_note.agents.networks import mlp_weights
    >>> w = mlp_weights("q_net", 3, (4,), 2, np.random.default_rng(0))
    >>> policy = NumpyPolicy({"q": ("mlp", "q_net")}, "relu")
    >>> policy.version
    -1
    >>> policy.load(w, version=7)
    >>> policy.forward("q", np.ones((5, 3))).shape, policy.version
    ((5, 2), 7)
    >>> from marl_note.agents.networks import mlp_forward
    >>> bool(np.allclose(policy.forward("q", np.ones((1, 3))), mlp_forward(w, "q_net", np.ones((1, 3)), "relu")))
    True
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from marl_note.agents.networks import ACTIVATIONS, activate, conv_forward

__all__ = ["NumpyPolicy", "KINDS", "named_by"]

KINDS = ("mlp", "dueling", "shared")

_Layers = list[tuple[np.ndarray, np.ndarray]]  # (weight transposed [in, out], bias [out]) per Linear


def named_by(prefixes: tuple[str, ...], key: str, module: bool = False) -> bool:
    """Whether weight ``key`` is one of ``prefixes`` or lies under one (``module=True``: whether
    module ``key`` may hold such a weight, i.e. also when a prefix lies under it).

    Example:
        >>> named_by(("net.pi", "net.log_std"), "net.pi.0.weight"), named_by(("net.pi",), "net.v.0.bias")
        (True, False)
        >>> named_by(("net.pi",), "net", module=True), named_by(("actor",), "actor_target", module=True)
        (True, False)
    """
    return any(key == p or key.startswith(p + ".") or (module and p.startswith(key + ".")) for p in prefixes)


def _layers(weights: Mapping[str, np.ndarray], prefix: str) -> _Layers:
    out, j = [], 0
    while f"{prefix}.{2 * j}.weight" in weights:
        out.append((np.ascontiguousarray(weights[f"{prefix}.{2 * j}.weight"].T), weights[f"{prefix}.{2 * j}.bias"]))
        j += 1
    return out


def _affine(h: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``h @ w + b`` with the bias added in place (the same float32 sums, one array fewer)."""
    out = h @ w
    out += b
    return out


class NumpyPolicy:
    """Versioned numpy weights of named acting networks and their forward pass (float32 in, float32 out).

    ``nets`` maps an output name to ``(kind, weight prefix)`` (see the module docstring);
    ``activation`` is the hidden layers' activation; ``extra`` names further arrays to copy along
    (PPO's ``net.log_std``). ``weights`` (a dict of float32 arrays) and
    ``version`` (the networks' change count they were copied at, -1 before the first ``load``) are
    all there is to send to another process: ``state()`` gives them as numpy arrays.
    """

    def __init__(self, nets: Mapping[str, tuple[str, str]], activation: str, extra: tuple[str, ...] = (),
                 conv: tuple[tuple[int, int, int, int], ...] | None = None, conv_prefix: str | None = None):
        for name, (kind, _) in nets.items():
            if kind not in KINDS:
                raise ValueError(f"network {name!r} has unknown kind {kind!r}; use one of {list(KINDS)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}")
        self.nets = dict(nets)
        self.extra = tuple(extra)
        self.conv = tuple(conv) if conv else None
        self.conv_prefix = conv_prefix  # one conv torso under every net (else each net's ``{prefix}.conv``)
        self.activation = activation
        self.weights: dict[str, np.ndarray] = {}
        self.version = -1
        self._plans: dict[str, tuple[_Layers, _Layers, _Layers]] = {}

    @property
    def prefixes(self) -> tuple[str, ...]:
        """The weight prefixes to export: each net's ``prefix``, then the ``extra`` arrays' names."""
        return tuple(prefix for _, prefix in self.nets.values()) + self.extra

    def load(self, weights: Mapping[str, np.ndarray], version: int) -> None:
        """Take a float32 copy of ``weights`` (the arrays under :attr:`prefixes`) as the copy at
        networks version ``version``."""
        own = {k: np.array(v, np.float32) for k, v in weights.items()}
        plans: dict[str, tuple[_Layers, _Layers, _Layers]] = {}
        for name, (kind, prefix) in self.nets.items():
            if kind == "mlp":
                plans[name] = ([], _layers(own, prefix), [])
            elif kind == "dueling":
                heads = [(np.ascontiguousarray(own[f"{prefix}.{h}.weight"].T), own[f"{prefix}.{h}.bias"])
                         for h in ("value", "advantage")]
                plans[name] = (_layers(own, f"{prefix}.torso"), [], heads)
            else:
                plans[name] = (_layers(own, f"{prefix}.trunk"), _layers(own, f"{prefix}.pi"), [])
            if not any(plans[name]):
                raise KeyError(f"no weights under {prefix!r} for network {name!r}")
        self.weights, self._plans, self.version = own, plans, int(version)

    def forward(self, name: str, x: np.ndarray) -> np.ndarray:
        """Network ``name`` on ``x`` ``[B, in]`` (cast to float32): float32 ``[B, out]``."""
        torso, mlp, heads = self._plans[name]
        h = np.asarray(x, np.float32)
        if self.conv is not None:
            prefix = self.conv_prefix or f"{self.nets[name][1]}.conv"
            h = conv_forward(self.weights, prefix.removesuffix(".conv"), h, self.conv, self.activation)
        for w, b in torso:
            h = self._activate(_affine(h, w, b))
        for j, (w, b) in enumerate(mlp):
            if j:
                h = self._activate(h)
            h = _affine(h, w, b)
        if heads:
            (wv, bv), (wa, ba) = heads
            adv = h @ wa + ba
            h = (h @ wv + bv) + adv - adv.mean(axis=1, keepdims=True)
        return h

    def _activate(self, h: np.ndarray) -> np.ndarray:
        """The hidden activation of ``h``, a layer's fresh output (ReLU overwrites it: no new array)."""
        if self.activation == "relu":
            return np.maximum(h, 0.0, out=h)
        return activate(h, self.activation)

    def state(self) -> dict[str, np.ndarray]:
        """The weights and the version, numpy arrays only."""
        return {**self.weights, "version": np.asarray(self.version, np.int64)}

    def __repr__(self) -> str:
        return f"NumpyPolicy({self.nets}, {self.activation!r}, version={self.version})"

