"""Plumbing shared by the TensorFlow/Keras agents: numpy initialisation, MLPs, numpy state.

The agents mirror ``marl_note.agents.torch`` exactly at the numpy seam: ``state_dict()`` uses the
same keys, shapes and layouts (Dense kernels are stored transposed, as torch's ``[out, in]``
weights), and :class:`Adam` follows ``torch.optim.Adam``'s update rule so that moments and step
counts move between backends too.

Nothing here touches global TensorFlow or Keras state: weights are drawn from a per-agent
``numpy.random.Generator`` (Keras initialisers are zeros), exploration uses another one, and no
``keras.utils.set_random_seed`` is ever called.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Iterable, Mapping

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.checks import (ObsEncoder, check_mask, check_transitions,  # noqa: F401 (re-exported)
                                     flat_obs_dim, raise_if_nonfinite_update)
from marl_note.agents.noise import rng_state_from_array, rng_state_to_array
from marl_note.agents.saving import Saving

ACTIVATIONS = ("relu", "tanh", "elu", "gelu")


# --------------------------------------------------------------------------- devices

def tf_device(device: Any) -> str:
    """A TensorFlow device string for the torch-style names ``"cpu"``, ``"cuda"``, ``"cuda:1"``."""
    name = str(device)
    if name.lower() == "cpu":
        return "/CPU:0"
    if name.lower().startswith(("cuda", "gpu")):
        index = name.split(":", 1)[1] if ":" in name else "0"
        return f"/GPU:{index}"
    return name


# --------------------------------------------------------------------------- networks

def init_linear(fan_in: int, fan_out: int, rng: np.random.Generator, init: str = "default",
                gain: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Weight ``[out, in]`` and bias ``[out]`` (float32) drawn like the PyTorch agents' layers.

    ``"default"``: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both; ``"orthogonal"``: an orthogonal
    weight times ``gain`` (QR of a Gaussian matrix, signs fixed by diag(R)) and a zero bias.
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
    raise ValueError(f"unknown init {init!r}; use 'default' or 'orthogonal'")


def mlp(prefix: str, in_dim: int, hidden_sizes: Iterable[int], out_dim: int | None, activation: str,
        rng: np.random.Generator, init: str = "default", out_gain: float = 1.0):
    """A ``keras.Sequential`` of Dense layers and its torch-named parameters.

    Returns ``(model, params)`` where ``params`` is a list of ``(key, variable, transposed)`` in
    ``torch.nn.Sequential`` order: Dense layer ``j`` is torch module ``2 * j`` (the activations
    sit at the odd indices), so the keys read ``{prefix}.0.weight``, ``{prefix}.0.bias``,
    ``{prefix}.2.weight``, ...
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    sizes = [int(h) for h in hidden_sizes]
    if any(h <= 0 for h in sizes):
        raise ValueError(f"hidden_sizes must be positive, got {tuple(sizes)}")
    specs = [(h, activation, math.sqrt(2)) for h in sizes]
    if out_dim is not None:
        specs.append((int(out_dim), None, out_gain))
    layers, last, weights = [], in_dim, []
    for units, act, gain in specs:
        layers.append(keras.layers.Dense(units, activation=act, kernel_initializer="zeros",
                                         bias_initializer="zeros", dtype="float32"))
        weights.append(init_linear(last, units, rng, init, gain))
        last = units
    model = keras.Sequential([keras.Input((in_dim,), dtype="float32"), *layers])
    params = []
    for j, (layer, (w, b)) in enumerate(zip(layers, weights)):
        layer.kernel.assign(w.T)
        layer.bias.assign(b)
        params += [(f"{prefix}.{2 * j}.weight", layer.kernel, True), (f"{prefix}.{2 * j}.bias", layer.bias, False)]
    return model, params


def clip_by_total_norm(grads: list, max_norm: float | None) -> list:
    """``torch.nn.utils.clip_grad_norm_`` in TF: scale by ``min(1, max_norm / (norm + 1e-6))``."""
    if max_norm is None:
        return grads
    norm = tf.linalg.global_norm(grads)
    coef = tf.minimum(1.0, float(max_norm) / (norm + 1e-6))
    return [g * coef for g in grads]


