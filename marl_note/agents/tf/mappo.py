"""MAPPO / IPPO in TensorFlow/Keras: the actors and critics built from numpy weights and one minibatch step.

Everything else is :class:`marl_note.agents.mappo.MAPPOCore`; the state_dict keys and layouts are the
PyTorch agent's, so checkpoints move between the backends.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from marl_note.agents.mappo import IPPOCore, MAPPOConfig, MAPPOCore
from marl_note.agents.tf.common import step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import TFNetworks

__all__ = ["IPPO", "MAPPO", "MAPPONetworks"]

BATCH_KEYS = ("x", "cx", "act", "mask", "old_logp", "adv", "ret", "old_v", "w")
_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


class MAPPONetworks(TFNetworks):
    """Per group (``""`` shared, or each agent): ``actor`` and ``critic`` models; one Adam ``optimizer``
    over all; the minibatch step is one ``tf.function`` (XLA with ``compile=True``).

    Example (the core builds them; forward passes take and return numpy):
        >>> import gymnasium as gym
        >>> m = MAPPO({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,), seed=0)
        >>> m.nets.logits("", np.zeros((5, 2), np.float32)).shape, m.nets.weight_names
        ((5, 3), ('actor', 'critic'))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, groups: Sequence[str], config: MAPPOConfig,
                 device: Any = "cpu", compile: bool = False):
        super().__init__(device, compile)
        self.groups, self.cfg = tuple(groups), config
        for g in self.groups:
            for net in ("actor", "critic"):
                self.mlp(MAPPOCore.net_name(g, net), weights, config.activation)
        self.adam("optimizer", list(self.models), config.lr, eps=1e-5)
        x_dims = [int(weights[f"{MAPPOCore.net_name(g, 'actor')}.0.weight"].shape[1]) for g in self.groups]
        n_act = [int(self.models[MAPPOCore.net_name(g, "actor")].layers[-1].units) for g in self.groups]
        c_dims = [int(weights[f"{MAPPOCore.net_name(g, 'critic')}.0.weight"].shape[1]) for g in self.groups]
        vec = [tf.TensorSpec([None], tf.float32)] * len(self.groups)
        self._signature = [[tf.TensorSpec([None, d], tf.float32) for d in x_dims],
                           [tf.TensorSpec([None, d], tf.float32) for d in c_dims],
                           [tf.TensorSpec([None], tf.int64)] * len(self.groups),
                           [tf.TensorSpec([None, d], tf.bool) for d in n_act], vec, vec, vec, vec, vec]
        self._train_fn = self.function(self._step, self._signature)
        self._grad_sq_fn = self.function(self._grad_sq, self._signature)

    # -- graph code --------------------------------------------------------------------------------
    def _log_softmax(self, group: str, x, mask):
        out = self.models[MAPPOCore.net_name(group, "actor")](x)
        return tf.nn.log_softmax(tf.where(mask, out, tf.constant(-np.inf, out.dtype)), axis=-1)

    def _loss(self, x, cx, act, mask, old_logp, adv, ret, old_v, w):
        cfg = self.cfg
        total = tf.zeros([])
        sums = [tf.zeros([]) for _ in _METRICS]
        for k, g in enumerate(self.groups):
            wk = w[k]
            denom = tf.maximum(tf.reduce_sum(wk), 1.0)
            logp_all = self._log_softmax(g, x[k], mask[k])
            logp = tf.gather(logp_all, act[k], batch_dims=1)
            entropy = -tf.reduce_sum(tf.exp(logp_all) * tf.where(mask[k], logp_all, tf.zeros_like(logp_all)), -1)
            log_ratio = logp - old_logp[k]
            ratio = tf.exp(log_ratio)
            clipped = tf.clip_by_value(ratio, 1.0 - cfg.clip_range, 1.0 + cfg.clip_range)
            policy_loss = -tf.reduce_sum(wk * tf.minimum(ratio * adv[k], clipped * adv[k])) / denom
            v = tf.squeeze(self.models[MAPPOCore.net_name(g, "critic")](cx[k], training=True), 1)
            err = tf.square(v - ret[k])
            if cfg.value_clip is not None:
                v_clip = old_v[k] + tf.clip_by_value(v - old_v[k], -cfg.value_clip, cfg.value_clip)
                err = tf.maximum(err, tf.square(v_clip - ret[k]))
            value_loss = tf.reduce_sum(wk * err) / denom
            ent = tf.reduce_sum(wk * entropy) / denom
            total = total + policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * ent
            kl = tf.reduce_sum(wk * ((ratio - 1.0) - log_ratio)) / denom
            frac = tf.reduce_sum(wk * tf.cast(tf.abs(ratio - 1.0) > cfg.clip_range, tf.float32)) / denom
            for i, term in enumerate((policy_loss, value_loss, ent, kl, frac)):
                sums[i] = sums[i] + tf.stop_gradient(term)
        return total, tf.stack(sums) / float(len(self.groups))

    def _step(self, *args):
        with tf.GradientTape() as tape:
            loss, metrics = self._loss(*args)
        _, checks = self.apply("optimizer", tape, loss, self.cfg.max_grad_norm)
        return metrics, checks

    def _grad_sq(self, *args):
        variables = [v for name in self.models for v in self.variables(name)]
        with tf.GradientTape() as tape:
            loss, _ = self._loss(*args)
        grads = tape.gradient(loss, variables)
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    # -- numpy in, numpy out -----------------------------------------------------------------------
    def _args(self, batch: Mapping[str, list]) -> list:
        out = []
        for key in BATCH_KEYS:
            dtype = np.int64 if key == "act" else bool if key == "mask" else np.float32
            out.append([np.asarray(v, dtype) for v in batch[key]])
        return out

    def logits(self, group: str, x: np.ndarray) -> np.ndarray:
        with tf.device(self.device):
            return self.models[MAPPOCore.net_name(group, "actor")](np.asarray(x, np.float32)).numpy()

    def values(self, group: str, cx: np.ndarray) -> np.ndarray:
        with tf.device(self.device):
            return tf.squeeze(self.models[MAPPOCore.net_name(group, "critic")](np.asarray(cx, np.float32)), 1).numpy()

    def log_prob(self, group: str, x: np.ndarray, act: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with tf.device(self.device):
            logp = self._log_softmax(group, np.asarray(x, np.float32), np.asarray(mask, bool))
            return tf.gather(logp, np.asarray(act, np.int64), batch_dims=1).numpy()

    def train_step(self, batch: Mapping[str, list], *, who: str, update: int) -> dict[str, float]:
        """One step of the summed loss on a numpy minibatch of :meth:`MAPPOCore.minibatch`; mean metrics."""
        with tf.device(self.device):
            metrics, checks = self._train_fn(*self._args(batch))
        self.check(who, update, step_names("loss"), checks)
        return dict(zip(_METRICS, metrics.numpy().tolist(), strict=True))

    def grad_sq_norm(self, batch: Mapping[str, list]) -> float:
        """``|G_B|^2`` of the minibatch loss over every network's variables (float64; nothing written)."""
        with tf.device(self.device):
            return float(self._grad_sq_fn(*self._args(batch)).numpy())


class MAPPO(MAPPOCore):
    """MAPPO / IPPO in TensorFlow/Keras (see :class:`~marl_note.agents.mappo.MAPPOCore` for the algorithm).

    Example:
        >>> import gymnasium as gym
        >>> m = MAPPO({a: gym.spaces.Box(-1, 1, (2,)) for a in "ab"}, {a: gym.spaces.Discrete(3) for a in "ab"},
        ...           hidden_sizes=(8,), seed=0)
        >>> m.act_agent("a", np.zeros((4, 2), np.float32)).shape
        (4,)
    """

    Networks = MAPPONetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(MAPPOCore)


class IPPO(IPPOCore):
    """IPPO: MAPPO with ``critic="local"`` by default (:class:`~marl_note.agents.mappo.IPPOCore`).

    Example:
        >>> import gymnasium as gym
        >>> IPPO({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(4,)).cfg.critic
        'local'
    """

    Networks = MAPPONetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(IPPOCore)
