"""TensorFlow helpers under :mod:`marl_note.agents.tf.networks`: devices, guarded steps, Adam, numpy state.

The TF agents mirror ``marl_note.agents.torch`` at the numpy seam: ``state_dict()`` uses the same
keys, shapes and layouts (Dense kernels are stored transposed, as torch's ``[out, in]`` weights),
and :class:`Adam` follows ``torch.optim.Adam``'s update rule so that moments and step counts move
between backends too. Nothing here touches global TensorFlow or Keras state (weights come from
numpy; no ``keras.utils.set_random_seed``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.spaces import raise_if_nonfinite_update

# --------------------------------------------------------------------------- devices

def tf_device(device: Any) -> str:
    """A TensorFlow device string for the torch-style names ``"cpu"``, ``"cuda"``, ``"cuda:1"`` and
    ``"auto"`` (the first GPU where TensorFlow sees one, else the CPU)."""
    name = str(device)
    if name == "auto":
        return "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"
    if name.lower() == "cpu":
        return "/CPU:0"
    if name.lower().startswith(("cuda", "gpu")):
        index = name.split(":", 1)[1] if ":" in name else "0"
        return f"/GPU:{index}"
    return name


# --------------------------------------------------------------------------- traced graphs

def graph_function(fn, **options: Any):
    """``tf.function(fn, **options)`` for marl_note's own graph code: without AutoGraph, retraces shared.

    The graph code here is written in TensorFlow ops (``tf.cond``, ``tf.where``), never Python
    control flow on tensors, so AutoGraph's rewrite of its source (once per process: half of a fresh
    process's first DQN update, a quarter of SAC's; ``bench/bench_tf_first_update.py``) buys nothing.
    A Python ``if`` on a tensor in such a function raises at its first trace rather than being rewritten.

    Example:
        >>> double = graph_function(lambda x: 2.0 * x, input_signature=[tf.TensorSpec([None], tf.float32)])
        >>> double(tf.constant([1.0, 2.0])).numpy().tolist()
        [2.0, 4.0]
    """
    options.setdefault("reduce_retracing", True)
    return tf.function(fn, autograph=False, **options)


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

    # the step's bias corrections, shared by its variables: {dtype: (step size, sqrt(1 - b2^t))} while
    # one graph step (outside a strategy) updates its variables, else None
    _corrections: dict | None = None

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
            # a step taken once for all replicas (a strategy's summed gradients): Keras's path
            # looks for a replica context to merge in; write every copy of each variable directly
            variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
            self._distributed_tf_update_step(tf.distribute.get_strategy(), list(zip(grads, variables)),
                                             learning_rate)
            return
        # Traced outside a strategy, the variables of this step share one step count: its bias
        # corrections are built once, not once per variable (fewer ops to trace and to run, same values)
        share = not tf.executing_eagerly() and not tf.distribute.has_strategy()
        self._corrections = {} if share else None
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._corrections = None

    def _bias_corrections(self, learning_rate, dtype):
        """``(lr / (1 - b1^t), sqrt(1 - b2^t))`` in ``dtype`` for this step's ``t = iterations + 1``."""
        shared = self._corrections
        if shared is not None and dtype in shared:
            return shared[dtype]
        step = tf.cast(self.iterations + 1, tf.float64)
        bc1 = 1.0 - tf.pow(tf.constant(float(self.beta_1), tf.float64), step)
        bc2_sqrt = tf.sqrt(1.0 - tf.pow(tf.constant(float(self.beta_2), tf.float64), step))
        out = tf.cast(tf.cast(learning_rate, tf.float64) / bc1, dtype), tf.cast(bc2_sqrt, dtype)
        if shared is not None:
            shared[dtype] = out
        return out

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = tf.cast(gradient, dtype)
        step_size, bc2_sqrt = self._bias_corrections(learning_rate, dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, (gradient - m) * (1.0 - self.beta_1))
        self.assign(v, v * self.beta_2 + (1.0 - self.beta_2) * tf.square(gradient))
        denom = tf.sqrt(v) / bc2_sqrt + self.epsilon
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
    for i, (_key, var, transposed) in enumerate(params):
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