# --------------------------------------------------------------------------- checked optimiser steps

def apply_if(ok, apply) -> None:
    """Graph code: run ``apply()`` (optimiser or target writes) only when the bool tensor ``ok`` holds."""
    def run():
        apply()
        return tf.constant(True)

    tf.cond(ok, run, lambda: tf.constant(False))


def guarded_apply(optimizer, grads: list, variables: list, loss, max_norm: float | None, ok=True):
    """Graph code for one optimiser step that writes no weight unless everything is finite.

    The gradients are clipped like :func:`clip_by_total_norm` and applied only when ``ok`` (every
    earlier step of this gradient step was finite), the loss and the global gradient norm are
    finite. Returns ``(ok for the next step, float32 [loss, gradient norm])``; hand the checks to
    :func:`check_finite_update` outside the graph to raise.

    Example:
        >>> v = keras.Variable([1.0]); opt = Adam(learning_rate=0.1); opt.build([v])
        >>> ok, checks = guarded_apply(opt, [tf.constant([np.nan])], [v], tf.constant(np.nan), 1.0)
        >>> bool(ok), v.numpy().tolist(), int(opt.iterations.numpy())
        (False, [1.0], 0)
    """
    norm = tf.linalg.global_norm(grads)
    checks = tf.stack([tf.cast(tf.reshape(loss, []), tf.float32), tf.cast(norm, tf.float32)])
    ok = tf.logical_and(ok, tf.reduce_all(tf.math.is_finite(checks)))
    if max_norm is not None:
        coef = tf.minimum(1.0, float(max_norm) / (norm + 1e-6))
        grads = [g * coef for g in grads]
    apply_if(ok, lambda: optimizer.apply_gradients(zip(grads, variables)))
    return ok, checks


def check_finite_update(who: str, update: int, names: list[str], checks: Any) -> None:
    """Raise :class:`~marl_note.types.NonFiniteError` when one of ``checks`` (the values returned by
    :func:`guarded_apply`, named ``names`` in order) is NaN/inf: the step was not applied."""
    values = np.asarray(checks, np.float64).reshape(-1)
    if not np.isfinite(values).all():
        raise_if_nonfinite_update(who, update, dict(zip(names, values.tolist())))


def step_names(*losses: str) -> list[str]:
    """``[loss, loss gradient norm, ...]``: the names of :func:`guarded_apply`'s checks, per loss."""
    return [n for loss in losses for n in (loss, f"{loss} gradient norm")]


# --------------------------------------------------------------------------- optimiser

class Adam(keras.optimizers.Adam):
    """Keras Adam with ``torch.optim.Adam``'s update rule.

    Keras adds ``epsilon`` to ``sqrt(v)`` before the bias correction, torch after it
    (``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``); this class uses torch's
    placement, so the same gradients, moments and step count give the same weights in both
    backends and optimiser state can be exchanged through ``state_dict()``.

    Example:
        >>> import keras
        >>> v = keras.Variable([1.0, -1.0])
        >>> opt = Adam(learning_rate=0.1, epsilon=1e-8); opt.build([v])
        >>> _ = opt.apply_gradients([(keras.ops.convert_to_tensor([0.5, -2.0]), v)])
        >>> [round(float(x), 4) for x in v.numpy()]
        [0.9, -0.9]
    """

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = tf.cast(gradient, dtype)
        step = tf.cast(self.iterations + 1, tf.float64)
        bc1 = 1.0 - tf.pow(tf.constant(float(self.beta_1), tf.float64), step)
        bc2_sqrt = tf.sqrt(1.0 - tf.pow(tf.constant(float(self.beta_2), tf.float64), step))
        step_size = tf.cast(tf.cast(learning_rate, tf.float64) / bc1, dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, (gradient - m) * (1.0 - self.beta_1))
        self.assign(v, v * self.beta_2 + (1.0 - self.beta_2) * tf.square(gradient))
        denom = tf.sqrt(v) / tf.cast(bc2_sqrt, dtype) + self.epsilon
        self.assign_sub(variable, step_size * m / denom)


