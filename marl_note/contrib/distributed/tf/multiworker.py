"""TF agents in a multi-process run: the trainer's rank context over a ``MultiWorkerMirroredStrategy``.

The TensorFlow twin of :mod:`marl_note.contrib.distributed.torch.ddp` (same names, so a script picks
its backend by module): :func:`init_distributed` reads ``TF_CONFIG`` (this worker's rank and the
number of workers), builds the ``MultiWorkerMirroredStrategy`` unless given one, and returns the
trainer's :class:`~marl_note.distributed.DistributedContext` around a :class:`TFCollective`.
Build the agents with ``strategy=ctx.collective.strategy``: their train steps then all-reduce the
gradients over the workers (:mod:`marl_note.agents.tf.distribute`), and the trainer keeps every
worker taking the same steps.

The collective's ``broadcast`` and ``barrier`` use the strategy's own all-reduce (the objects the
trainer broadcasts are a few bytes: pickled, sent as one array), so there is one channel, one
bound (the strategy's peer health check, or a ``CommunicationOptions`` timeout) and one failure
mode: a worker that is gone makes the others raise :class:`~marl_note.distributed.RankLostError` instead of waiting.

Example (one process, no ``TF_CONFIG``: no strategy, nothing to agree on):
    >>> ctx = init_distributed()
    >>> ctx.world_size, ctx.collective is None
    (1, True)
"""
from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import tensorflow as tf

from marl_note.agents.base import DistributedTrainable
from marl_note.agents.tf.common import graph_function
from marl_note.agents.tf.distribute import _PEER_ERRORS, StrategyNetworks, _peer_detail
from marl_note.distributed import DistributedContext, RankLostError

__all__ = ["TFCollective", "any_worker", "broadcast_from_rank0", "init_distributed", "distribute",
           "rank_from_tf_config", "shutdown"]

DEFAULT_TIMEOUT = None  # no per-collective bound: the strategy's peer health check notices a dead worker


def rank_from_tf_config(environ: Any = None) -> tuple[int, int]:
    """``(rank, world size)`` of this process from ``TF_CONFIG``; ``(0, 1)`` without one.

    The rank counts the ``chief`` first (if any), then the ``worker`` tasks in order; parameter
    servers and evaluators are not ranks (ValueError for such a task: it runs no trainer).

    Example:
        >>> cfg = '{"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "task": {"type": "worker", "index": 1}}'
        >>> rank_from_tf_config({"TF_CONFIG": cfg})
        (1, 2)
    """
    raw = (os.environ if environ is None else environ).get("TF_CONFIG")
    if not raw:
        return 0, 1
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config.get("task", {})
        chiefs, workers = len(cluster.get("chief", [])), len(cluster.get("worker", []))
        kind, index = task.get("type", "worker"), int(task.get("index", 0))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"TF_CONFIG is not a valid cluster description ({type(exc).__name__}: {exc}): {raw[:200]}") \
            from None
    if kind == "chief":
        return index, chiefs + workers
    if kind == "worker":
        if not 0 <= index < workers:
            raise ValueError(f"TF_CONFIG task worker:{index} is not in the cluster's {workers} workers")
        return chiefs + index, chiefs + workers
    raise ValueError(f"TF_CONFIG task type {kind!r} runs no trainer (only 'chief' and 'worker' tasks have a rank)")


# (strategy, shape, dtype, first_only) -> the traced all-reduce; the strategy is kept with its entry
_ALL_SUMS: dict[tuple[int, tuple[int, ...], str, bool], tuple[tf.distribute.Strategy, Any]] = {}


def _all_sum(strategy: tf.distribute.Strategy, value: np.ndarray, first_only: bool) -> np.ndarray:
    """Sum over every replica of ``value`` (only replica 0's with ``first_only``).

    The all-reduce runs in a ``tf.function`` traced once per shape: an eager collective under a
    ``MultiWorkerMirroredStrategy`` starts new collective threads on every call (thousands over a
    run of per-chunk lockstep broadcasts, until thread creation fails), a traced one reuses them."""
    if strategy is None or isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return value  # one coordinator drives every step: nothing to agree on
    key = (id(strategy), tuple(value.shape), value.dtype.str, bool(first_only))
    entry = _ALL_SUMS.get(key)
    if entry is None or entry[0] is not strategy:
        def replica(v):
            ctx = tf.distribute.get_replica_context()
            v = tf.identity(v)  # placed on this replica's device (a bare function input has none to reduce to)
            if first_only:
                v = tf.where(tf.equal(tf.cast(ctx.replica_id_in_sync_group, tf.int32), 0), v, tf.zeros_like(v))
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, v)

        entry = _ALL_SUMS[key] = (strategy, graph_function(lambda v: strategy.run(replica, args=(v,))))
    out = entry[1](tf.constant(value))
    return np.asarray(strategy.experimental_local_results(out)[0])


