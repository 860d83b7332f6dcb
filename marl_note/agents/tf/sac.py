"""Soft actor-critic in TensorFlow: the networks and one gradient step (the algorithm: :mod:`marl_note.agents.sac`).

One ``tf.function`` does the whole gradient step (XLA with ``compile=True``); its numpy state has
the PyTorch keys and layouts, so checkpoints move between the backends.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.sac import HALF_LOG_2PI, LOG_2, LOG_STD_MAX, LOG_STD_MIN, MASKED_LOGIT, TRAIN_INPUTS, SACCore
from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.critics import register_critic
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import TFNetworks

__all__ = ["SAC", "SACNetworks"]


class SACNetworks(TFNetworks):
    """The actor, the twin critics ``qf1``/``qf2`` with their targets, and the temperature ``log_alpha``."""

    def __init__(self, weights: Mapping[str, np.ndarray], *, discrete: bool, activation: str, actor_lr: float,
                 critic_lr: float, temperature_lr: float, log_alpha: float, autotune: bool, tau: float,
                 max_grad_norm: float | None, device: Any = "cpu", compile: bool = False, conv: Any = None):
        super().__init__(device, compile)
        self.discrete, self.tau, self.max_grad_norm, self.autotune = discrete, tau, max_grad_norm, autotune
        self.tau_var = tf.Variable(np.float32(tau), trainable=False, name="tau")  # the traced Polyak step reads it
        self.actor = self.mlp("actor", weights, activation, conv)  # images: a conv torso under each network

        def critic(name: str):  # Box actions join after the torso
            return self.mlp(name, weights, activation, conv) if discrete else \
                register_critic(self, name, weights, activation, conv)

        self.qf1, self.qf2 = critic("qf1"), critic("qf2")
        self.qf1_target, self.qf2_target = critic("qf1_target"), critic("qf2_target")
        with tf.device(self.device):
            self.log_alpha = keras.Variable(np.float32(log_alpha), dtype="float32", trainable=autotune,
                                            name="log_alpha")
        self.params["log_alpha"] = [("log_alpha", self.log_alpha, False)]
        self.adam("actor_optimizer", ["actor"], actor_lr)
        self.adam("critic_optimizer", ["qf1", "qf2"], critic_lr)
        if autotune:
            self.adam("alpha_optimizer", ["log_alpha"], temperature_lr)
        self._names = step_names("critic loss", "actor loss", *(["alpha loss"] if autotune else []))

        out_dim = int(self.params["actor"][-1][1].shape[0])
        obs, vec = self.obs_spec(weights, "actor", conv), tf.TensorSpec([None], tf.float32)
        if discrete:
            act, aux = tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, out_dim], tf.bool)
        else:
            act = aux = tf.TensorSpec([None, out_dim // 2], tf.float32)
        specs = {"obs": obs, "act": act, "next_obs": obs, "aux": aux, "next_aux": aux}
        self._step_fn = self.function(self._graph_step, [specs.get(k, vec) for k in TRAIN_INPUTS])
        self._policy_fn = graph_function(lambda x: self.actor(x), input_signature=[obs])
        self._grad_sq_fn = self.function(self._graph_grad_sq, [specs.get(k, vec) for k in TRAIN_INPUTS])
        self._polyak_fn = graph_function(self._graph_polyak, input_signature=[])

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name == "tau":
            self.tau = value
            self.tau_var.assign(np.float32(value))

    # -- forward passes ------------------------------------------------------------------------------
    def policy(self, obs: np.ndarray) -> np.ndarray:
        """Raw actor outputs: logits ``[B, n]`` or Gaussian mean and unsquashed log std ``[B, 2 * dim]``."""
        return self._policy_fn(np.asarray(obs, np.float32)).numpy()

    def log_alpha_value(self) -> float:
        return float(self.log_alpha.numpy())

    def _soft_value(self, obs, aux, q1, q2, alpha):
        """``E_pi[min(q1, q2)(obs, a) - alpha * log pi(a|obs)]`` and the policy's entropy, per row."""
        out = self.actor(obs)
        if self.discrete:
            log_p = tf.nn.log_softmax(tf.where(aux, out, MASKED_LOGIT), axis=1)
            p = tf.exp(log_p)
            q = tf.minimum(q1(obs), q2(obs))
            return tf.reduce_sum(p * (q - alpha * log_p), 1), -tf.reduce_sum(p * log_p, 1)
        mean, raw = tf.split(out, 2, axis=1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tf.tanh(raw) + 1.0)
        u = mean + tf.exp(log_std) * aux
        # Gaussian log-density of u, minus log |d tanh(u)/du| = log(1 - tanh(u)^2), written stably
        log_prob = tf.reduce_sum(-0.5 * tf.square(aux) - log_std - HALF_LOG_2PI
                                 - 2.0 * (LOG_2 - u - tf.nn.softplus(-2.0 * u)), 1)
        a = tf.tanh(u)
        return tf.minimum(q1(obs, a), q2(obs, a))[:, 0] - alpha * log_prob, -log_prob

    def _q(self, net, obs, act):
        if self.discrete:
            return tf.gather(net(obs), act, axis=1, batch_dims=1)
        return net(obs, act)[:, 0]

    # -- one gradient step ---------------------------------------------------------------------------
    def _graph_step(self, obs, act, next_obs, rew, alive, discount, weights, aux, next_aux, target_entropy):
        alpha = tf.exp(tf.identity(self.log_alpha))  # this step's temperature, read before it is updated
        next_v, _ = self._soft_value(next_obs, next_aux, self.qf1_target, self.qf2_target, alpha)
        target = tf.stop_gradient(rew + discount * alive * next_v)
        with tf.GradientTape() as tape:
            q1, q2 = self._q(self.qf1, obs, act), self._q(self.qf2, obs, act)
            critic_loss = 0.5 * tf.reduce_mean(weights * (tf.square(q1 - target) + tf.square(q2 - target)))
        ok, critic_checks = self.apply("critic_optimizer", tape, critic_loss, self.max_grad_norm)
        with tf.GradientTape() as tape:
            value, entropy = self._soft_value(obs, aux, self.qf1, self.qf2, alpha)
            actor_loss = -tf.reduce_mean(value)
        ok, actor_checks = self.apply("actor_optimizer", tape, actor_loss, self.max_grad_norm, ok)
        checks, alpha_loss = [critic_checks, actor_checks], tf.zeros([])
        if self.autotune:
            gap = tf.stop_gradient(entropy - target_entropy)
            with tf.GradientTape() as tape:
                alpha_loss = tf.reduce_mean(tf.exp(self.log_alpha) * gap)
            _, alpha_checks = self.apply("alpha_optimizer", tape, alpha_loss, None, ok)
            checks.append(alpha_checks)
        td = 0.5 * (tf.abs(q1 - target) + tf.abs(q2 - target))
        stats = tf.stack([critic_loss, actor_loss, alpha_loss, alpha, tf.reduce_mean(entropy),
                          tf.reduce_mean(0.5 * (q1 + q2))])
        return stats, td, tf.concat(checks, 0)

    def _graph_grad_sq(self, obs, act, next_obs, rew, alive, discount, weights, aux, next_aux, target_entropy):
        alpha = tf.exp(tf.identity(self.log_alpha))
        next_v, _ = self._soft_value(next_obs, next_aux, self.qf1_target, self.qf2_target, alpha)
        target = tf.stop_gradient(rew + discount * alive * next_v)
        with tf.GradientTape() as tape:
            q1, q2 = self._q(self.qf1, obs, act), self._q(self.qf2, obs, act)
            critic_loss = 0.5 * tf.reduce_mean(weights * (tf.square(q1 - target) + tf.square(q2 - target)))
        grads = tape.gradient(critic_loss, self.variables("qf1") + self.variables("qf2"))
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    def grad_sq_norm(self, batch: Mapping[str, np.ndarray]) -> float:
        """``|G_B|^2`` of the critic loss over ``qf1`` and ``qf2`` (float64; a graph of its own, nothing written)."""
        return float(self._grad_sq_fn(*(batch[k] for k in TRAIN_INPUTS)).numpy())

    def _graph_polyak(self):
        self.sync("qf1_target", "qf1", self.tau_var)
        self.sync("qf2_target", "qf2", self.tau_var)

    def train_step(self, batch: Mapping[str, np.ndarray], who: str, update: int) -> tuple[dict[str, float], np.ndarray]:
        """Critics, actor, temperature, targets; returns metrics and the mean |TD| of the critics."""
        stats, td, checks = self._step_fn(*(batch[k] for k in TRAIN_INPUTS))
        self.check(who, update, self._names, checks)
        self._polyak_fn()
        names = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean")
        metrics = {k: float(v) for k, v in zip(names, stats.numpy()) if k != "alpha_loss" or self.autotune}
        td = td.numpy()
        metrics["td_abs"] = float(td.mean())
        return metrics, td


class SAC(SACCore):
    """Soft actor-critic in TensorFlow: see :class:`~marl_note.agents.sac.SACCore` for the algorithm and arguments.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = SAC(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((2, 3))).shape, agent.state_dict()["qf1.0.weight"].shape  # torch layout [out, in]
        ((2, 1), (8, 4))
    """

    Networks = SACNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(SACCore)
