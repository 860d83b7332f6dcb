"""DQN in numpy: the Q-networks, the TD target and one gradient step with a hand-written backward pass;
the rest is :class:`~marl_note.agents.dqn.DQNCore`.

The step is the torch backend's, written out: the TD target from the target network (the action
chosen by the online network with ``double``, among the legal next actions), the Huber or squared
loss weighted by the importance weights and averaged, its gradient through the Q-network, clipping
to ``max_grad_norm`` and torch's Adam. From the same weights and batch it gives the same weights as
:class:`marl_note.agents.torch.DQN` to float32 rounding.

Rows whose episode ended (or whose next state has no legal action) have no next-state value: when a third
of the batch or more is such rows, the next-state passes skip them (their ``0 * Q`` term is 0 whatever ``Q``
is): 4-6% of a step on the connect four recipe, where nearly half the sampled transitions end a game.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.dqn import DQNConfig, DQNCore
from marl_note.agents.numpy.layers import MLP, Dense
from marl_note.agents.numpy.networks import NumpyNetworks

# The fewest ended rows (a fraction of the batch) for which the next-state passes leave them out: gathering the
# other rows costs a few microseconds, about what a 64-64 network's passes save at a third of a batch of 64
# (numpy's step 0.97x as long with half the rows ended; a 256-256 step 0.97x at 30%, 0.94x at 50%).
SKIP_ENDED = 1 / 3

__all__ = ["DQN", "DQNNetworks", "DuelingQNet", "first_rows"]


def first_rows(cache: Any, n: int) -> Any:
    """A forward pass's cache cut to its first ``n`` rows (views): the backward pass of part of a batch."""
    if isinstance(cache, np.ndarray):
        return cache[:n]
    if isinstance(cache, (tuple, list)):
        return type(cache)(first_rows(c, n) for c in cache)
    return cache


