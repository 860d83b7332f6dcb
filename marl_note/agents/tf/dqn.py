"""DQN in TensorFlow/Keras: the Q-networks, the TD target and one gradient step; the rest is :class:`DQNCore`.

The gradient step is one ``tf.function`` (XLA with ``compile=True``); the state keys and layouts
are PyTorch's, so checkpoints move between the backends.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.dqn import DQNConfig, DQNCore
from marl_note.agents.tf.common import step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import ConvTorso, TFNetworks, keras_mlp

__all__ = ["DQN", "DQNNetworks", "DuelingQNet"]

# the order of the graph step's inputs (DQNCore.arrays' keys)
_STEP_INPUTS = ("obs", "act", "next_obs", "rew", "discount", "alive", "legal", "weights")
_TARGET_INPUTS = ("next_obs", "rew", "discount", "alive", "legal")


def dense_from_numpy(weights: Mapping[str, np.ndarray], key: str):
    """A built Dense layer holding ``{key}.weight`` (``[out, in]``, stored transposed) and ``{key}.bias``,
    and its ``(torch key, variable, transposed)`` params."""
    w, b = (np.asarray(weights[f"{key}.{part}"], np.float32) for part in ("weight", "bias"))
    layer = keras.layers.Dense(w.shape[0], kernel_initializer="zeros", bias_initializer="zeros", dtype="float32")
    layer.build((None, w.shape[1]))
    layer.kernel.assign(w.T)
    layer.bias.assign(b)
    return layer, [(f"{key}.weight", layer.kernel, True), (f"{key}.bias", layer.bias, False)]


class DuelingQNet:
    """``Q = V(h) + A(h, a) - mean_a A(h, a)`` with ``h = torso(s)`` (every torso layer activated)."""

    def __init__(self, prefix: str, weights: Mapping[str, np.ndarray], activation: str, conv=None):
        self.conv = ConvTorso(f"{prefix}.conv", weights, conv, activation) if conv else None
        self.torso, torso_params = keras_mlp(f"{prefix}.torso", weights, activation)
        self.activation = keras.activations.get(activation)
        self.value, value_params = dense_from_numpy(weights, f"{prefix}.value")
        self.advantage, advantage_params = dense_from_numpy(weights, f"{prefix}.advantage")
        self.params = (self.conv.params if self.conv else []) + torso_params + value_params + advantage_params
        # (torch's parameter order)

    def __call__(self, x, training: bool = False):
        if self.conv is not None:
            x = self.conv(x)
        h = self.activation(self.torso(x, training=training))
        adv = self.advantage(h)
        return self.value(h) + adv - tf.reduce_mean(adv, axis=1, keepdims=True)


class DQNNetworks(TFNetworks):
    """Online and target Q-networks, Adam, the TD target and one guarded gradient step (numpy in and out)."""

    def __init__(self, weights: Mapping[str, np.ndarray], config: DQNConfig, device: Any = "cpu",
                 compile: bool = False, user: Any = None):
        super().__init__(device, compile)
        self.config = config
        self.conv = config.conv_layers if config.torso == "conv" else None
        self.user = user  # (factory, input shape, seed) of a user-supplied torso
        self.q_net = self.q_network("q_net", weights)
        self.target_net = self.q_network("target_net", weights)
        if user is not None:
            self.sync("target_net", "q_net")
        self.adam("optimizer", ["q_net"], lr=config.lr)
        n = self.params["q_net"][-1][1].shape[0]
        obs = (self.obs_spec(weights, "q_net", self.conv) if user is None
               else tf.TensorSpec([None, *user[1]], tf.float32))
        vec = tf.TensorSpec([None], tf.float32)
        legal = tf.TensorSpec([None, n], tf.bool)
        self._forward = tf.function(lambda x: self.q_net(x), input_signature=[obs], reduce_retracing=True)
        self._target_fn = self.function(self._target, [obs, vec, vec, vec, legal])
        step_signature = [obs, tf.TensorSpec([None], tf.int32), obs, vec, vec, vec, legal, vec]
        self._step_fn = self.function(self._step, step_signature)
        self._grad_sq_fn = self.function(self._grad_sq, step_signature)

    def q_network(self, name: str, weights: Mapping[str, np.ndarray]):
        if self.user is not None:
            return self.user_mlp(name, weights, self.config.activation, self.user)
        if not self.config.dueling:
            return self.mlp(name, weights, self.config.activation, self.conv)
        with tf.device(self.device):
            net = DuelingQNet(name, weights, self.config.activation, self.conv)
        self.models[name], self.params[name] = net, net.params
        return net

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return self._forward(obs).numpy()

    def _target(self, next_obs, rew, discount, alive, legal):
        q_next = self.target_net(next_obs)
        chooser = self.q_net(next_obs) if self.config.double else q_next
        best = tf.argmax(tf.where(legal, chooser, tf.constant(-np.inf, chooser.dtype)), axis=1, output_type=tf.int32)
        return tf.stop_gradient(rew + discount * alive * tf.gather(q_next, best, batch_dims=1))

    def td_target(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        return self._target_fn(*(arrays[k] for k in _TARGET_INPUTS)).numpy()

    def _loss(self, obs, act, target, weights):
        q = tf.gather(self.q_net(obs, training=True), act, batch_dims=1)
        err = q - target
        if self.config.criterion == "huber":
            losses = tf.where(tf.abs(err) < 1.0, 0.5 * tf.square(err), tf.abs(err) - 0.5)
        else:
            losses = tf.square(err)
        return tf.reduce_mean(weights * losses), q

    def _grad_sq(self, obs, act, next_obs, rew, discount, alive, legal, weights):
        target = self._target(next_obs, rew, discount, alive, legal)
        with tf.GradientTape() as tape:
            loss, _ = self._loss(obs, act, target, weights)
        grads = tape.gradient(loss, self.variables("q_net"))
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    def grad_sq_norm(self, arrays: Mapping[str, np.ndarray]) -> float:
        """``|G_B|^2``: the squared norm of the gradient of the batch's mean loss over the online
        network's variables, unclipped, summed in float64. A graph of its own: no optimiser step, no
        variable or version change."""
        return float(self._grad_sq_fn(*[arrays[k].astype(np.int32) if k == "act" else arrays[k]
                                        for k in _STEP_INPUTS]).numpy())

    def _step(self, obs, act, next_obs, rew, discount, alive, legal, weights):
        target = self._target(next_obs, rew, discount, alive, legal)
        with tf.GradientTape() as tape:
            loss, q = self._loss(obs, act, target, weights)
        _, checks = self.apply("optimizer", tape, loss, self.config.max_grad_norm)
        td_abs = tf.abs(target - q)
        return tf.stack([loss, tf.reduce_mean(q), tf.reduce_mean(td_abs)]), td_abs, checks

    def train_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int):
        """The graph step on the batch, then its finiteness checks (a refused step raises, nothing applied).

        Returns the metrics ``loss``, ``q_mean``, ``td_abs`` and ``|TD|`` per row for the priorities.
        """
        stats, td_abs, checks = self._step_fn(*[arrays[k].astype(np.int32) if k == "act" else arrays[k]
                                                for k in _STEP_INPUTS])
        self.check(who, update, step_names("loss"), checks)
        return dict(zip(("loss", "q_mean", "td_abs"), stats.numpy().tolist())), td_abs.numpy()


class DQN(DQNCore):
    """DQN in TensorFlow/Keras; arguments, behaviour and state as :class:`~marl_note.agents.dqn.DQNCore`.

    Example (the gradient step compiled with XLA):
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = DQN(gym.spaces.Discrete(3), gym.spaces.Discrete(2), hidden_sizes=(8,), learning_starts=4,
        ...             update_steps=1, compile=True, seed=0)
        >>> agent.observe(Transitions(obs=np.arange(4) % 3, act=np.zeros(4, int), rew=np.ones(4),
        ...     next_obs=np.arange(4) % 3, terminated=np.ones(4, bool), truncated=np.zeros(4, bool)))
        >>> sorted(agent.update(batch_size=4)), agent.updates
        (['eps', 'gradient_steps', 'loss', 'q_mean', 'td_abs'], 1)
    """

    Networks = DQNNetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(DQNCore)
