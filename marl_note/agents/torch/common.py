"""Plumbing shared by the PyTorch agents: observation encoding, MLPs, numpy state.

Everything that leaves this package is numpy; nothing here touches global torch settings
(no ``torch.manual_seed``, no ``set_num_threads``): randomness comes from a per-agent
``numpy.random.Generator`` and a per-agent ``torch.Generator`` derived from ``seed``.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl_note.agents.checks import ObsEncoder as NumpyObsEncoder
from marl_note.agents.checks import check_mask, check_transitions, flat_obs_dim  # noqa: F401 (re-exported)
from marl_note.agents.checks import raise_if_nonfinite_update
from marl_note.agents.noise import rng_state_from_array, rng_state_to_array
from marl_note.agents.saving import Saving

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU}


# --------------------------------------------------------------------------- observations

class ObsEncoder(NumpyObsEncoder):
    """Checks a batch of observations against the space and turns it into a float32 tensor.

    Box/MultiBinary/MultiDiscrete observations are flattened to ``[B, prod(shape)]`` and cast
    (int8 boards included); Discrete observations become one-hot rows. The checks are
    :class:`marl_note.agents.checks.ObsEncoder`'s.

    Example:
        >>> import gymnasium as gym, numpy as np, torch
        >>> enc = ObsEncoder(gym.spaces.Box(0, 1, (3, 3, 2), np.int8), torch.device("cpu"))
        >>> x = enc(np.zeros((4, 3, 3, 2), np.int8)); x.shape, x.dtype
        (torch.Size([4, 18]), torch.float32)
        >>> ObsEncoder(gym.spaces.Discrete(3), torch.device("cpu"))(np.array([2])).tolist()
        [[0.0, 0.0, 1.0]]
    """

    def __init__(self, space: gym.Space, device: torch.device):
        super().__init__(space)
        self.device = device

    def __call__(self, obs: Any, name: str = "obs") -> torch.Tensor:
        arr = self.check(obs, name)
        if isinstance(self.space, gym.spaces.Discrete):
            idx = torch.as_tensor(arr.astype(np.int64) - int(self.space.start), device=self.device)
            return nn.functional.one_hot(idx, self.dim).to(torch.float32)
        return torch.as_tensor(arr.reshape(len(arr), -1), device=self.device).to(torch.float32)


# --------------------------------------------------------------------------- networks

def mlp(in_dim: int, hidden_sizes: Iterable[int], out_dim: int | None, activation: str,
        generator: torch.Generator, init: str = "default", out_gain: float = 1.0) -> nn.Sequential:
    """``Linear -> act -> ... [-> Linear(out_dim)]`` initialised from ``generator``.

    ``init="default"`` draws weights and biases from U(-1/sqrt(fan_in), 1/sqrt(fan_in));
    ``init="orthogonal"`` uses orthogonal weights (gain sqrt(2) hidden, ``out_gain`` last) and zero
    biases, as is usual for PPO.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    last = in_dim
    sizes = [int(h) for h in hidden_sizes]
    if any(h <= 0 for h in sizes):
        raise ValueError(f"hidden_sizes must be positive, got {tuple(sizes)}")
    for h in sizes:
        layers += [_linear(last, h, generator, init, math.sqrt(2)), ACTIVATIONS[activation]()]
        last = h
    if out_dim is not None:
        layers.append(_linear(last, out_dim, generator, init, out_gain))
    return nn.Sequential(*layers)


def _linear(fan_in: int, fan_out: int, generator: torch.Generator, init: str, gain: float) -> nn.Linear:
    layer = nn.utils.skip_init(nn.Linear, fan_in, fan_out)  # no draw from the global torch rng
    with torch.no_grad():
        if init == "orthogonal":
            nn.init.orthogonal_(layer.weight, gain=gain, generator=generator)
            layer.bias.zero_()
        elif init == "default":
            bound = 1.0 / math.sqrt(fan_in)
            nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
        else:
            raise ValueError(f"unknown init {init!r}; use 'default' or 'orthogonal'")
    return layer


