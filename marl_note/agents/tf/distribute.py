"""``tf.distribute`` strategies under the TF agents: one traced train step, run on every replica.

A TF agent built with ``strategy=s`` (any :class:`tf.distribute.Strategy`) builds its variables and
optimisers in ``s.scope()`` (:func:`strategy_init`). Its networks then trace each step through
:func:`replicated_function`: the numpy batch handed to ``train_step`` is this process's share of the
global batch; every local replica takes a contiguous slice of its rows, runs the algorithm's
unchanged step code, and each guarded optimiser step (:func:`reduced_apply`) sums the replicas'
gradients, each scaled by ``local rows / global rows`` (``tf.nn.compute_average_loss`` semantics
for the mean losses, importance weights included), before the finiteness check, the clipping and
one Adam step written to every copy of the variables. Rows come back in order (TD errors for
priorities), scalar metrics as the row-weighted mean over the local replicas.

- ``MirroredStrategy``: one process, several devices; the process's batch is the global batch.
- ``MultiWorkerMirroredStrategy``: one process per worker (``TF_CONFIG``); each passes its own
  batch, the global batch is their union, gradients are all-reduced across workers. Every worker
  must take the same number of steps; :func:`~marl_note.contrib.distributed.tf.multiworker.rank_from_tf_config`,
  :func:`~marl_note.contrib.distributed.tf.multiworker.broadcast_from_rank0` and
  :func:`~marl_note.contrib.distributed.tf.multiworker.any_worker` help a trainer keep them in lockstep.
- ``ParameterServerStrategy``: each step is scheduled on a worker by the strategy's
  ``ClusterCoordinator`` and its results are fetched back (one step at a time).

Nothing here changes a checkpoint: ``strategy`` is not recorded in the config, and the numpy state
reads and writes the same arrays (a distributed variable reads as its first copy and is written to
all of them).
"""
from __future__ import annotations

import functools
import inspect
import threading
from contextlib import nullcontext
from typing import Any, Protocol, runtime_checkable

import numpy as np
import tensorflow as tf

from marl_note.agents.tf.common import graph_function

__all__ = ["DistributedStepError", "check_strategy", "active_strategy", "strategy_init", "replicated_function",
           "reduced_apply", "reduced_then", "apply_across_replicas", "replica_noise_variable", "read_replica_noise",
           "in_replica_step", "UNSAVED_PARAMS", "StrategyNetworks"]

UNSAVED_PARAMS = ("strategy",)  # constructor arguments that a checkpoint never records

_replica = threading.local()  # per replica thread: the loss scale of the step being traced

# what TensorFlow raises when a peer of a collective is gone or a collective timed out
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.CancelledError,
                tf.errors.AbortedError)


class DistributedStepError(RuntimeError):
    """A replicated train step failed because another worker or device stopped answering.

    Raised (from TensorFlow's ``UnavailableError``, ``DeadlineExceededError``, ``CancelledError`` or
    ``AbortedError``) instead of waiting: a ``MultiWorkerMirroredStrategy`` worker that dies makes
    the others' next step fail once TensorFlow's heartbeats (or the strategy's
    ``CommunicationOptions(timeout_seconds=...)``) notice. The strategy cannot be used further;
    restart every worker from the last checkpoint.

    Example:
        >>> isinstance(DistributedStepError("worker 1 is gone"), RuntimeError)
        True
    """


def check_strategy(strategy: Any) -> tf.distribute.Strategy | None:
    """``strategy`` itself when it is None or a :class:`tf.distribute.Strategy`; TypeError otherwise.

    Example:
        >>> check_strategy(None) is None, check_strategy(tf.distribute.get_strategy()) is not None
        (True, True)
    """
    if strategy is None or isinstance(strategy, tf.distribute.Strategy):
        return strategy
    raise TypeError(f"strategy must be a tf.distribute.Strategy (MirroredStrategy, MultiWorkerMirroredStrategy, "
                    f"...) or None, got {type(strategy).__module__}.{type(strategy).__qualname__}")


