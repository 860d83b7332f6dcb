"""Multi-agent DDPG (MADDPG) in TensorFlow/Keras: the networks and one gradient step as one graph.

Everything else (seats, exploration, the joint replay, batches, the schedule, state) is the numpy
core :class:`marl_note.agents.maddpg.MADDPGCore`; weights, optimiser moments and exploration state
move between this backend and PyTorch's (``state_dict`` keys and layouts are the same).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from marl_note.agents.maddpg import MADDPGConfig, MADDPGCore
from marl_note.agents.tf.common import apply_if, graph_function, step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import TFNetworks

__all__ = ["MADDPG", "MADDPGNetworks"]

BATCH_KEYS = ("obs", "act", "next_obs", "gumbel", "temperature", "rew", "terminated", "alive", "next_live", "mask",
              "next_mask")


def masked_logits(logits, legal):
    """``logits`` with illegal actions (``legal == 0``) at -1e9: no softmax probability, never the argmax."""
    return tf.where(legal > 0, logits, tf.constant(-1e9, logits.dtype))


class MADDPGNetworks(TFNetworks):
    """Per agent: ``actor``, ``critic`` and their targets (models ``<agent>.<net>``), and an Adam each
    for actor and critic; one ``tf.function`` per set of trained agents (XLA with ``compile=True``).

    Example (the core builds them; forward passes take and return numpy):
        >>> import gymnasium as gym
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Box(-1, 1, (1,))}, hidden_sizes=(4,))
        >>> m.nets.actor_output("a", np.zeros((3, 2), np.float32)).shape, m.nets.weight_names[:2]
        ((3, 1), ('a.actor', 'a.critic'))
    """

    def __init__(self, weights: Mapping[str, np.ndarray], *, agents: Sequence[str], discrete: Mapping[str, bool],
                 config: MADDPGConfig, device: Any = "cpu", compile: bool = False):
        super().__init__(device, compile)
        self.agents, self.discrete, self.cfg = tuple(agents), dict(discrete), config
        # the traced steps read tau and gamma from variables, so set_hyperparameter needs no retrace
        self.tau_var = tf.Variable(np.float32(config.tau), trainable=False, name="tau")
        self.gamma_var = tf.Variable(np.float32(config.gamma), trainable=False, name="gamma")
        for a in self.agents:
            for name in ("actor", "critic", "actor_target", "critic_target"):
                self.mlp(f"{a}.{name}", weights, config.activation)
            self.adam(f"{a}.actor_optimizer", [f"{a}.actor"], config.actor_lr)
            self.adam(f"{a}.critic_optimizer", [f"{a}.critic"], config.critic_lr)
        self.act_dim = {a: int(self.models[f"{a}.actor"].layers[-1].units) for a in self.agents}
        obs_dims = [int(weights[f"{a}.actor.0.weight"].shape[1]) for a in self.agents]
        per = lambda dims: [tf.TensorSpec([None, d], tf.float32) for d in dims]  # noqa: E731
        obs, act, joint = per(obs_dims), per(self.act_dim.values()), tf.TensorSpec([None, len(self.agents)], tf.float32)
        self._signature = [obs, act, obs, act, [tf.TensorSpec([], tf.float32)] * len(self.agents), joint, joint, joint,
                           joint, act, act]
        self._steps: dict[tuple[str, ...], Any] = {}
        self._grad_sq_fn = self.function(self._graph_grad_sq, self._signature)
        self._forward = {a: graph_function(self.models[f"{a}.actor"].__call__, input_signature=spec)
                         for a, spec in zip(self.agents, ([s] for s in obs))}

    def set_hyperparameter(self, name: str, value: float) -> None:
        {"tau": self.tau_var, "gamma": self.gamma_var}[name].assign(np.float32(value))

    def actor_output(self, agent: str, obs: np.ndarray) -> np.ndarray:
        """Actor ``agent`` on encoded observations: logits (Discrete) or tanh units (Box)."""
        with tf.device(self.device):
            out = self._forward[agent](np.asarray(obs, np.float32))
        return (out if self.discrete[agent] else tf.tanh(out)).numpy()

    def _target_actions(self, next_obs, next_mask, next_live) -> list:
        acts = []
        for j, a in enumerate(self.agents):
            out = self.models[f"{a}.actor_target"](next_obs[j])
            if self.discrete[a]:
                out = tf.one_hot(tf.argmax(masked_logits(out, next_mask[j]), axis=1), self.act_dim[a], dtype=out.dtype)
            else:
                out = tf.tanh(out)
            acts.append(tf.stop_gradient(out) * next_live[:, j:j + 1])
        return acts

    def target_actions(self, batch: Mapping[str, Any]) -> list[np.ndarray]:
        """The next-step actions the target critics see for a batch of ``MADDPGCore.prepare_batch``."""
        with tf.device(self.device):
            return [x.numpy() for x in self._target_actions(batch["next_obs"], batch["next_mask"], batch["next_live"])]

    def _critic_in(self, i: int, obs: list, acts: list):
        return tf.concat(obs + acts, axis=1) if self.cfg.centralized_critic else tf.concat([obs[i], acts[i]], axis=1)

    def _graph_step(self, trained, obs, acts, next_obs, gumbel, temperature, rew, terminated, alive, next_live, mask,
                    next_mask):
        cfg = self.cfg
        obs, acts, next_obs = list(obs), list(acts), list(next_obs)
        next_acts = self._target_actions(list(next_obs), list(next_mask), next_live)
        critic_losses, actor_losses, q_means, checks = [], [], [], []
        ok = tf.constant(True)
        for a in trained:
            i = self.agents.index(a)
            critic, actor = self.models[f"{a}.critic"], self.models[f"{a}.actor"]
            w = alive[:, i]
            denom = tf.maximum(tf.reduce_sum(w), 1.0)
            next_q = tf.squeeze(self.models[f"{a}.critic_target"](self._critic_in(i, next_obs, next_acts)), 1)
            target = tf.stop_gradient(rew[:, i] + self.gamma_var * (1.0 - terminated[:, i]) * next_q)
            with tf.GradientTape() as tape:
                q = tf.squeeze(critic(self._critic_in(i, obs, acts), training=True), 1)
                critic_loss = tf.reduce_sum(w * tf.square(q - target)) / denom
            ok, step_checks = self.apply(f"{a}.critic_optimizer", tape, critic_loss, cfg.max_grad_norm, ok)
            checks.append(step_checks)
            with tf.GradientTape() as tape:
                out = actor(obs[i], training=True)
                if self.discrete[a]:  # straight-through Gumbel-softmax: one-hot forward, relaxed backward
                    soft = tf.nn.softmax((masked_logits(out, mask[i]) + gumbel[i]) / temperature[i], axis=1)
                    hard = tf.one_hot(tf.argmax(soft, axis=1), self.act_dim[a], dtype=soft.dtype)
                    own = hard - tf.stop_gradient(soft) + soft
                    reg = tf.reduce_mean(tf.square(out), axis=1)
                else:
                    own = tf.tanh(out)
                    reg = tf.reduce_mean(tf.square(own), axis=1)
                q_pi = tf.squeeze(critic(self._critic_in(i, obs, acts[:i] + [own] + acts[i + 1:])), 1)
                actor_loss = tf.reduce_sum(w * (cfg.action_reg * reg - q_pi)) / denom
            ok, step_checks = self.apply(f"{a}.actor_optimizer", tape, actor_loss, cfg.max_grad_norm, ok)
            checks.append(step_checks)
            critic_losses.append(critic_loss)
            actor_losses.append(actor_loss)
            q_means.append(tf.reduce_sum(w * q) / denom)

        def polyak():
            for a in trained:
                self.sync(f"{a}.actor_target", f"{a}.actor", self.tau_var)
                self.sync(f"{a}.critic_target", f"{a}.critic", self.tau_var)
        apply_if(ok, polyak)
        return (tf.reduce_mean(critic_losses), tf.reduce_mean(actor_losses), tf.reduce_mean(q_means),
                tf.concat(checks, 0))

    def _graph_grad_sq(self, obs, acts, next_obs, gumbel, temperature, rew, terminated, alive, next_live, mask,
                       next_mask):
        obs, acts, next_obs = list(obs), list(acts), list(next_obs)
        next_acts = self._target_actions(next_obs, list(next_mask), next_live)
        variables = [v for a in self.agents for v in self.variables(f"{a}.critic")]
        with tf.GradientTape() as tape:
            total = tf.zeros([])
            for i, a in enumerate(self.agents):
                w = alive[:, i]
                next_q = tf.squeeze(self.models[f"{a}.critic_target"](self._critic_in(i, next_obs, next_acts)), 1)
                target = tf.stop_gradient(rew[:, i] + self.gamma_var * (1.0 - terminated[:, i]) * next_q)
                q = tf.squeeze(self.models[f"{a}.critic"](self._critic_in(i, obs, acts), training=True), 1)
                total += tf.reduce_sum(w * tf.square(q - target)) / tf.maximum(tf.reduce_sum(w), 1.0)
        grads = tape.gradient(total, variables)
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    def grad_sq_norm(self, batch: Mapping[str, Any]) -> float:
        """``|G_B|^2`` of the sum of every agent's critic loss over the critics' variables (float64; a
        graph of its own, nothing written)."""
        with tf.device(self.device):
            return float(self._grad_sq_fn(*[batch[k] for k in BATCH_KEYS]).numpy())

    def train_step(self, batch: Mapping[str, Any], *, who: str, update: int,
                   agents: Sequence[str] | None = None) -> dict[str, float]:
        """Critic then actor step of each of ``agents`` (default: all) on a numpy joint batch, then their
        targets' Polyak step, as one graph; mean losses and Q over those agents."""
        trained = self.agents if agents is None else tuple(agents)
        if trained not in self._steps:
            self._steps[trained] = self.function(lambda *args: self._graph_step(trained, *args), self._signature)
        with tf.device(self.device):
            critic_loss, actor_loss, q_mean, checks = self._steps[trained](*[batch[k] for k in BATCH_KEYS])
        self.check(who, update, step_names(*(f"agent {a!r} {part} loss" for a in trained
                                             for part in ("critic", "actor"))), checks)
        return {"critic_loss": float(critic_loss), "actor_loss": float(actor_loss), "q_mean": float(q_mean)}


class MADDPG(MADDPGCore):
    """MADDPG in TensorFlow/Keras (see :class:`~marl_note.agents.maddpg.MADDPGCore` for the algorithm).

    Example:
        >>> import gymnasium as gym
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (2,))}, {"a": gym.spaces.Discrete(3)}, hidden_sizes=(8,), seed=0)
        >>> m.actor_outputs("a", np.zeros((4, 2), np.float32)).shape  # logits
        (4, 3)
    """

    Networks = MADDPGNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(MADDPGCore)
