"""PyTorch agents under ``torch.distributed``: the process group, gradient averaging, rank 0's weights.

:func:`init_distributed` joins the process group that ``torchrun`` or
:func:`marl_note.contrib.distributed.ranks.launch` describe in the environment (gloo on CPU, nccl on
GPU) and returns the trainer's :class:`~marl_note.distributed.DistributedContext`, whose
collective is a :class:`TorchCollective`. :func:`distribute` (what the trainer calls through
``prepare``) copies rank 0's parameters and buffers into an agent's modules and makes every
optimiser step of it average the gradients over the ranks first, DistributedDataParallel's
semantics, applied inside the agent's one checked step rather than by wrapping the modules.

Example (one process: no process group, nothing to do):
    >>> ctx = init_distributed()
    >>> ctx.world_size, ctx.collective is None
    (1, True)
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from marl_note.agents.base import DistributedTrainable
from marl_note.agents.torch.networks import TorchNetworks
from marl_note.distributed import DistributedContext, RankLostError, env_rank_info

__all__ = ["TorchCollective", "init_distributed", "distribute", "average_gradients", "shutdown", "collective"]

DEFAULT_TIMEOUT = 300.0


@contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed ``torch.distributed`` call into :class:`~marl_note.distributed.RankLostError` naming it."""
    try:
        yield
    except RuntimeError as err:  # gloo/nccl: connection reset, timeout (DistBackendError is a RuntimeError)
        rank = dist.get_rank() if dist.is_initialized() else "?"
        raise RankLostError(f"rank {rank}: {what} with the other ranks failed; one of them died or stopped "
                            f"answering within the process group's timeout ({type(err).__name__}: "
                            f"{str(err).splitlines()[0] if str(err) else ''})") from err


def average_gradients(params: Sequence[torch.Tensor]) -> tuple[float, float, int] | None:
    """All-reduce the gradients of ``params`` (those that have one) and divide by the world size,
    in one flat buffer: every rank ends with the mean of the ranks' gradients.

    Returns the gradient noise measurement this gives for free, ``(mean over the ranks of their own
    |g_r|^2, |g|^2 of the averaged gradient, world size)`` (each rank's own squared norm travels in
    the same buffer), or None where nothing was averaged."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    world = dist.get_world_size()
    own = torch.stack([g.detach().double().square().sum() for g in grads]).sum()
    flat = torch.cat([g.reshape(-1) for g in grads] + [own.to(grads[0].dtype).reshape(1)])
    with collective("averaging the gradients"):
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n
    big = flat[:offset].double().square().sum()
    return float(flat[offset]), float(big), world


def _networks(agent: Any) -> TorchNetworks:
    nets = agent.distributed_networks if isinstance(agent, DistributedTrainable) else None
    if not isinstance(nets, TorchNetworks):
        raise TypeError(f"{type(agent).__name__} has no PyTorch networks (its networks are {type(nets).__name__}): "
                        f"torch.distributed trains PyTorch agents (marl_note.agents.torch)")
    return nets


@torch.no_grad()
def distribute(agent: Any, src: int = 0) -> None:
    """Broadcast rank ``src``'s parameters and buffers into ``agent``'s modules and average its
    gradients over the ranks at every optimiser step from now on (all ranks call it)."""
    if isinstance(agent, DistributedTrainable) and agent.local_kl_stop:
        raise ValueError(f"{type(agent).__name__}(target_kl=...) stops each rank's epochs on that rank's own KL, "
                         f"so the ranks would fall out of lockstep; use target_kl=None with several ranks")
    nets = _networks(agent)
    with collective(f"broadcasting rank {src}'s weights of {type(agent).__name__}"):
        _broadcast_modules(nets, src)
    nets.grad_hook = average_gradients
    nets.version += 1  # the numpy acting copy re-exports the broadcast weights


def _broadcast_modules(nets: TorchNetworks, src: int) -> None:
    for name in sorted(nets.modules):
        for tensor in [*nets.modules[name].parameters(), *nets.modules[name].buffers()]:
            if dist.get_backend() == "gloo" and tensor.device.type != "cpu":
                cpu = tensor.detach().cpu()
                dist.broadcast(cpu, src)
                tensor.copy_(cpu)
            else:
                dist.broadcast(tensor.data, src)


class TorchCollective:
    """:class:`~marl_note.distributed.Collective` over the default ``torch.distributed`` group.

    Example:
        >>> isinstance(TorchCollective(), __import__("marl_note.distributed").distributed.Collective)
        True
    """

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        with collective(f"receiving rank {src}'s decision"):
            dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self) -> None:
        with collective("waiting for the other ranks (barrier)"):
            dist.barrier()

    def prepare(self, agent: Any) -> None:
        distribute(agent)


def init_distributed(backend: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> DistributedContext:
    """Join the process group described by ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` /
    ``MASTER_PORT`` and return this rank's context; one process (no ``WORLD_SIZE`` above 1) gets
    a context without a group.

    ``backend``: ``"gloo"`` (CPU) or ``"nccl"`` (GPU; each rank then uses ``cuda:LOCAL_RANK``,
    set as the current device: build agents with ``device=f"cuda:{ctx.local_rank}"``); None picks
    nccl where CUDA is available, else gloo. ``timeout`` (seconds) bounds every collective: a rank
    that stops answering makes the others raise after it, so it must exceed rank 0's longest
    test or checkpoint between two chunks.
    """
    rank, world_size, local_rank = env_rank_info()
    if world_size == 1:
        return DistributedContext()
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or None, got {backend!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise RuntimeError(f"WORLD_SIZE={world_size} but {missing} unset: start the ranks with torchrun or "
                           f"marl_note.contrib.distributed.ranks.launch")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout))
    return DistributedContext(rank, world_size, local_rank, TorchCollective())


def shutdown() -> None:
    """Leave the process group (if joined)."""
    if dist.is_initialized():
        dist.destroy_process_group()