def broadcast_from_rank0(strategy: tf.distribute.Strategy | None, value: Any) -> np.ndarray:
    """Rank 0's ``value`` (a number or array of the same shape on every worker), on every worker.

    Every worker of a ``MultiWorkerMirroredStrategy`` must call it at the same point (it is a
    collective, like a train step); e.g. the seed or the number of updates rank 0 decided. Under no
    strategy or a ``ParameterServerStrategy`` (one coordinator) it returns ``value``.

    Example:
        >>> broadcast_from_rank0(tf.distribute.get_strategy(), [1.5, 2.0]).tolist()
        [1.5, 2.0]
    """
    array = np.asarray(value)
    return _all_sum(strategy, array.astype(np.float64), True).astype(array.dtype)


def any_worker(strategy: tf.distribute.Strategy | None, flag: bool) -> bool:
    """Whether any worker passed ``flag=True``: stop in lockstep (a collective every worker calls,
    e.g. once per round: the one that wants to stop, say after early stopping on rank 0, stops all,
    instead of leaving the others waiting in their next step).

    Example:
        >>> any_worker(tf.distribute.get_strategy(), False), any_worker(None, True)
        (False, True)
    """
    return bool(_all_sum(strategy, np.asarray(float(bool(flag))), False) > 0)


@contextmanager
def collective(rank: int, what: str) -> Iterator[None]:
    """Turn a lost peer in a strategy collective into :class:`~marl_note.distributed.RankLostError`."""
    try:
        yield
    except _PEER_ERRORS as err:
        raise RankLostError(f"rank {rank}: {what} with the other workers failed; one of them died or stopped "
                            f"answering (the strategy's health check or timeout; {type(err).__name__}: "
                            f"{_peer_detail(str(getattr(err, 'message', err)))})") from err


def _networks(agent: Any, strategy: tf.distribute.Strategy) -> Any:
    from marl_note.agents.tf.networks import TFNetworks

    nets = agent.distributed_networks if isinstance(agent, DistributedTrainable) else None
    if not isinstance(nets, StrategyNetworks):
        raise TypeError(f"{type(agent).__name__} has no TensorFlow networks (its networks are {type(nets).__name__}): "
                        f"a MultiWorkerMirroredStrategy trains TF agents (marl_note.agents.tf) built with strategy=")
    if nets.strategy is not strategy:
        how = ("with strategy=ctx.collective.strategy" if isinstance(nets, TFNetworks)
               else "inside ctx.collective.strategy.scope()")
        raise ValueError(f"{type(agent).__name__} was not built under this run's strategy (its strategy: "
                         f"{type(nets.strategy).__name__}); build it {how} so that "
                         f"its train steps all-reduce the gradients over the workers")
    return nets


def distribute(agent: Any, strategy: tf.distribute.Strategy, rank: int = 0) -> None:
    """Check ``agent`` was built under ``strategy`` and copy rank 0's numpy state (weights, targets,
    optimiser moments) into it on every worker (all workers call it, like a train step)."""
    if isinstance(agent, DistributedTrainable) and agent.local_kl_stop:
        raise ValueError(f"{type(agent).__name__}(target_kl=...) stops each worker's epochs on that worker's own KL, "
                         f"so the workers would fall out of lockstep; use target_kl=None with several workers")
    nets = _networks(agent, strategy)
    state = nets.state_dict()
    names = sorted(k for k, v in state.items() if np.asarray(v).dtype.kind in "fiub")
    arrays = [np.asarray(state[k]) for k in names]
    flat = np.concatenate([a.astype(np.float64).reshape(-1) for a in arrays]) if arrays else np.zeros(0)
    with collective(rank, f"broadcasting rank 0's weights of {type(agent).__name__}"):
        flat = broadcast_from_rank0(strategy, flat)
    offset, chief = 0, dict(state)
    for name, array in zip(names, arrays):
        chief[name] = flat[offset:offset + array.size].reshape(array.shape).astype(array.dtype)
        offset += array.size
    nets.load_state_dict(chief)  # writes every copy; bumps nets.version (the numpy acting copy re-exports)


