"""Value decomposition (VDN, QMIX) in TensorFlow/Keras: the agents' Q-networks, the mixer and one
gradient step as one graph.

Everything else (seats, exploration, the joint replay, batches, the schedule, state) is the numpy
core :class:`marl_note.agents.qmix.QMIXCore`; weights, optimiser moments and exploration state
move between this backend and PyTorch's (``state_dict`` keys and layouts are the same).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from marl_note.agents.qmix import MIXER_PARTS, QMIXConfig, QMIXCore, VDNCore
from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import TFNetworks

__all__ = ["QMIX", "QMIXNetworks", "VDN"]

BATCH_KEYS = ("obs", "next_obs", "next_legal", "act", "alive", "next_live", "state", "next_state", "rew", "live",
              "weight")


class QMIXNetworks(TFNetworks):
    """The agents' Q-networks (``q_net`` shared, or ``<agent>.q_net`` per seat) and their targets,
    QMIX's hypernetworks (``mixer.<part>``, ``target_mixer.<part>``) and one Adam (``optimizer``);
    the gradient step is one ``tf.function`` (XLA with ``compile=True``).

    Example (the core builds them; forward passes take and return numpy):
        >>> import gymnasium as gym
        >>> q = QMIX({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,))
        >>> q.nets.q_values("q_net", np.zeros((5, 3), np.float32)).shape, q.nets.weight_names[:2]
        ((5, 3), ('q_net', 'target_net'))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, agents: Sequence[str], net_of: Mapping[str, str],
                 config: QMIXConfig, device: Any = "cpu", compile: bool = False):
        super().__init__(device, compile)
        self.agents, self.cfg = tuple(agents), config
        self.gamma_var = tf.Variable(np.float32(config.gamma), trainable=False, name="gamma")
        self.online = [net_of[a] for a in self.agents]
        self.target = [QMIXCore.target_name(name) for name in self.online]
        names = list(OrderedDict.fromkeys(self.online))
        for name in names:
            self.mlp(name, weights, config.activation)
            self.mlp(QMIXCore.target_name(name), weights, config.activation)
        self.pairs = [(QMIXCore.target_name(name), name) for name in names]
        if config.mixer == "qmix":
            for part in MIXER_PARTS:
                self.mlp(f"mixer.{part}", weights, "relu")
                self.mlp(f"target_mixer.{part}", weights, "relu")
                self.pairs.append((f"target_mixer.{part}", f"mixer.{part}"))
            names += [f"mixer.{part}" for part in MIXER_PARTS]
        self.adam("optimizer", names, config.lr)
        n = len(self.agents)
        in_dims = [int(weights[f"{name}.0.weight"].shape[1]) for name in self.online]
        outs = [int(weights[f"{name}.{2 * len(config.hidden_sizes)}.weight"].shape[0]) for name in self.online]
        per = lambda dims: [tf.TensorSpec([None, d], tf.float32) for d in dims]  # noqa: E731
        state_dim = sum(int(d) for d in in_dims) if config.mixer == "vdn" else \
            int(weights["mixer.hyper_b1.0.weight"].shape[1])
        joint, row = tf.TensorSpec([None, n], tf.float32), tf.TensorSpec([None], tf.float32)
        states = tf.TensorSpec([None, None if config.mixer == "vdn" else state_dim], tf.float32)
        self._signature = [per(in_dims), per(in_dims), per(outs), tf.TensorSpec([None, n], tf.int64), joint, joint,
                           states, states, row, row, row]
        self._step = self.function(self._graph_step, self._signature)
        self._grad_sq_fn = self.function(self._graph_grad_sq, self._signature)
        self._target_fn = graph_function(self._graph_target, input_signature=self._signature)
        self._q_tot_fn = graph_function(self._graph_q_tot, input_signature=self._signature)
        self._forward = {name: graph_function(self.models[name].__call__,
                                           input_signature=[tf.TensorSpec([None, d], tf.float32)])
                         for name, d in zip(self.online, in_dims)}

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name == "gamma":
            self.gamma_var.assign(np.float32(value))

    def q_values(self, name: str, x: np.ndarray) -> np.ndarray:
        """Q-network ``name`` on its inputs (numpy ``[B, outputs]``)."""
        with tf.device(self.device):
            return self._forward[name](np.asarray(x, np.float32)).numpy()

    def mix(self, q, state, target: bool = False):
        """``Q_tot`` ``[B]`` of the agents' chosen Q-values ``q`` ``[B, n]``: their sum (VDN) or QMIX's
        monotonic mixing on ``state`` (the online or ``target`` mixer)."""
        if self.cfg.mixer == "vdn":
            return tf.reduce_sum(q, axis=1)
        prefix = "target_mixer" if target else "mixer"
        nets = {part: self.models[f"{prefix}.{part}"] for part in MIXER_PARTS}
        n, e = len(self.agents), self.cfg.mixing_embed
        w1 = tf.reshape(tf.abs(nets["hyper_w1"](state)), [-1, n, e])
        b1 = tf.reshape(nets["hyper_b1"](state), [-1, 1, e])
        hidden = tf.nn.elu(tf.matmul(tf.reshape(q, [-1, 1, n]), w1) + b1)
        w2 = tf.reshape(tf.abs(nets["hyper_w2"](state)), [-1, e, 1])
        return tf.reshape(tf.matmul(hidden, w2), [-1]) + tf.reshape(nets["value"](state), [-1])

    def _chosen(self, obs, act, alive):
        qs = [tf.gather(self.models[name](obs[j], training=True), act[:, j:j + 1], batch_dims=1)
              for j, name in enumerate(self.online)]
        return tf.concat(qs, axis=1) * alive

    def _graph_target(self, obs, next_obs, next_legal, act, alive, next_live, state, next_state, rew, live, weight):
        picked = []
        for j, (name, tname) in enumerate(zip(self.online, self.target)):
            x = next_obs[j]
            q_next = self.models[tname](x)
            chooser = self.models[name](x) if self.cfg.double else q_next
            best = tf.argmax(tf.where(next_legal[j] > 0, chooser, tf.constant(-np.inf, chooser.dtype)), axis=1)
            picked.append(tf.gather(q_next, best[:, None], batch_dims=1))
        q_next = tf.concat(picked, axis=1) * next_live
        return tf.stop_gradient(rew + self.gamma_var * live * self.mix(q_next, next_state, target=True))

    def _graph_q_tot(self, obs, next_obs, next_legal, act, alive, next_live, state, next_state, rew, live, weight):
        return self.mix(self._chosen(list(obs), act, alive), state)

    def _loss(self, args):
        target = self._graph_target(*args)
        obs, act, alive, state, weight = args[0], args[3], args[4], args[6], args[10]
        q_tot = self.mix(self._chosen(list(obs), act, alive), state)
        loss = tf.reduce_sum(weight * tf.square(q_tot - target)) / tf.maximum(tf.reduce_sum(weight), 1.0)
        return loss, q_tot, target

    def _graph_step(self, *args):
        weight = args[10]
        with tf.GradientTape() as tape:
            loss, q_tot, target = self._loss(args)
        ok, checks = self.apply("optimizer", tape, loss, self.cfg.max_grad_norm)
        denom = tf.maximum(tf.reduce_sum(weight), 1.0)
        q_mean = tf.reduce_sum(weight * q_tot) / denom
        td = tf.reduce_sum(weight * tf.abs(target - q_tot)) / denom
        return loss, q_mean, td, checks

    def _graph_grad_sq(self, *args):
        variables = [v for _, v, _ in self.optimizers["optimizer"][1]]
        with tf.GradientTape() as tape:
            loss, _, _ = self._loss(args)
        grads = tape.gradient(loss, variables)
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    def _args(self, batch: Mapping[str, Any]) -> list:
        return [batch[k] for k in BATCH_KEYS]

    def td_target(self, batch: Mapping[str, Any]) -> np.ndarray:
        with tf.device(self.device):
            return self._target_fn(*self._args(batch)).numpy()

    def q_tot(self, batch: Mapping[str, Any]) -> np.ndarray:
        with tf.device(self.device):
            return self._q_tot_fn(*self._args(batch)).numpy()

    def grad_sq_norm(self, batch: Mapping[str, Any]) -> float:
        """``|G_B|^2`` of the TD loss over the online Q-networks and mixer (float64; a graph of its own,
        nothing written)."""
        with tf.device(self.device):
            return float(self._grad_sq_fn(*self._args(batch)).numpy())

    def train_step(self, batch: Mapping[str, Any], *, who: str, update: int) -> dict[str, float]:
        """One Adam step of the TD loss on a numpy batch of ``QMIXCore.prepare_batch``, as one graph."""
        with tf.device(self.device):
            loss, q_mean, td, checks = self._step(*self._args(batch))
        self.check(who, update, step_names("TD loss"), checks)
        return {"loss": float(loss), "q_tot_mean": float(q_mean), "td_abs": float(td)}

    def sync_targets(self, tau: float | None) -> None:
        """Copy the online Q-networks and mixer into their targets (``tau=None``) or move them ``tau`` of the way."""
        for target, source in self.pairs:
            self.sync(target, source, tau)


class QMIX(QMIXCore):
    """QMIX (and VDN with ``mixer="vdn"``) in TensorFlow/Keras; see :class:`~marl_note.agents.qmix.QMIXCore`.

    Example:
        >>> import gymnasium as gym
        >>> q = QMIX({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(8,), seed=0)
        >>> q.q_values("a", np.zeros((4, 2), np.float32)).shape
        (4, 3)
    """

    Networks = QMIXNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(QMIXCore)


class VDN(VDNCore):
    """VDN in TensorFlow/Keras: :class:`QMIX` with the sum mixer by default (see
    :class:`~marl_note.agents.qmix.VDNCore`).

    Example:
        >>> import gymnasium as gym
        >>> VDN({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,)).mixer
        'vdn'
    """

    Networks = QMIXNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(VDNCore)
