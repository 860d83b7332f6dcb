"""The TensorFlow side of an agent: Keras models built from numpy weights, Adam, numpy state.

:class:`TFNetworks` mirrors :class:`marl_note.agents.torch.networks.TorchNetworks` at the numpy
seam: the same names, the same ``state_dict`` keys and layouts (Dense kernels are stored
transposed, as PyTorch's ``[out, in]`` weights), an Adam with PyTorch's update rule. An
algorithm's subclass adds forward passes on numpy input and a ``train_step`` built with
:meth:`TFNetworks.function` (a ``tf.function`` with a fixed signature; XLA with ``compile=True``).

Example:
    >>> import numpy as np
    >>> from marl_note.agents.networks import mlp_weights
    >>> nets = TFNetworks()
    >>> q = nets.mlp("q_net", mlp_weights("q_net", 3, (4,), 2, np.random.default_rng(0)), "relu")
    >>> opt = nets.adam("optimizer", ["q_net"], lr=1e-3)
    >>> sorted(nets.state_dict())[:3], nets.weight_names
    (['optimizer.lr', 'q_net.0.bias', 'q_net.0.weight'], ('q_net',))
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.networks import ACTIVATIONS
from marl_note.agents.numpy_policy import named_by
from marl_note.agents.tf.common import (
    Adam,
    check_finite_update,
    graph_function,
    guarded_apply,
    optimizer_from_numpy,
    optimizer_slot_shapes,
    optimizer_to_numpy,
    params_from_numpy,
    params_to_numpy,
    tf_device,
)
from marl_note.agents.tf.distribute import (
    active_strategy,
    check_strategy,
    in_replica_step,
    read_replica_noise,
    reduced_apply,
    replica_noise_variable,
    replicated_function,
)

__all__ = ["TFNetworks", "keras_mlp", "ConvTorso", "ConvMLP", "UserMLP"]


def _user_layer(factory: Any, shape: tuple[int, ...]):
    layer = factory(tuple(shape))
    if not isinstance(layer, keras.layers.Layer):
        raise TypeError(f"the torso factory returned a {type(layer).__name__}, expected a Keras layer or model")
    return layer


def keras_mlp(prefix: str, weights: Mapping[str, np.ndarray], activation: str):
    """A ``keras.Sequential`` of Dense layers holding ``{prefix}.{2j}.weight/bias`` of ``weights``.

    Returns ``(model, params)``, ``params`` being ``(torch key, variable, transposed)`` triples.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}")
    arrays = []
    j = 0
    while f"{prefix}.{2 * j}.weight" in weights:
        arrays.append((np.asarray(weights[f"{prefix}.{2 * j}.weight"], np.float32),
                       np.asarray(weights[f"{prefix}.{2 * j}.bias"], np.float32)))
        j += 1
    if not arrays:
        raise KeyError(f"no layers named {prefix}.0.weight in the weights")
    layers = [keras.layers.Dense(w.shape[0], activation=activation if k < len(arrays) - 1 else None,
                                 kernel_initializer="zeros", bias_initializer="zeros", dtype="float32")
              for k, (w, _) in enumerate(arrays)]
    model = keras.Sequential([keras.Input((arrays[0][0].shape[1],), dtype="float32"), *layers])
    params = []
    for k, (layer, (w, b)) in enumerate(zip(layers, arrays, strict=True)):
        layer.kernel.assign(w.T)
        layer.bias.assign(b)
        params += [(f"{prefix}.{2 * k}.weight", layer.kernel, True), (f"{prefix}.{2 * k}.bias", layer.bias, False)]
    return model, params


