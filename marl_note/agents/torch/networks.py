"""The PyTorch side of an agent: modules built from numpy weights, Adam optimisers, numpy state.

:class:`TorchNetworks` is the base of every algorithm's networks class (``DQNNetworks``, ...). An
algorithm's subclass builds its modules from the numpy weights its core drew
(:mod:`marl_note.agents.networks`), and adds forward passes that take and return numpy and a
``train_step`` on a numpy batch; this base keeps the names, the optimisers and the numpy state.

Example:
    >>> import numpy as np
    >>> from marl_note.agents.networks import mlp_weights
    >>> nets = TorchNetworks()
    >>> q = nets.mlp("q_net", mlp_weights("q_net", 3, (4,), 2, np.random.default_rng(0)), "relu")
    >>> nets.adam("optimizer", ["q_net"], lr=1e-3)
    >>> sorted(nets.state_dict())[:3], nets.weight_names
    (['optimizer.lr', 'q_net.0.bias', 'q_net.0.weight'], ('q_net',))
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from marl_note.agents.networks import ACTIVATIONS
from marl_note.agents.numpy_policy import named_by
from marl_note.agents.torch.common import (
    PendingAdam,
    checked_step,
    module_from_numpy,
    module_to_numpy,
    optimizer_from_numpy,
    optimizer_to_numpy,
)

__all__ = ["TorchNetworks", "ACTIVATION_MODULES", "ConvTorso", "conv_from_numpy"]

ACTIVATION_MODULES = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU}
assert set(ACTIVATION_MODULES) == set(ACTIVATIONS)


class ConvTorso(nn.Sequential):
    """``Conv2d -> act -> ...`` on channels-last images ``[B, H, W, C]``, flattened to ``[B, C' * H' * W']``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 3, 1, 2)).flatten(1)


def conv_from_numpy(prefix: str, weights: Mapping[str, np.ndarray], layers: Sequence[tuple[int, int, int, int]],
                    activation: str) -> ConvTorso:
    """The :class:`ConvTorso` holding ``{prefix}.{2j}.weight/bias`` (``layers``: channels, kernel, stride, padding)."""
    mods: list[nn.Module] = []
    for j, (_, k, s, p) in enumerate(layers):
        w = np.asarray(weights[f"{prefix}.{2 * j}.weight"], np.float32)
        b = np.asarray(weights[f"{prefix}.{2 * j}.bias"], np.float32)
        conv = nn.utils.skip_init(nn.Conv2d, w.shape[1], w.shape[0], k, stride=s, padding=p)
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(w))
            conv.bias.copy_(torch.from_numpy(b))
        mods += [conv, ACTIVATION_MODULES[activation]()]
    return ConvTorso(*mods)


def sequential_from_numpy(prefix: str, weights: Mapping[str, np.ndarray], activation: str,
                          conv: Sequence[tuple[int, int, int, int]] | None = None) -> nn.Sequential:
    """``Linear -> act -> ... -> Linear`` holding the arrays ``{prefix}.{2j}.weight/bias`` of ``weights``,
    behind the conv torso ``{prefix}.conv`` when ``conv`` (its layers) is given."""
    if activation not in ACTIVATION_MODULES:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATION_MODULES)}")
    layers: list[nn.Module] = []
    j = 0
    while f"{prefix}.{2 * j}.weight" in weights:
        if j:
            layers.append(ACTIVATION_MODULES[activation]())
        w = np.asarray(weights[f"{prefix}.{2 * j}.weight"], np.float32)
        b = np.asarray(weights[f"{prefix}.{2 * j}.bias"], np.float32)
        layer = nn.utils.skip_init(nn.Linear, w.shape[1], w.shape[0])
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(w))
            layer.bias.copy_(torch.from_numpy(b))
        layers.append(layer)
        j += 1
    if not layers:
        raise KeyError(f"no layers named {prefix}.0.weight in the weights")
    if conv:
        torso = conv_from_numpy(f"{prefix}.conv", weights, conv, activation)
        return nn.Sequential(OrderedDict([("conv", torso), *((str(i), m) for i, m in enumerate(layers))]))
    return nn.Sequential(*layers)


