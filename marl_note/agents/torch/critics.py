"""PyTorch critics ``Q(s, a)`` that take the action after the observation's torso (DDPG, SAC, MADDPG).

:class:`ObsActionNet` keeps the layout of :func:`~marl_note.agents.torch.networks.sequential_from_numpy`
(an optional conv torso ``conv`` then the Linear layers ``0, 2, ...``), so its state keys are the
MLP critic's (``critic.0.weight``, ...) plus ``critic.conv.*`` for images; only ``forward`` differs:
it takes ``(obs, act)`` and joins the action to the torso's flat features.

Example:
    >>> import numpy as np, torch
    >>> from marl_note.agents.networks import mlp_weights
    >>> w = mlp_weights("critic", 3 + 2, (8,), 1, np.random.default_rng(0))
    >>> q = obs_action_net("critic", w, "relu")
    >>> q(torch.zeros(4, 3), torch.zeros(4, 2)).shape, sorted(q.state_dict())[:2]
    (torch.Size([4, 1]), ['0.bias', '0.weight'])
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from marl_note.agents.torch.networks import TorchNetworks, sequential_from_numpy

__all__ = ["ObsActionNet", "obs_action_net", "register_critic"]


class ObsActionNet(nn.Sequential):
    """``mlp(cat(torso(obs), act))``: the conv torso ``conv`` (if any) reads the observation, the
    action joins its flat features, then the Linear layers run (as :class:`nn.Sequential` does)."""

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        h: torch.Tensor | None = None
        for name, module in self._modules.items():
            if name == "conv":
                obs = module(obs)
                continue
            h = module(torch.cat([obs, act], dim=1) if h is None else h)
        assert h is not None  # an ObsActionNet has at least one Linear layer
        return h


def obs_action_net(prefix: str, weights: Mapping[str, np.ndarray], activation: str,
                   conv: Sequence[tuple[int, int, int, int]] | None = None) -> ObsActionNet:
    """The :class:`ObsActionNet` holding ``{prefix}.*`` of ``weights`` (``conv``: its conv layers, or None)."""
    return ObsActionNet(OrderedDict(sequential_from_numpy(prefix, weights, activation, conv).named_children()))


def register_critic(nets: TorchNetworks, name: str, weights: Mapping[str, np.ndarray], activation: str,
                    conv: Sequence[tuple[int, int, int, int]] | None = None, trainable: bool = True) -> ObsActionNet:
    """Build the critic ``name`` as an :class:`ObsActionNet` on ``nets``' device and register it there."""
    net = obs_action_net(name, weights, activation, conv).to(nets.device)
    net.requires_grad_(trainable)
    nets.modules[name] = net
    return net