def active_strategy() -> tf.distribute.Strategy | None:
    """The strategy whose ``scope()`` the caller is in, None outside every scope."""
    return tf.distribute.get_strategy() if tf.distribute.has_strategy() else None


def strategy_init(core: type):
    """An ``__init__`` for a TF agent on ``core``: ``core``'s signature plus ``strategy=None``.

    The core's ``__init__`` runs inside ``strategy.scope()`` so that every variable and optimiser
    the networks build is distributed; ``agent.strategy`` keeps it. ``strategy`` is left out of the
    checkpoint config (see ``unsaved_params``), so a checkpoint restores with or without one:
    ``DQN.restore(path, strategy=s)``.
    """
    base: Any = core.__init__  # type: ignore[misc]  # the core's (config-recording) __init__
    signature = inspect.signature(base)
    params = list(signature.parameters.values())
    option = inspect.Parameter("strategy", inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    params.insert(at, option)

    def __init__(self, *args, strategy=None, **kwargs):
        self.strategy = check_strategy(strategy)
        with strategy.scope() if strategy is not None else nullcontext():
            base(self, *args, **kwargs)

    __init__.__doc__ = (f"{core.__name__}'s arguments, plus ``strategy``: a tf.distribute.Strategy to build the "
                        f"variables and optimisers in and run each train step under (None: one device).")
    __init__.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{core.__qualname__}.__init__"
    return __init__


def in_replica_step() -> bool:
    """Graph code: whether this runs inside a replica of :func:`replicated_function`."""
    return getattr(_replica, "scale", None) is not None


# --------------------------------------------------------------------------- the replicated step

def _batched(spec: tf.TensorSpec) -> bool:
    return spec.shape.rank is not None and spec.shape.rank >= 1 and spec.shape[0] is None


def replicated_function(strategy: tf.distribute.Strategy, fn, signature, jit_compile=None):
    """``fn`` (graph code on a batch) as a ``tf.function`` that runs it on every replica of ``strategy``.

    Inputs whose spec has a leading ``None`` dimension are batches: local replica ``i`` of ``k``
    takes rows ``[n*i//k, n*(i+1)//k)``; other inputs go to every replica whole. Outputs with a
    leading ``None`` dimension are concatenated back in row order; fixed-shape float outputs are
    averaged over the local replicas weighted by their rows; anything else is the first replica's.
    A function without batch inputs (a target sync) runs once in the strategy's cross-replica
    context, which writes every copy of a variable.

    Example (the default strategy, one replica):
        >>> f = replicated_function(tf.distribute.get_strategy(), lambda x: (x * 2, tf.reduce_mean(x)),
        ...                         [tf.TensorSpec([None], tf.float32)])
        >>> [t.numpy().tolist() for t in f(tf.constant([1.0, 2.0, 3.0]))]
        [[2.0, 4.0, 6.0], 2.0]
    """
    flat_specs = tf.nest.flatten(signature)
    batched = [_batched(s) for s in flat_specs]
    try:
        local_count = len(strategy.extended.worker_devices)  # this process's replicas
    except RuntimeError:  # the default strategy: one replica
        local_count = 1

    if not any(batched):
        def unbatched(*args):
            with strategy.scope():
                return fn(*args)
        return graph_function(unbatched, input_signature=signature)

    def replica(*args):
        ctx = tf.distribute.get_replica_context()
        flat = tf.nest.flatten(args)
        first = next(x for x, b in zip(flat, batched) if b)
        n = tf.shape(first)[0]
        i = tf.math.floormod(tf.cast(ctx.replica_id_in_sync_group, tf.int32), local_count)
        start, end = n * i // local_count, n * (i + 1) // local_count
        flat = [x[start:end] if b else x for x, b in zip(flat, batched)]
        rows = tf.cast(end - start, tf.float32)
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, rows)
        _replica.scale, _replica.rows = rows / tf.maximum(total, 1.0), rows
        try:
            out = fn(*tf.nest.pack_sequence_as(args, flat))
        finally:
            _replica.scale = _replica.rows = None
        return out, rows

    def step(*args):
        out, rows = strategy.run(replica, args=args)
        parts = strategy.experimental_local_results(out)
        counts = strategy.experimental_local_results(rows)
        if len(parts) < len(counts):  # one value for every replica (all of it came from a merge_call): as it is
            return parts[0]
        total = tf.add_n(list(counts))
        combined = []
        for values in zip(*(tf.nest.flatten(p) for p in parts)):
            first = values[0]
            if first.shape.rank is not None and first.shape.rank >= 1 and first.shape[0] is None:
                combined.append(tf.concat(values, 0))
            elif first.dtype.is_floating:
                combined.append(tf.add_n([tf.where(c > 0, v * tf.cast(c, v.dtype), tf.zeros_like(v))
                                          for v, c in zip(values, counts)]) / tf.cast(total, first.dtype))
            else:
                combined.append(first)
        return tf.nest.pack_sequence_as(parts[0], combined)

    traced = graph_function(step, input_signature=signature, jit_compile=jit_compile)

    run = traced
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)  # one per strategy

        def run(*args):  # each step a scheduled closure on a free worker; its results back here
            return coordinator.schedule(traced, args=args).get()

    @functools.wraps(fn)
    def call(*args):
        try:
            return run(*args)
        except _PEER_ERRORS as exc:
            detail = _peer_detail(str(exc.message))
            raise DistributedStepError(
                f"a train step under {type(strategy).__name__} failed: another worker or device stopped answering "
                f"({type(exc).__name__}: {detail}). The strategy's collectives cannot go on; restart "
                f"every worker (from the last checkpoint)") from exc

    return call