class TorchNetworks:
    """Named modules and optimisers of one agent; numpy in, numpy out.

    ``weight_names`` are the modules whose arrays are weights (``save_param``); target networks
    are modules too. ``state_dict()`` is every module's arrays under its name and every optimiser's
    slots under its name, in PyTorch's layout (the TF networks write the same keys).
    """

    numpy_conv_acting = False  # conv torsos act in torch: faster than numpy at the default layer sizes

    @staticmethod
    def restorable_device(device: Any, where: str = "the checkpoint") -> Any:
        """The device a checkpoint recorded, or the CPU (with a warning) where this machine has no such
        accelerator: a GPU-trained agent restores on a machine without one (``restore(path, device=...)``
        chooses another). Called by ``restore`` when no ``device`` is given."""
        if device == "auto":
            return device
        try:
            wanted = torch.device(device)
        except (RuntimeError, TypeError):
            return device  # the constructor names what is wrong with it
        if wanted.type == "cuda" and not torch.cuda.is_available():
            missing = "CUDA"
        elif wanted.type == "mps" and not torch.backends.mps.is_available():
            missing = "MPS"
        else:
            return device
        warnings.warn(f"{where} was saved on device {str(wanted)!r} and this machine has no {missing} device: "
                      f"restoring on the CPU (pass device=... to restore() to choose)", RuntimeWarning, stacklevel=4)
        return "cpu"

    def __init__(self, device: Any = "cpu", compile: bool = False):
        if device == "auto":  # Stable-Baselines3's name: the GPU where there is one
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.compile = bool(compile)
        self.modules: dict[str, nn.Module] = {}
        # name -> a torch optimiser, or the Adam it will be at its first step (see PendingAdam)
        self.optimizers: dict[str, torch.optim.Optimizer | PendingAdam] = {}
        self.version = 0  # counts weight changes (optimiser steps, syncs, loads): the numpy copy's freshness
        # called with an optimiser's parameters between backward and the checked step (gradient averaging
        # over ranks: marl_note.contrib.distributed.torch.ddp); None in one process. What it returns, a noise
        # measurement (mean own |g_r|^2, |g|^2 averaged, ranks), is kept per optimiser for replica_grad_sq
        self.grad_hook: Callable[[list[torch.Tensor]], Any] | None = None
        self._replica_noise: dict[str, tuple[float, float, int]] = {}

    # -- building --------------------------------------------------------------------------------------
    def mlp(self, name: str, weights: Mapping[str, np.ndarray], activation: str, trainable: bool = True,
            conv: Sequence[tuple[int, int, int, int]] | None = None) -> nn.Sequential:
        """Register and return the MLP ``name`` built from ``weights`` (a target net: ``trainable=False``),
        behind a conv torso ``{name}.conv`` with ``conv`` layers (channels, kernel, stride, padding)."""
        net = sequential_from_numpy(name, weights, activation, conv).to(self.device)
        net.requires_grad_(trainable)
        self.modules[name] = net
        return net

    def user_mlp(self, name: str, weights: Mapping[str, np.ndarray], activation: str, user: Any,
                 trainable: bool = True) -> nn.Sequential:
        """Register and return the MLP ``name`` behind a user-supplied torso ``{name}.user``: ``user`` is
        ``(factory, input shape, seed)``, ``factory(input_shape)`` an ``nn.Module`` giving features."""
        factory, shape, seed = user
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            torso = factory(tuple(shape))
        if not isinstance(torso, nn.Module):
            raise TypeError(f"the torso factory returned a {type(torso).__name__}, expected a torch.nn.Module")
        head = sequential_from_numpy(name, weights, activation)
        net = nn.Sequential(OrderedDict([("user", torso), ("flatten", nn.Flatten()),
                                         *((str(i), m) for i, m in enumerate(head))])).to(self.device)
        net.requires_grad_(trainable)
        self.modules[name] = net
        return net

    @staticmethod
    def user_torso_width(factory: Any, shape: tuple[int, ...]) -> int:
        """Width of the flat features ``factory(shape)`` gives (one probe batch of zeros)."""
        torso = factory(tuple(shape))
        if not isinstance(torso, nn.Module):
            raise TypeError(f"the torso factory returned a {type(torso).__name__}, expected a torch.nn.Module")
        with torch.no_grad():
            return int(torso(torch.zeros(1, *shape)).flatten(1).shape[1])

    def adam(self, name: str, modules: Iterable[str], lr: float, eps: float = 1e-8) -> None:
        """Register Adam ``name`` over the parameters of ``modules`` (built at its first step: :meth:`optimizer`)."""
        self.adam_over(name, [p for m in modules for p in self.modules[m].parameters()], lr, eps)

    def adam_over(self, name: str, params: Iterable[torch.Tensor], lr: float, eps: float = 1e-8) -> None:
        """Register Adam ``name`` over ``params`` (built at its first step: :meth:`optimizer`)."""
        self.optimizers[name] = PendingAdam(params, lr, eps)

    def optimizer(self, name: str) -> torch.optim.Optimizer:
        """Optimiser ``name``, built now if it has not taken a step yet."""
        opt = self.optimizers[name]
        if isinstance(opt, PendingAdam):
            opt = self.optimizers[name] = opt.build(name)
        return opt

    def optimized_params(self, name: str) -> list[torch.Tensor]:
        """The parameters optimiser ``name`` steps, in order (without building it)."""
        opt = self.optimizers[name]
        if isinstance(opt, PendingAdam):
            return list(opt.params)
        return [p for group in opt.param_groups for p in group["params"]]

    def tensor(self, x: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), device=self.device).to(dtype)

    @property
    def weight_names(self) -> tuple[str, ...]:
        return tuple(self.modules)

    # -- one checked optimiser step ------------------------------------------------------------------
    def step(self, optimizer: str, loss: torch.Tensor, max_grad_norm: float | None, who: str, update: int,
             name: str = "loss") -> None:
        """Backward, clip, and step ``optimizer`` unless the loss or gradient norm is not finite.

        Raises :class:`~marl_note.types.NonFiniteError` naming ``who`` and ``update`` before any
        weight is written.
        """
        opt = self.optimizer(optimizer)
        self.version += 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for group in opt.param_groups for p in group["params"]]
        if self.grad_hook is not None:
            measured = self.grad_hook(params)
            if measured is not None:
                self._replica_noise[optimizer] = measured
        checked_step(opt, params, loss, max_grad_norm, who, update, name)

    def replica_grad_sq(self, optimizer: str, rows: int) -> tuple[float, int, float, int] | None:
        """After a step averaged over several ranks: ``(|g_small|^2, b_small, |g_big|^2, b_big)`` of
        ``optimizer``'s last step, the small batch this rank's ``rows``, the big one every rank's
        (``rows * ranks``), the small norm the mean over the ranks; None otherwise (taken once)."""
        measured = self._replica_noise.pop(optimizer, None)
        if measured is None or rows < 1 or measured[2] < 2:
            return None
        own, big, ranks = measured
        return own, int(rows), big, int(rows) * int(ranks)

    @torch.no_grad()
    def sync(self, target: str, source: str, tau: float | None = None) -> None:
        """Copy ``source`` into ``target`` (``tau=None``) or move it ``tau`` of the way (Polyak)."""
        self.version += 1
        for t, s in zip(self.modules[target].parameters(), self.modules[source].parameters(), strict=True):
            if tau is None:
                t.copy_(s)
            else:
                t.lerp_(s, tau)

    # -- learning rates --------------------------------------------------------------------------------
    def learning_rates(self) -> dict[str, float]:
        """``{optimizer name: learning rate}`` (a torch optimiser's first parameter group's, which the state saves)."""
        return {name: opt.lr if isinstance(opt, PendingAdam) else float(opt.param_groups[0]["lr"])
                for name, opt in self.optimizers.items()}

    def set_learning_rate(self, name: str, lr: float) -> None:
        """Set every parameter group of optimiser ``name`` to ``lr`` (checked by the caller)."""
        opt = self.optimizers[name]
        if isinstance(opt, PendingAdam):
            opt.lr = float(lr)
            return
        for group in opt.param_groups:
            if torch.is_tensor(group["lr"]):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    # -- numpy state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, module in self.modules.items():
            out.update(module_to_numpy(name, module))
        for name, opt in self.optimizers.items():
            out.update(opt.state(name) if isinstance(opt, PendingAdam) else optimizer_to_numpy(name, opt))
        return out

    def numpy_weights(self, prefixes: Iterable[str]) -> dict[str, np.ndarray]:
        """Copies of the weight arrays named by ``prefixes`` (see :func:`~marl_note.agents.numpy_policy.named_by`)."""
        prefixes = tuple(prefixes)
        out: dict[str, np.ndarray] = {}
        for name, module in self.modules.items():
            if named_by(prefixes, name, module=True):
                out.update((k, v) for k, v in module_to_numpy(name, module).items() if named_by(prefixes, k))
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.version += 1
        for name, module in self.modules.items():
            module_from_numpy(name, module, state)
        for name, opt in self.optimizers.items():
            if isinstance(opt, PendingAdam):
                opt.load(name, state)
            else:
                optimizer_from_numpy(name, opt, state)

    def optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        """Optimiser name -> the shapes of its parameters, in order (what its saved slots must have)."""
        return {name: [tuple(p.shape) for p in self.optimized_params(name)] for name in self.optimizers}