class ConvTorso:
    """``conv -> act -> ...`` on channels-last images ``[B, H, W, C]``, flattened in PyTorch's ``C, H, W`` order.

    Holds ``{prefix}.{2j}.weight/bias`` (``layers``: channels, kernel, stride, padding). Each kernel
    variable is kept as ``[kw, kh, in, out]``, whose transpose is PyTorch's ``[out, in, kh, kw]``, so
    the ``(torch key, variable, transposed)`` params read and write it like a Dense kernel.
    """

    def __init__(self, prefix: str, weights: Mapping[str, np.ndarray], layers: Sequence[tuple[int, int, int, int]],
                 activation: str):
        self.layers = tuple(layers)
        self.activation = keras.activations.get(activation)
        self.kernels, self.biases, self.params = [], [], []
        for j in range(len(self.layers)):
            w = np.asarray(weights[f"{prefix}.{2 * j}.weight"], np.float32)
            b = np.asarray(weights[f"{prefix}.{2 * j}.bias"], np.float32)
            kernel, bias = tf.Variable(w.T, dtype=tf.float32), tf.Variable(b, dtype=tf.float32)
            self.kernels.append(kernel)
            self.biases.append(bias)
            self.params += [(f"{prefix}.{2 * j}.weight", kernel, True), (f"{prefix}.{2 * j}.bias", bias, False)]

    def __call__(self, x):
        h = x
        for kernel, bias, (_, _, stride, pad) in zip(self.kernels, self.biases, self.layers, strict=True):
            if pad:
                h = tf.pad(h, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
            h = self.activation(tf.nn.conv2d(h, tf.transpose(kernel, [1, 0, 2, 3]), stride, "VALID") + bias)
        return tf.reshape(tf.transpose(h, [0, 3, 1, 2]), [tf.shape(h)[0], -1])


class ConvMLP:
    """A :class:`ConvTorso` ``{prefix}.conv`` under the Keras MLP ``{prefix}`` (PyTorch's parameter order)."""

    def __init__(self, prefix: str, weights: Mapping[str, np.ndarray], activation: str,
                 layers: Sequence[tuple[int, int, int, int]]):
        self.conv = ConvTorso(f"{prefix}.conv", weights, layers, activation)
        self.mlp, mlp_params = keras_mlp(prefix, weights, activation)
        self.in_dim = int(np.asarray(weights[f"{prefix}.0.weight"]).shape[1])
        self.params = self.conv.params + mlp_params

    def __call__(self, x, training: bool = False):
        return self.mlp(tf.reshape(self.conv(x), [-1, self.in_dim]), training=training)


class UserMLP:
    """A user-supplied Keras torso ``{prefix}.user`` (its trainable weights, in order, as
    ``{prefix}.user.{i}``) under the Keras MLP ``{prefix}``."""

    def __init__(self, prefix: str, weights: Mapping[str, np.ndarray], activation: str, torso: Any,
                 shape: tuple[int, ...]):
        self.torso = torso
        torso(tf.zeros((1, *shape), tf.float32))  # builds its weights
        self.mlp, mlp_params = keras_mlp(prefix, weights, activation)
        self.in_dim = int(np.asarray(weights[f"{prefix}.0.weight"]).shape[1])
        self.params = [(f"{prefix}.user.{i}", v, False) for i, v in enumerate(torso.trainable_weights)] + mlp_params

    def __call__(self, x, training: bool = False):
        return self.mlp(tf.reshape(self.torso(x, training=training), [-1, self.in_dim]), training=training)


class TFNetworks:
    """Named Keras models and optimisers of one agent; numpy in, numpy out.

    ``strategy`` (default: the strategy whose ``scope()`` builds them, if any) runs every step made
    with :meth:`function` on each of its replicas (see :mod:`marl_note.agents.tf.distribute`);
    build the networks inside ``strategy.scope()``.
    """

    numpy_conv_acting = True  # conv torsos act in numpy too: as fast as a traced TF call, or faster

    def __init__(self, device: Any = "cpu", compile: bool = False, strategy: Any = None):
        self.device = tf_device(device)
        self.compile = bool(compile)
        self.strategy = check_strategy(strategy) or active_strategy()
        self.models: dict[str, Any] = {}
        self.params: dict[str, list] = {}  # name -> [(torch key, variable, transposed)]
        self.optimizers: dict[str, list] = {}  # name -> [optimizer, params, lr]
        self.version = 0  # counts weight changes (train steps, syncs, loads): the numpy copy's freshness
        self._replica_noise: dict[str, Any] = {}  # optimizer name -> its steps' noise record (several replicas)
        self._sync_graphs: dict[tuple[str, str, bool], Any] = {}  # eager syncs: a call count, then a graph

    # -- building --------------------------------------------------------------------------------------
    def mlp(self, name: str, weights: Mapping[str, np.ndarray], activation: str,
            conv: Sequence[tuple[int, int, int, int]] | None = None):
        """Register and return the Keras MLP ``name`` built from ``weights``, behind a conv torso
        ``{name}.conv`` with ``conv`` layers (channels, kernel, stride, padding) when given."""
        with tf.device(self.device):
            if conv:
                net = ConvMLP(name, weights, activation, conv)
                model, params = net, net.params
            else:
                model, params = keras_mlp(name, weights, activation)
        self.models[name], self.params[name] = model, params
        return model

    def user_mlp(self, name: str, weights: Mapping[str, np.ndarray], activation: str, user: Any) -> UserMLP:
        """Register and return the MLP ``name`` behind a user-supplied torso: ``user`` is
        ``(factory, input shape, seed)``, ``factory(input_shape)`` a Keras layer giving features."""
        factory, shape, _ = user
        with tf.device(self.device):
            net = UserMLP(name, weights, activation, _user_layer(factory, shape), tuple(shape))
        self.models[name], self.params[name] = net, net.params
        return net

    @staticmethod
    def user_torso_width(factory: Any, shape: tuple[int, ...]) -> int:
        """Width of the flat features ``factory(shape)`` gives (one probe batch of zeros)."""
        out = _user_layer(factory, shape)(tf.zeros((1, *shape), tf.float32))
        return int(np.prod(out.shape[1:]))

    @staticmethod
    def obs_spec(weights: Mapping[str, np.ndarray], prefix: str, conv: Any = None) -> tf.TensorSpec:
        """The input signature of network ``prefix``'s observations: ``[None, in]`` for an MLP (its
        first layer ``{prefix}.0`` or ``{prefix}.torso.0``), ``[None, None, None, C]`` images for a conv torso."""
        if conv:
            return tf.TensorSpec([None, None, None, int(np.shape(weights[f"{prefix}.conv.0.weight"])[1])], tf.float32)
        first = f"{prefix}.0.weight" if f"{prefix}.0.weight" in weights else f"{prefix}.torso.0.weight"
        return tf.TensorSpec([None, int(np.shape(weights[first])[1])], tf.float32)

    def variables(self, name: str) -> list:
        return [v for _, v, _ in self.params[name]]

    def adam(self, name: str, models: Iterable[str], lr: float, eps: float = 1e-8) -> Adam:
        """Register and return an Adam (PyTorch's update rule) over the variables of ``models``."""
        params = [p for m in models for p in self.params[m]]
        with tf.device(self.device):
            opt = Adam(learning_rate=lr, epsilon=eps)
            opt.build([v for _, v, _ in params])
        self.optimizers[name] = [opt, params, float(lr)]
        record = replica_noise_variable(self.strategy)
        if record is not None:
            self._replica_noise[name] = record
        return opt

    def function(self, fn, signature):
        """``tf.function`` with a fixed signature (no retracing); XLA when ``compile=True``.

        Under a strategy, ``fn`` runs on every replica on its slice of the batch (no XLA), except a
        measurement (a function whose name holds ``grad_sq``: ``grad_sq_norm``'s graph), which runs
        whole in this process on the batch it is given, communicating with no other replica or
        worker, so that ``|G_B|^2`` is that of the batch, as in one process."""
        if self.strategy is not None and "grad_sq" not in getattr(fn, "__name__", ""):
            return replicated_function(self.strategy, fn, signature)
        return graph_function(fn, input_signature=signature, jit_compile=True if self.compile else None)

    @property
    def weight_names(self) -> tuple[str, ...]:
        return tuple(self.params)

    # -- graph helpers ---------------------------------------------------------------------------------
    def apply(self, optimizer: str, tape, loss, max_grad_norm: float | None, ok=True):
        """Graph code: apply ``loss``'s gradients with ``optimizer`` unless anything is non-finite.

        Returns ``(ok, checks)`` as :func:`~marl_note.agents.tf.common.guarded_apply` does; pass
        the checks to :meth:`check` outside the graph.
        """
        opt, params, _ = self.optimizers[optimizer]
        variables = [v for _, v, _ in params]
        grads = tape.gradient(loss, variables)
        if in_replica_step():  # under a strategy: the step on the global batch's summed gradients
            return reduced_apply(opt, grads, variables, loss, max_grad_norm, ok, self._replica_noise.get(optimizer))
        return guarded_apply(opt, grads, variables, loss, max_grad_norm, ok)

    def replica_grad_sq(self, optimizer: str, rows: int) -> tuple[float, int, float, int] | None:
        """After a step under a strategy of several replicas: ``(|g_small|^2, b_small, |g_big|^2, b_big)``
        of ``optimizer``'s last step (one replica's rows, the global batch; see
        :func:`~marl_note.agents.tf.distribute.read_replica_noise`); None otherwise. ``rows`` (this
        process's rows) is not needed here: the step counted them."""
        return read_replica_noise(self._replica_noise.get(optimizer))

    def check(self, who: str, update: int, names: list[str], checks: Any) -> None:
        """Raise :class:`~marl_note.types.NonFiniteError` if a guarded step was refused.

        Every train step calls it after its graph step, so it also counts the weight change."""
        self.version += 1
        check_finite_update(who, update, names, checks)

    def sync(self, target: str, source: str, tau=None) -> None:
        """Graph or eager code: copy ``source`` into ``target``, or move it ``tau`` of the way.

        Called eagerly outside a strategy and again and again (a Polyak step after every gradient
        step), the writes run as one traced graph per ``(target, source, copy or move)``, ``tau``
        its input: one call instead of a few eager ops per variable (the first few calls stay
        eager, so an agent that syncs rarely never pays for a trace)."""
        self.version += 1  # once per trace in graph code; the train step's check counts those
        key = (target, source, tau is None)
        graph = self._sync_graphs.get(key, 0)
        if self.strategy is not None or not tf.executing_eagerly() or isinstance(graph, int) and graph < 3:
            self._sync(target, source, tau)
            if self.strategy is None and tf.executing_eagerly():
                self._sync_graphs[key] = graph + 1
            return
        if isinstance(graph, int):
            graph = graph_function(lambda t: self._sync(target, source, None if key[2] else t),
                                input_signature=[tf.TensorSpec([], tf.float32)]).get_concrete_function()
            self._sync_graphs[key] = graph
        graph(tf.constant(1.0 if tau is None else tau, tf.float32))

    def _sync(self, target: str, source: str, tau) -> None:
        for (_, t, _), (_, s, _) in zip(self.params[target], self.params[source], strict=True):
            t.assign(s if tau is None else t + tau * (s - t))

    # -- learning rates --------------------------------------------------------------------------------
    def learning_rates(self) -> dict[str, float]:
        """``{optimizer name: learning rate}``, as the state saves them."""
        return {name: float(entry[2]) for name, entry in self.optimizers.items()}

    def set_learning_rate(self, name: str, lr: float) -> None:
        """Set optimiser ``name``'s learning rate to ``lr`` (checked by the caller); traced steps read it."""
        entry = self.optimizers[name]
        entry[2] = float(lr)
        entry[0].learning_rate.assign(lr)

    # -- numpy state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for params in self.params.values():
            out.update(params_to_numpy(params))
        for name, (opt, params, lr) in self.optimizers.items():
            out.update(optimizer_to_numpy(name, opt, lr, params))
        return out

    def numpy_weights(self, prefixes: Iterable[str]) -> dict[str, np.ndarray]:
        """Copies of the weight arrays named by ``prefixes`` (see :func:`~marl_note.agents.numpy_policy.named_by`)."""
        prefixes = tuple(prefixes)
        out: dict[str, np.ndarray] = {}
        for params in self.params.values():
            mine = [p for p in params if named_by(prefixes, p[0])]
            if mine:
                out.update(params_to_numpy(mine))
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.version += 1
        for params in self.params.values():
            params_from_numpy(params, state)
        for name, entry in self.optimizers.items():
            opt, params, _ = entry
            lr = optimizer_from_numpy(name, opt, params, state)
            if lr is not None:
                entry[2] = lr
                opt.learning_rate.assign(lr)

    def optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return optimizer_slot_shapes(self.optimizers)