class DuelingQNet:
    """``Q = V(h) + A(h, a) - mean_a A(h, a)`` with ``h = torso(s)`` (every torso layer activated), over
    the arrays ``{prefix}.torso.*``, ``{prefix}.value.*`` and ``{prefix}.advantage.*``.

    Example:
        >>> from marl_note.agents.dqn import q_net_weights
        >>> w = q_net_weights("q", 3, 2, DQNConfig(hidden_sizes=(4,), dueling=True), np.random.default_rng(0))
        >>> net = DuelingQNet(w, "q", "relu")
        >>> q, cache = net.forward(np.ones((5, 3), np.float32))
        >>> grads = {}; net.backward(np.ones_like(q), cache, grads)
        >>> q.shape, len(grads) == len(net.keys)
        ((5, 2), True)
    """

    def __init__(self, params: Mapping[str, np.ndarray], prefix: str, activation: str):
        self.torso = MLP(params, f"{prefix}.torso", activation, out_activation=True)
        self.value = Dense(params, f"{prefix}.value")
        self.advantage = Dense(params, f"{prefix}.advantage")

    @staticmethod
    def param_keys(params: Mapping[str, np.ndarray], prefix: str, activation: str) -> list[str]:
        """The network's array names in PyTorch's ``parameters()`` order."""
        return DuelingQNet(params, prefix, activation).keys

    @property
    def keys(self) -> list[str]:
        heads = [k for layer in (self.value, self.advantage) for k in (layer.wkey, layer.bkey)]
        return self.torso.keys + heads

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, Any]:
        h, torso = self.torso.forward(x)
        v, vc = self.value.forward(h)
        a, ac = self.advantage.forward(h)
        return v + a - a.mean(axis=1, keepdims=True), (torso, vc, ac)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.predict(x)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The Q-values alone (no cache for a backward pass)."""
        h = self.torso.predict(x)
        v, a = self.value.predict(h), self.advantage.predict(h)
        return v + a - a.mean(axis=1, keepdims=True)

    def backward(self, grad_q: np.ndarray, cache: Any, grads: dict[str, np.ndarray]) -> None:
        torso, vc, ac = cache
        from_value = self.value.backward(grad_q.sum(axis=1, keepdims=True), vc, grads)
        from_advantage = self.advantage.backward(grad_q - grad_q.mean(axis=1, keepdims=True), ac, grads)
        assert from_value is not None and from_advantage is not None
        self.torso.backward(from_value + from_advantage, torso, grads)


class DQNNetworks(NumpyNetworks):
    """Online and target Q-networks, Adam, the TD target and one checked gradient step (numpy in and out)."""

    def __init__(self, weights: Mapping[str, np.ndarray], config: DQNConfig, device: Any = "cpu",
                 compile: bool = False, user: Any = None):
        super().__init__(device, compile)
        if user is not None:
            self.refuse_torso("DQN", "a torso factory")
        if config.torso == "conv":
            self.refuse_torso("DQN", "conv")
        self.config = config
        self.q_net = self.q_network("q_net", weights)
        self.target_net = self.q_network("target_net", weights)
        self.adam("optimizer", ["q_net"], lr=config.lr)
        self._arange: np.ndarray | None = None

    def q_network(self, name: str, weights: Mapping[str, np.ndarray]) -> MLP | DuelingQNet:
        if not self.config.dueling:
            return self.mlp(name, weights, self.config.activation)
        keys = DuelingQNet.param_keys(weights, name, self.config.activation)
        return DuelingQNet(self.add(name, weights, keys), name, self.config.activation)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return self.q_net(np.asarray(obs, np.float32))

    def _target(self, b: Mapping[str, np.ndarray], live: np.ndarray | None, chooser: np.ndarray | None = None
                ) -> np.ndarray:
        """The TD target ``r + discount * alive * Q_target(s', a*)``, the next-state passes over the rows ``live``
        only (:meth:`live_rows`; None: every row), the others' ``Q`` taken as 0; ``chooser``: the online Q-values
        at those rows' ``next_obs`` when already computed (double)."""
        next_obs, legal = np.asarray(b["next_obs"], np.float32), b["legal"]
        if live is not None:
            next_obs, legal = next_obs[live], legal[live]
        q_next = self.target_net(next_obs)
        if chooser is None:
            chooser = self.q_net(next_obs) if self.config.double else q_next
        best = (chooser if legal.all() else np.where(legal, chooser, -np.inf)).argmax(axis=1)
        value = q_next[self._rows(len(best)), best]
        if live is not None:  # the ended rows' Q as 0: their target r, as from any finite Q
            full = np.zeros(len(b["rew"]), value.dtype)
            full[live] = value
            value = full
        return b["rew"] + b["discount"] * b["alive"] * value

    @staticmethod
    def live_rows(alive: np.ndarray) -> np.ndarray | None:
        """The rows whose next state has a value (``alive`` not 0), when at least :data:`SKIP_ENDED` of the
        batch has none: the next-state passes then leave the others out. None: every row is evaluated (a few
        ended rows cost less to evaluate than to gather the rest)."""
        live = np.flatnonzero(alive)
        return None if len(alive) - len(live) < SKIP_ENDED * len(alive) else live

    def _rows(self, n: int) -> np.ndarray:
        """``np.arange(n)``, kept for the batch size (read only: the row index of a gather)."""
        rows = self._arange
        if rows is None or len(rows) != n:
            rows = self._arange = np.arange(n)
        return rows

    def td_target(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        return self._target(arrays, self.live_rows(arrays["alive"]))

    def _loss(self, b: Mapping[str, np.ndarray], target: np.ndarray, forward: tuple[np.ndarray, Any] | None = None,
              grads: dict[str, np.ndarray] | None = None
              ) -> tuple[float, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(mean weighted loss, q of the taken actions, |q - target|, gradients by array name)``; ``forward``:
        the online network's ``(output, cache)`` at ``obs`` when already computed; ``grads``: where the gradients go
        (:meth:`~marl_note.agents.numpy.networks.NumpyNetworks.grads` for a step; a new dict without)."""
        q_all, cache = forward if forward is not None else self.q_net.forward(np.asarray(b["obs"], np.float32))
        rows = self._rows(len(q_all))
        act = np.asarray(b["act"], np.int64)
        q = q_all[rows, act]
        diff = q - target
        weights = np.asarray(b["weights"], q_all.dtype)
        abs_diff = np.abs(diff)  # |TD|, and the Huber loss's |diff|
        if self.config.criterion == "huber":  # smooth_l1 with beta 1
            small = abs_diff < 1.0
            losses = abs_diff - 0.5
            half_sq = 0.5 * diff
            half_sq *= diff  # 0.5 * diff * diff
            np.copyto(losses, half_sq, where=small)  # np.where(small, 0.5 * diff * diff, |diff| - 0.5)
            dloss = np.sign(diff)
            np.copyto(dloss, diff, where=small)  # np.where(small, diff, sign(diff))
        else:
            losses, dloss = diff * diff, 2.0 * diff
        n = len(q)
        losses *= weights
        loss = float(np.add.reduce(losses) / n)  # (weights * losses).sum() / n
        grad_q = np.zeros_like(q_all)
        dloss *= weights
        dloss /= n
        grad_q[rows, act] = dloss  # weights * dloss / n
        grads = {} if grads is None else grads
        self.q_net.backward(grad_q, cache, grads)
        return loss, q, abs_diff, grads

    def grad_sq_norm(self, arrays: Mapping[str, np.ndarray]) -> float:
        """``|G_B|^2``: the squared norm of the gradient of the batch's mean loss over the online
        network's parameters, unclipped, in float64; nothing is written."""
        *_, grads = self._loss(arrays, self._target(arrays, self.live_rows(arrays["alive"])))
        return float(sum(np.square(g, dtype=np.float64).sum() for g in grads.values()))

    def train_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int
                   ) -> tuple[dict[str, float], np.ndarray]:
        """One Adam step on the batch; returns ``(metrics, |TD| per row)``. Non-finite steps raise, unwritten."""
        forward, chooser, live = None, None, self.live_rows(arrays["alive"])
        if self.config.double:  # one pass of the online network over obs and next_obs together
            obs, next_obs = np.asarray(arrays["obs"], np.float32), np.asarray(arrays["next_obs"], np.float32)
            both, cache = self.q_net.forward(np.concatenate([obs, next_obs if live is None else next_obs[live]]))
            n = len(obs)
            forward, chooser = (both[:n], first_rows(cache, n)), both[n:]
        target = self._target(arrays, live, chooser)
        loss, q, td_abs, grads = self._loss(arrays, target, forward, self.grads("optimizer"))
        self.step("optimizer", loss, grads, self.config.max_grad_norm, who, update)
        return {"loss": loss, "q_mean": float(q.sum() / len(q)), "td_abs": float(td_abs.sum() / len(q))}, td_abs


class DQN(DQNCore):
    """DQN in numpy; arguments, behaviour and state as :class:`~marl_note.agents.dqn.DQNCore`.

    MLP and dueling Q-networks only (conv and user torsos: the torch or tf ``DQN``); ``device``
    is the CPU. The checkpoints are the torch and tf backends' (same keys, layouts and optimiser
    slots), so a numpy-trained agent restores in either and back.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), hidden_sizes=(8,), dueling=True, seed=0)
        >>> agent.q_values(np.zeros((2, 4))).shape, sorted(agent.state_dict())[-3:]
        ((2, 3), ['target_net.value.bias', 'target_net.value.weight', 'updates'])
    """

    Networks = DQNNetworks
