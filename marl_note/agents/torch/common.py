"""PyTorch helpers under :mod:`marl_note.agents.torch.networks`: checked optimiser steps, numpy state.

Nothing here touches global torch settings (no ``torch.manual_seed``, no ``set_num_threads``):
weights come from numpy (:mod:`marl_note.agents.networks`), and everything that leaves is numpy.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.spaces import raise_if_nonfinite_update

# --------------------------------------------------------------------------- checked optimiser steps

def grad_norm(params: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """Total 2-norm of the gradients of ``params`` (those that have one), before clipping to
    ``max_norm`` when it is given (``clip_grad_norm_``); no clipping when it is None."""
    params = [p for p in params if p.grad is not None]
    if max_norm is not None:
        return nn.utils.clip_grad_norm_(params, max_norm)
    return nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])


def check_finite_update(who: str, update: int, values: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`~marl_note.types.NonFiniteError` when one of the scalar tensors ``values``
    (losses, gradient norms) is NaN/inf; one host sync for all of them."""
    stacked = torch.stack([v.detach().reshape(()).to(torch.float32) for v in values.values()])
    if not bool(torch.isfinite(stacked).all()):
        raise_if_nonfinite_update(who, update, dict(zip(values, stacked.tolist())))


def checked_step(optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor], loss: torch.Tensor,
                 max_norm: float | None, who: str, update: int, name: str = "loss") -> None:
    """``optimizer.step()`` after ``loss.backward()``, once the loss and the gradient norm are finite.

    Clips the gradients to ``max_norm`` (when given) and raises
    :class:`~marl_note.types.NonFiniteError` naming ``who`` (the agent), gradient step ``update``
    and ``name`` before the step writes any weight when either is NaN/inf.

    Example:
        >>> net = nn.Linear(2, 1); opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> loss = net(torch.tensor([[float("nan"), 0.0]])).sum(); loss.backward()
        >>> before = net.weight.detach().clone()
        >>> checked_step(opt, net.parameters(), loss, 1.0, "Mine", 3)
        Traceback (most recent call last):
        ...
        marl_note.types.NonFiniteError: Mine update 3: loss is nan (loss gradient norm nan); ...
        >>> bool(torch.equal(net.weight, before))
        True
    """
    norm = grad_norm(params, max_norm)
    check_finite_update(who, update, {name: loss, f"{name} gradient norm": norm})
    optimizer.step()


# --------------------------------------------------------------------------- numpy state