def _peer_detail(message: str) -> str:
    """The line of a TensorFlow collective error that names the lost task (else its last line), short."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if "unhealthy" in line:
            return " ".join(lines[i:i + 2])[:300]
    return (lines[-1] if lines else "no message")[:300]


def reduced_apply(optimizer, grads: list, variables: list, loss, max_norm: float | None, ok=True, record=None):
    """Graph code in a replica of :func:`replicated_function`: the guarded optimiser step on the
    gradients of the global batch.

    Each replica's gradients and loss (means over its rows) are scaled by ``rows / global rows``
    and summed over all replicas; the finiteness check, the clipping and the Adam step then run
    once, in the cross-replica context, on those sums, and write every copy of the variables
    (nothing is written when a value is not finite). Returns ``(ok, checks)`` like
    :func:`~marl_note.agents.tf.common.guarded_apply`, the same on every replica.

    ``record`` (a float64 variable of 4, see :func:`replica_noise_variable`): the step also writes
    the gradient noise measurement it has for free, ``[mean over the replicas with rows of their
    own |g_r|^2, |g|^2 of the global batch's gradient, global rows, replicas with rows]``, both
    unclipped (:func:`read_replica_noise` turns it into a noise-scale pair).
    """
    from marl_note.agents.tf.common import guarded_apply

    ctx = tf.distribute.get_replica_context()
    scale = _replica.scale
    some = scale > 0  # a replica without rows (a batch smaller than the replicas) adds nothing, not 0 * NaN
    extra = []
    if record is not None:  # this replica's own squared norm (its mean loss over its rows), its rows
        own = tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])
        extra = [tf.cast(tf.where(some, own, tf.zeros_like(own)), tf.float32), tf.cast(_replica.rows, tf.float32),
                 tf.cast(some, tf.float32)]  # (one all-reduce, in the gradients' float32)
    grads = [tf.where(some, g * tf.cast(scale, g.dtype), tf.zeros_like(g)) for g in grads]
    loss = tf.where(some, tf.cast(loss, tf.float32) * scale, 0.0)
    grads, loss, extra = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads, loss, extra])

    def merge(strategy, grads, loss, ok, extra):
        first = lambda t: strategy.experimental_local_results(t)[0]  # noqa: E731 (identical on every replica)
        grads = [first(g) for g in grads]
        if record is not None:
            own_sum, total, count = (tf.cast(first(e), tf.float64) for e in extra)
            big = tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])
            record.assign(tf.stack([own_sum / tf.maximum(count, 1.0), big, total, count]))
        return guarded_apply(optimizer, grads, variables, first(loss), max_norm, first(ok))

    return ctx.merge_call(merge, args=(grads, loss, ok, extra))


def reduced_then(fn, losses: list, grads: list[list]):
    """Graph code in a replica of :func:`replicated_function`: ``fn(losses, grads)`` once, in the
    cross-replica context, on the global batch's losses and gradients (each replica's scaled by
    ``rows / global rows`` and summed over all replicas, as :func:`reduced_apply` does); its result
    on every replica. ``grads[i]`` is the gradient list of loss ``i``; None entries (a variable the
    loss does not reach) stay None. For steps that apply several optimisers together (``RL``)."""
    ctx = tf.distribute.get_replica_context()
    scale = _replica.scale
    some = scale > 0
    present = [[g is not None for g in gs] for gs in grads]
    flat = [tf.where(some, g * tf.cast(scale, g.dtype), tf.zeros_like(g)) for gs in grads for g in gs if g is not None]
    losses = [tf.where(some, tf.reshape(tf.cast(loss, tf.float32), []) * scale, 0.0) for loss in losses]
    flat, losses = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [flat, losses])

    def merge(strategy, flat, losses):
        first = lambda t: strategy.experimental_local_results(t)[0]  # noqa: E731 (identical on every replica)
        values = iter([first(g) for g in flat])
        summed = [[next(values) if here else None for here in row] for row in present]
        return fn([first(loss) for loss in losses], summed)

    return ctx.merge_call(merge, args=(flat, losses))


def apply_across_replicas(optimizer: Any) -> None:
    """Let a Keras ``optimizer`` apply gradients in a strategy's cross-replica context (what
    :func:`reduced_then` runs its step in): Keras's own path looks for a replica context to merge
    in; this one writes every copy of each variable directly. Outside a strategy nothing changes.
    (The built-in agents' ``Adam`` does the same in its class.)"""
    import types

    def update(self, grads, trainable_variables, learning_rate):
        if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
            variables = [getattr(v, "value", v) for v in trainable_variables]
            self._distributed_tf_update_step(tf.distribute.get_strategy(), list(zip(grads, variables)), learning_rate)
            return
        type(self)._backend_update_step(self, grads, trainable_variables, learning_rate)

    optimizer._backend_update_step = types.MethodType(update, optimizer)


def replica_noise_variable(strategy: tf.distribute.Strategy | None) -> tf.Variable | None:
    """The variable :func:`reduced_apply` records a step's noise measurement in, built in
    ``strategy``'s scope; None where a step has one replica (no strategy, a ``ParameterServerStrategy``
    step, a one-device strategy): then there is no small batch to compare with."""
    if strategy is None or isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy) \
            or strategy.num_replicas_in_sync < 2:
        return None
    with strategy.scope():
        return tf.Variable(tf.zeros(4, tf.float64), trainable=False,
                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def read_replica_noise(record: tf.Variable | None) -> tuple[float, int, float, int] | None:
    """``(|g_small|^2, b_small, |g_big|^2, b_big)`` of the last recorded step (the arguments of
    :meth:`~marl_note.agents.noise_scale.GradientNoiseScale.update`): the small batch is one
    replica's rows, the big one the global batch; None before a step or when they cannot differ."""
    if record is None:
        return None
    small, big, total, count = (float(x) for x in np.asarray(record.numpy(), np.float64))
    b_big = int(round(total))
    b_small = int(round(total / count)) if count >= 1 else 0
    if not 0 < b_small < b_big:
        return None
    return small, b_small, big, b_big


# --------------------------------------------------------------------------- multi-worker helpers


@runtime_checkable
class StrategyNetworks(Protocol):
    """Networks whose gradient steps run under a ``tf.distribute`` strategy: the TF backend's
    :class:`~marl_note.agents.tf.networks.TFNetworks` and the original library's ``RL`` networks.

    Example:
        >>> class Plain:
        ...     strategy = None
        >>> isinstance(Plain(), StrategyNetworks)
        True
    """

    strategy: Any