class TFCollective:
    """:class:`~marl_note.distributed.Collective` over a ``MultiWorkerMirroredStrategy``'s all-reduce.

    ``broadcast(obj)`` pickles rank 0's ``obj`` and sends it as a byte array (two all-reduces: its
    length, then the bytes); ``barrier()`` is one all-reduce; ``prepare(agent)`` is :func:`distribute`.
    Every worker must make the same calls in the same order, as with train steps.

    Example (the default strategy stands in for one worker):
        >>> c = TFCollective(tf.distribute.get_strategy())
        >>> c.broadcast({"go_on": True, "steps": 3}), c.barrier()
        ({'go_on': True, 'steps': 3}, None)
    """

    def __init__(self, strategy: tf.distribute.Strategy, rank: int = 0):
        if not isinstance(strategy, tf.distribute.Strategy):
            raise TypeError(f"strategy must be a tf.distribute.Strategy, got {type(strategy).__name__}")
        self.strategy, self.rank = strategy, int(rank)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if src != 0:
            raise ValueError(f"TFCollective broadcasts from rank 0 only, got src={src}")
        data = pickle.dumps(obj) if self.rank == 0 else b""
        with collective(self.rank, "receiving rank 0's decision"):
            size = int(broadcast_from_rank0(self.strategy, np.int64(len(data))))
            buf = np.zeros(max(256, 1 << (size - 1).bit_length()), np.uint8)  # few shapes: few traces
            if self.rank == 0:
                buf[:size] = np.frombuffer(data, np.uint8)
            out = broadcast_from_rank0(self.strategy, buf)
        return obj if self.rank == 0 else pickle.loads(out[:size].tobytes())

    def barrier(self) -> None:
        with collective(self.rank, "waiting for the other workers (barrier)"):
            broadcast_from_rank0(self.strategy, np.int64(0))

    def prepare(self, agent: Any) -> None:
        distribute(agent, self.strategy, self.rank)


def init_distributed(strategy: tf.distribute.Strategy | None = None,
                     timeout: float | None = DEFAULT_TIMEOUT) -> DistributedContext:
    """This worker's rank context from ``TF_CONFIG`` (one process without it, or with one worker).

    ``strategy``: the ``MultiWorkerMirroredStrategy`` to use (built here when None). Build the agents
    with ``strategy=ctx.collective.strategy``.

    ``timeout``: None (default) leaves collectives unbounded; a worker that dies is still noticed
    within seconds by the strategy's peer health check (the others raise ``RankLostError`` or
    ``DistributedStepError``). A number bounds every collective by that many seconds (a live but
    stuck peer), at a cost: TensorFlow keeps one sleeping thread per timed collective for the whole
    timeout, so a run of a few hundred steps per second holds thousands of threads (rate x timeout)
    and can fail to start new ones; use it for short runs or debugging.
    A ``MirroredStrategy`` (several devices, one process) needs no rank context: pass it to the
    agents and train without ``distributed=``. On GPUs each worker's strategy uses the worker's
    visible GPUs (``CUDA_VISIBLE_DEVICES`` per worker) with NCCL all-reduce.
    """
    rank, world_size = rank_from_tf_config()
    if strategy is not None and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise TypeError(f"init_distributed takes a MultiWorkerMirroredStrategy (one process per worker), got "
                        f"{type(strategy).__name__}; a MirroredStrategy or ParameterServerStrategy runs in one "
                        f"trainer process: pass it to the agents (strategy=) and train without distributed=")
    if world_size == 1:
        return DistributedContext()
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
    if strategy is None:
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=None if timeout is None else float(timeout))
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    return DistributedContext(rank, world_size, 0, TFCollective(strategy, rank))


def shutdown() -> None:
    """Nothing to leave (a strategy has no process group to destroy); the torch module's twin."""