def optimizer_to_numpy(prefix: str, opt: Adam, lr: float, params) -> dict[str, np.ndarray]:
    """The optimiser as ``torch.optim.Adam.state_dict()`` would flatten it (no slots before step 1)."""
    out = {f"{prefix}.lr": np.asarray(lr, np.float64)}
    steps = int(opt.iterations.numpy())
    if steps == 0:
        return out
    for i, (_, var, transposed) in enumerate(params):
        index = opt._get_variable_index(var)
        m, v = opt._momentums[index].numpy(), opt._velocities[index].numpy()
        out[f"{prefix}.{i}.step"] = np.asarray(steps, np.float32)
        out[f"{prefix}.{i}.exp_avg"] = (m.T if transposed else m).copy()
        out[f"{prefix}.{i}.exp_avg_sq"] = (v.T if transposed else v).copy()
    return out


def optimizer_from_numpy(prefix: str, opt: Adam, params, state: Mapping[str, Any]) -> float | None:
    """Load slots saved by either backend; returns the saved learning rate (None if absent)."""
    slots: dict[int, dict[str, np.ndarray]] = {}
    for key, value in state.items():
        if not key.startswith(prefix + ".") or key == f"{prefix}.lr":
            continue
        idx, slot = key[len(prefix) + 1:].split(".", 1)
        slots.setdefault(int(idx), {})[slot] = np.asarray(value)
    if slots and (sorted(slots) != list(range(len(params)))
                  or any(set(s) != {"step", "exp_avg", "exp_avg_sq"} for s in slots.values())):
        raise KeyError(f"state_dict has optimiser slots for parameters {sorted(slots)}, "
                       f"this network has {len(params)} (each needs step, exp_avg, exp_avg_sq)")
    steps = {float(s["step"]) for s in slots.values()}
    if len(steps) > 1:
        raise ValueError(f"{prefix}: parameters have different Adam step counts {sorted(steps)}; "
                         f"the TensorFlow agents keep one step count per optimiser")
    new = []
    for i, (key, var, transposed) in enumerate(params):
        shape = tuple(var.shape[::-1]) if transposed else tuple(var.shape)
        pair = []
        for slot in ("exp_avg", "exp_avg_sq"):
            arr = slots[i][slot] if slots else np.zeros(shape, np.float32)
            if tuple(arr.shape) != shape:
                raise ValueError(f"{prefix}.{i}.{slot} has shape {arr.shape}, this network expects {shape}")
            pair.append(arr.T if transposed else arr)
        new.append(pair)
    for (_, var, _), (m, v) in zip(params, new):
        index = opt._get_variable_index(var)
        opt._momentums[index].assign(m)
        opt._velocities[index].assign(v)
    opt.iterations.assign(int(steps.pop()) if steps else 0)
    return float(np.asarray(state[f"{prefix}.lr"])) if f"{prefix}.lr" in state else None


def optimizer_slot_shapes(optims: Mapping[str, Any]) -> dict[str, list[tuple[int, ...]]]:
    """Optimiser name -> the torch-layout shapes of its parameters (what its saved slots must have)."""
    return {name: [tuple(var.shape[::-1]) if transposed else tuple(var.shape) for _, var, transposed in entry[1]]
            for name, entry in optims.items()}


# --------------------------------------------------------------------------- numpy state

def params_to_numpy(params) -> dict[str, np.ndarray]:
    return {key: (var.numpy().T if transposed else var.numpy()).copy() for key, var, transposed in params}


def params_from_numpy(params, state: Mapping[str, Any]) -> None:
    missing = [key for key, _, _ in params if key not in state]
    if missing:
        raise KeyError(f"state_dict is missing {missing}")
    new = []
    for key, var, transposed in params:
        arr = np.asarray(state[key], np.float32)
        shape = tuple(var.shape[::-1]) if transposed else tuple(var.shape)
        if tuple(arr.shape) != shape:
            raise ValueError(f"{key} has shape {arr.shape}, this network expects {shape}")
        new.append(arr.T if transposed else arr)
    for (_, var, _), arr in zip(params, new):
        var.assign(arr)