def module_to_numpy(prefix: str, module: nn.Module) -> dict[str, np.ndarray]:
    return {f"{prefix}.{k}": v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def module_from_numpy(prefix: str, module: nn.Module, state: Mapping[str, Any]) -> None:
    own = module.state_dict()
    missing = [f"{prefix}.{k}" for k in own if f"{prefix}.{k}" not in state]
    if missing:
        raise KeyError(f"state_dict is missing {missing}")
    new = {}
    for k, v in own.items():
        arr = np.asarray(state[f"{prefix}.{k}"])
        if tuple(arr.shape) != tuple(v.shape):
            raise ValueError(f"{prefix}.{k} has shape {arr.shape}, this network expects {tuple(v.shape)}")
        new[k] = torch.as_tensor(arr, dtype=v.dtype, device=v.device)
    module.load_state_dict(new)


class PendingAdam:
    """A ``torch.optim.Adam`` that is built at its first step: the parameters, learning rate and ``eps``
    it will have, and the slots loaded into it meanwhile.

    Building a torch optimiser imports ``torch._dynamo`` (1.2-1.5 s of CPU, once per process): an agent
    that only acts (``evaluate``, ``play``, a restored checkpoint that is not trained) never pays it.
    Until it is built, its numpy state reads and writes as the built optimiser's would (``{name}.lr``,
    then torch's slots ``{name}.{i}.step``, ``.exp_avg``, ``.exp_avg_sq`` once it has any), and
    :meth:`build` hands the slots to the optimiser it makes.

    Example:
        >>> p = nn.Parameter(torch.ones(2))
        >>> pending = PendingAdam([p], lr=0.1)
        >>> pending.load("opt", {"opt.lr": 0.5, "opt.0.step": np.float32(3), "opt.0.exp_avg": np.ones(2),
        ...                      "opt.0.exp_avg_sq": np.ones(2)})
        >>> sorted(pending.state("opt")), pending.lr
        (['opt.0.exp_avg', 'opt.0.exp_avg_sq', 'opt.0.step', 'opt.lr'], 0.5)
        >>> adam = pending.build("opt"); adam.param_groups[0]["lr"], float(adam.state[p]["step"])
        (0.5, 3.0)
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, eps: float = 1e-8):
        self.params = list(params)
        self.lr = float(lr)
        self.eps = float(eps)
        self.slots: dict[str, np.ndarray] = {}  # "{i}.{slot}" -> array, as torch's state_dict flattens them

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        """What :func:`optimizer_to_numpy` gives for the built optimiser."""
        return {f"{prefix}.lr": np.asarray(self.lr, np.float64),
                **{f"{prefix}.{k}": v.copy() for k, v in self.slots.items()}}

    def load(self, prefix: str, state: Mapping[str, Any]) -> None:
        """What :func:`optimizer_from_numpy` does to the built optimiser: the slots saved under ``prefix``
        replace these (none: none), cast as torch casts them (``step`` as saved, moments to the parameter's
        dtype), and a saved learning rate replaces this one."""
        slots = {}
        for idx, saved in saved_slots(prefix, state).items():
            if not 0 <= idx < len(self.params):
                raise KeyError(f"{prefix}.{idx}.{next(iter(saved))}: {prefix} has {len(self.params)} parameters")
            moments = torch.empty((), dtype=self.params[idx].dtype).numpy().dtype
            for slot, value in saved.items():
                slots[f"{idx}.{slot}"] = np.array(value, dtype=None if slot == "step" else moments)
        self.slots = slots
        if f"{prefix}.lr" in state:
            self.lr = float(np.asarray(state[f"{prefix}.lr"]))

    def build(self, prefix: str) -> torch.optim.Adam:
        """The optimiser, holding the loaded slots (``prefix``: its name in the state)."""
        opt = torch.optim.Adam(self.params, lr=self.lr, eps=self.eps)
        if self.slots:
            optimizer_from_numpy(prefix, opt, self.state(prefix))
        return opt


def optimizer_to_numpy(prefix: str, opt: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    sd = opt.state_dict()
    out = {f"{prefix}.lr": np.asarray(opt.param_groups[0]["lr"], np.float64)}
    for idx, slots in sd["state"].items():
        for key, value in slots.items():
            out[f"{prefix}.{idx}.{key}"] = (value.detach().cpu().numpy().copy() if torch.is_tensor(value)
                                            else np.asarray(value))
    return out


def saved_slots(prefix: str, state: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """``{parameter index: {slot: value}}`` of the optimiser slots ``{prefix}.{i}.{slot}`` in ``state``."""
    slots: dict[int, dict[str, Any]] = {}
    for key, value in state.items():
        if key.startswith(prefix + ".") and key != f"{prefix}.lr":
            idx, slot = key[len(prefix) + 1:].split(".", 1)
            slots.setdefault(int(idx), {})[slot] = value
    return slots


def optimizer_from_numpy(prefix: str, opt: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    sd = opt.state_dict()
    sd["state"] = {idx: {slot: torch.as_tensor(np.asarray(value)) for slot, value in saved.items()}
                   for idx, saved in saved_slots(prefix, state).items()}
    if f"{prefix}.lr" in state:
        for group in sd["param_groups"]:
            group["lr"] = float(np.asarray(state[f"{prefix}.lr"]))
    opt.load_state_dict(sd)


def maybe_compile(fn: Callable, enabled: bool, what: str) -> Callable:
    """``torch.compile(fn)`` when ``enabled``, else ``fn``.

    Compilation happens lazily at the first call; if it fails there (no C++ toolchain for
    inductor, an unsupported op, ...) a RuntimeWarning says so and ``fn`` runs eagerly from then
    on, so ``compile=True`` can slow an agent down but never break it.

    Example:
        >>> import torch
        >>> square = maybe_compile(lambda x: x * x, enabled=False, what="square")
        >>> square(torch.tensor(3.0)).item()
        9.0
    """
    if not enabled:
        return fn
    try:
        compiled = torch.compile(fn)
    except Exception as exc:  # pragma: no cover - depends on the installation
        warnings.warn(f"torch.compile of the {what} is unavailable ({type(exc).__name__}: {exc}); running eagerly",
                      RuntimeWarning, stacklevel=2)
        return fn
    state = {"fn": compiled}

    def call(*args, **kwargs):
        if state["fn"] is compiled:
            try:
                return compiled(*args, **kwargs)
            except Exception as exc:
                warnings.warn(f"torch.compile of the {what} failed ({type(exc).__name__}: {exc}); "
                              f"running eagerly", RuntimeWarning, stacklevel=2)
                state["fn"] = fn
        return fn(*args, **kwargs)

    return call
