"""DDPG in TensorFlow/Keras: the actor, the critic, their Polyak targets and one traced gradient step.

Acting, replay, exploration and the update schedule are numpy, in :mod:`marl_note.agents.ddpg`.
The state has the PyTorch agent's keys and layouts, so checkpoints move between the backends.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from marl_note.agents.ddpg import DDPGBatch, DDPGConfig, DDPGCore
from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.critics import register_critic
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import TFNetworks
from marl_note.agents.torsos import conv_of

__all__ = ["DDPG", "DDPGNetworks"]


class DDPGNetworks(TFNetworks):
    """``actor``, ``critic``, ``actor_target``, ``critic_target`` and their two Adam optimisers."""

    def __init__(self, weights: Mapping[str, np.ndarray], cfg: DDPGConfig, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        self.cfg = cfg
        self.tau_var = tf.Variable(np.float32(cfg.tau), trainable=False, name="tau")  # the traced follow() reads it
        conv = conv_of(cfg)  # images: a conv torso under the actor and one under the critic
        self.actor = self.mlp("actor", weights, cfg.activation, conv)
        self.critic = register_critic(self, "critic", weights, cfg.activation, conv)
        self.actor_target = self.mlp("actor_target", weights, cfg.activation, conv)
        self.critic_target = register_critic(self, "critic_target", weights, cfg.activation, conv)
        self.adam("actor_optimizer", ["actor"], cfg.actor_lr)
        self.adam("critic_optimizer", ["critic"], cfg.critic_lr)
        x, a, v = (self.obs_spec(weights, "actor", conv),
                   tf.TensorSpec([None, int(self.params["actor"][-1][1].shape[0])], tf.float32),
                   tf.TensorSpec([None], tf.float32))
        self._actions = graph_function(lambda s: tf.tanh(self.actor(s)), input_signature=[x])
        self._q_values = graph_function(lambda s, u: self.q(self.critic, s, u), input_signature=[x, a])
        self._target = self.function(self.target, [x, v, v, v])
        self._train = self.function(self.gradient_step, [x, a, x, v, v, v, v])
        self._follow = self.function(self.follow, [])
        self._grad_sq = self.function(self.critic_grad_sq, [x, a, x, v, v, v, v])

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name == "tau":
            self.tau_var.assign(np.float32(value))

    @staticmethod
    def q(critic, x, a):
        return critic(x, a)[:, 0]

    def actions(self, obs: np.ndarray) -> np.ndarray:
        return self._actions(obs).numpy()

    def q_values(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        return self._q_values(obs, act).numpy()

    def td_target(self, b: DDPGBatch) -> np.ndarray:
        return self._target(b.next_obs, b.rew, b.alive, b.discount).numpy()

    # -- graph code ----------------------------------------------------------------------------------
    def target(self, next_obs, rew, alive, discount):
        y = rew + discount * alive * self.q(self.critic_target, next_obs, tf.tanh(self.actor_target(next_obs)))
        return tf.stop_gradient(y if self.cfg.target_clip is None else tf.clip_by_value(y, *self.cfg.target_clip))

    def gradient_step(self, obs, act, next_obs, rew, alive, discount, weights):
        y = self.target(next_obs, rew, alive, discount)
        with tf.GradientTape() as tape:
            q = self.q(self.critic, obs, act)
            critic_loss = tf.reduce_mean(weights * tf.square(q - y))
        ok, critic_checks = self.apply("critic_optimizer", tape, critic_loss, self.cfg.max_grad_norm)
        with tf.GradientTape() as tape:
            mu = tf.tanh(self.actor(obs))
            actor_loss = -tf.reduce_mean(self.q(self.critic, obs, mu))
            if self.cfg.action_l2 > 0:
                actor_loss += self.cfg.action_l2 * tf.reduce_mean(tf.square(mu))
        _, actor_checks = self.apply("actor_optimizer", tape, actor_loss, self.cfg.max_grad_norm, ok)
        return critic_loss, actor_loss, tf.reduce_mean(q), y - q, tf.concat([critic_checks, actor_checks], 0)

    def critic_grad_sq(self, obs, act, next_obs, rew, alive, discount, weights):
        y = self.target(next_obs, rew, alive, discount)
        with tf.GradientTape() as tape:
            critic_loss = tf.reduce_mean(weights * tf.square(self.q(self.critic, obs, act) - y))
        grads = tape.gradient(critic_loss, self.variables("critic"))
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    def grad_sq_norm(self, b: DDPGBatch) -> float:
        """``|G_B|^2`` of the critic loss over the critic's variables (float64; a graph of its own, nothing written)."""
        return float(self._grad_sq(*b).numpy())

    def follow(self):
        self.sync("actor_target", "actor", self.tau_var)
        self.sync("critic_target", "critic", self.tau_var)
        return tf.constant(True)

    def train_step(self, b: DDPGBatch, who: str, update: int) -> tuple[dict[str, float], np.ndarray]:
        """Critic step, actor step, then both targets move ``tau``; metrics and the TD errors."""
        critic_loss, actor_loss, q_mean, td, checks = self._train(*b)
        self.check(who, update, step_names("critic loss", "actor loss"), checks)
        self._follow()
        return ({"critic_loss": float(critic_loss), "actor_loss": float(actor_loss), "q_mean": float(q_mean)},
                td.numpy())


class DDPG(DDPGCore):
    """DDPG in TensorFlow; every argument and behaviour is :class:`~marl_note.agents.ddpg.DDPGCore`'s.

    Example:
        >>> import gymnasium as gym
        >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((2, 3))).shape, agent.state_dict()["actor.0.weight"].shape  # torch layout
        ((2, 1), (8, 3))
    """

    Networks = DDPGNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(DDPGCore)