# --------------------------------------------------------------------------- checked optimiser steps

def grad_norm(params: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """Total 2-norm of the gradients of ``params`` (those that have one), before clipping to
    ``max_norm`` when it is given (``clip_grad_norm_``); no clipping when it is None."""
    params = [p for p in params if p.grad is not None]
    if max_norm is not None:
        return nn.utils.clip_grad_norm_(params, max_norm)
    return nn.utils.get_total_norm([p.grad for p in params])


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


def optimizer_to_numpy(prefix: str, opt: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    sd = opt.state_dict()
    out = {f"{prefix}.lr": np.asarray(opt.param_groups[0]["lr"], np.float64)}
    for idx, slots in sd["state"].items():
        for key, value in slots.items():
            out[f"{prefix}.{idx}.{key}"] = (value.detach().cpu().numpy().copy() if torch.is_tensor(value)
                                            else np.asarray(value))
    return out


def optimizer_from_numpy(prefix: str, opt: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    sd = opt.state_dict()
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        if not key.startswith(prefix + ".") or key == f"{prefix}.lr":
            continue
        idx, slot = key[len(prefix) + 1:].split(".", 1)
        slots.setdefault(int(idx), {})[slot] = torch.as_tensor(np.asarray(value))
    sd["state"] = slots
    if f"{prefix}.lr" in state:
        for group in sd["param_groups"]:
            group["lr"] = float(np.asarray(state[f"{prefix}.lr"]))
    opt.load_state_dict(sd)


class TorchAgent(Saving):
    """Shared base of the PyTorch agents: spaces, device, seeding, counters and numpy state.

    Subclasses list their networks in ``_nets`` (name -> module) and optimisers in ``_optims``
    and add their own scalar state through ``_extra_state`` / ``_load_extra_state``.

    Example:
        >>> import gymnasium as gym
        >>> base = TorchAgent(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0, device="cpu")
        >>> sorted(base.state_dict())
        ['agent_steps', 'rng', 'torch_rng', 'updates']
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int | None, device):
        if not isinstance(observation_space, gym.Space) or not isinstance(action_space, gym.Space):
            raise TypeError("observation_space and action_space must be gymnasium spaces, got "
                            f"{type(observation_space).__name__} and {type(action_space).__name__}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.encoder = ObsEncoder(observation_space, self.device)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(int(self.rng.integers(0, 2**63 - 1)))
        self.agent_steps = 0
        self.updates = 0
        self._nets: dict[str, nn.Module] = {}
        self._optims: dict[str, torch.optim.Optimizer] = {}

    def _extra_state(self) -> dict[str, np.ndarray]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def _optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return {name: [tuple(p.shape) for g in opt.param_groups for p in g["params"]]
                for name, opt in self._optims.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, optimiser slots, counters and rng states, as numpy arrays only."""
        out: dict[str, np.ndarray] = {}
        for name, net in self._nets.items():
            out.update(module_to_numpy(name, net))
        for name, opt in self._optims.items():
            out.update(optimizer_to_numpy(name, opt))
        out["agent_steps"] = np.asarray(self.agent_steps, np.int64)
        out["updates"] = np.asarray(self.updates, np.int64)
        out["rng"] = rng_state_to_array(self.rng)
        out["torch_rng"] = self.generator.get_state().numpy().copy()
        out.update(self._extra_state())
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, net in self._nets.items():
            module_from_numpy(name, net, state)
        for name, opt in self._optims.items():
            optimizer_from_numpy(name, opt, state)
        self.agent_steps = int(np.asarray(state["agent_steps"]))
        self.updates = int(np.asarray(state["updates"]))
        rng_state_from_array(self.rng, state["rng"])
        self.generator.set_state(torch.as_tensor(np.asarray(state["torch_rng"], np.uint8)))
        self._load_extra_state(state)