def torch_generator_state(seed: int) -> np.ndarray:
    """The bytes of ``torch.Generator().manual_seed(seed).get_state()``, built with numpy.

    The PyTorch agents checkpoint their init generator as ``torch_rng``. A TensorFlow agent never
    uses one, but writes this freshly seeded state (or carries the one it loaded) so that its
    ``state_dict()`` has the same keys and loads into a PyTorch agent.
    """
    seed = int(seed) & (2**64 - 1)
    mt = [seed & 0xFFFFFFFF]
    for j in range(1, 624):
        x = mt[-1]
        mt.append((1812433253 * (x ^ (x >> 30)) + j) & 0xFFFFFFFF)
    raw = struct.pack("<QiiQ", seed, 1, 1, 0) + np.asarray(mt, "<u8").tobytes()
    return np.frombuffer(raw + bytes(5056 - len(raw)), np.uint8).copy()


class TFAgent(Saving):
    """Shared base of the TensorFlow agents: spaces, device, seeding, counters and numpy state.

    Subclasses register ``_params[name] = [(torch_key, variable, transposed), ...]`` per network
    and ``_optims[name] = (optimizer, params, lr)``; ``state_dict()`` then has exactly the keys of
    the PyTorch agent with the same config.

    Example:
        >>> import gymnasium as gym
        >>> base = TFAgent(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0, device="cpu")
        >>> sorted(base.state_dict())
        ['agent_steps', 'rng', 'torch_rng', 'updates']
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int | None, device,
                 compile: bool = False):
        if not isinstance(observation_space, gym.Space) or not isinstance(action_space, gym.Space):
            raise TypeError("observation_space and action_space must be gymnasium spaces, got "
                            f"{type(observation_space).__name__} and {type(action_space).__name__}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = tf_device(device)
        self.encoder = ObsEncoder(observation_space)
        self.compile = bool(compile)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        init_seed = int(self.rng.integers(0, 2**63 - 1))  # the same draw seeds the torch agents' generator
        self.init_rng = np.random.default_rng(init_seed)
        self._torch_rng = torch_generator_state(init_seed)
        self.agent_steps = 0
        self.updates = 0
        self._params: dict[str, list] = {}
        self._optims: dict[str, list] = {}

    def _function(self, fn, signature):
        """``tf.function`` with a fixed signature (no retracing); XLA when ``compile=True``."""
        return tf.function(fn, input_signature=signature, jit_compile=True if self.compile else None,
                           reduce_retracing=True)

    def _extra_state(self) -> dict[str, np.ndarray]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def _optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return optimizer_slot_shapes(self._optims)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, optimiser slots, counters and rng states, as numpy arrays only."""
        out: dict[str, np.ndarray] = {}
        for params in self._params.values():
            out.update(params_to_numpy(params))
        for name, (opt, params, lr) in self._optims.items():
            out.update(optimizer_to_numpy(name, opt, lr, params))
        out["agent_steps"] = np.asarray(self.agent_steps, np.int64)
        out["updates"] = np.asarray(self.updates, np.int64)
        out["rng"] = rng_state_to_array(self.rng)
        out["torch_rng"] = self._torch_rng.copy()
        out.update(self._extra_state())
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for params in self._params.values():
            params_from_numpy(params, state)
        for name, entry in self._optims.items():
            opt, params, _ = entry
            lr = optimizer_from_numpy(name, opt, params, state)
            if lr is not None:
                entry[2] = lr
                opt.learning_rate.assign(lr)
        self.agent_steps = int(np.asarray(state["agent_steps"]))
        self.updates = int(np.asarray(state["updates"]))
        rng_state_from_array(self.rng, state["rng"])
        if "torch_rng" in state:
            self._torch_rng = np.array(state["torch_rng"], np.uint8).reshape(-1)
        self._load_extra_state(state)
