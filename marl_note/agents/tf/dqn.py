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
from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import ConvTorso, TFNetworks, keras_mlp

__all__ = ["DQN", "DQNNetworks", "DuelingQNet", "pack_batch"]

# the order of the graph step's inputs (DQNCore.arrays' keys)
_STEP_INPUTS = ("obs", "act", "next_obs", "rew", "discount", "alive", "legal", "weights")
_TARGET_INPUTS = ("next_obs", "rew", "discount", "alive", "legal")
# the packed step's columns: act, rew, discount, alive, weights, then the legal next actions as 0/1
_AUX_COLUMNS = ("act", "rew", "discount", "alive", "weights")
_AUX = len(_AUX_COLUMNS)


def pack_batch(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(obs and next_obs stacked [2, B, ...], the other inputs [B, 5 + n])``, float32: the step's
    batch in two arrays (one conversion to a tensor each, not eight). Actions, flags and the legal
    mask are small integers, exact in float32.

    Example:
        >>> pair, aux = pack_batch({"obs": np.zeros((3, 4)), "next_obs": np.ones((3, 4)), "act": np.arange(3),
        ...     "rew": np.ones(3), "discount": np.full(3, 0.9), "alive": np.ones(3), "weights": np.ones(3),
        ...     "legal": np.ones((3, 2), bool)})
        >>> pair.shape, aux.shape, aux[2, :2].tolist()
        ((2, 3, 4), (3, 7), [2.0, 1.0])
    """
    obs, next_obs, legal = arrays["obs"], arrays["next_obs"], arrays["legal"]
    pair = np.empty((2, *np.shape(obs)), np.float32)
    pair[0], pair[1] = obs, next_obs
    aux = np.empty((len(legal), _AUX + legal.shape[1]), np.float32)
    for j, key in enumerate(_AUX_COLUMNS):
        aux[:, j] = arrays[key]
    aux[:, _AUX:] = legal
    return pair, aux


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
        self._forward = graph_function(lambda x: self.q_net(x), input_signature=[obs])
        self._target_fn = self.function(self._target, [obs, vec, vec, vec, legal])
        step_signature = [obs, tf.TensorSpec([None], tf.int32), obs, vec, vec, vec, legal, vec]
        self._packed = self.strategy is None  # a strategy splits every batch input by rows: keep them apart
        if self._packed:  # two inputs: observations and next observations stacked, every other column
            self._step_fn = self.function(self._packed_step, [tf.TensorSpec([2, *obs.shape], tf.float32),
                                                              tf.TensorSpec([None, _AUX + n], tf.float32)])
        else:
            self._step_fn = self.function(self._step, step_signature)
        self._step_graph: Any = None  # the step's concrete function, taken on the first step
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

    def _packed_step(self, pair, aux):
        """:meth:`_step` on :func:`pack_batch`'s two arrays; one float32 vector out:
        ``[loss, q_mean, td_abs, the 2 checks, |TD| per row]``."""
        legal = aux[:, _AUX:] > 0.5
        stats, td_abs, checks = self._step(pair[0], tf.cast(aux[:, 0], tf.int32), pair[1], aux[:, 1], aux[:, 2],
                                           aux[:, 3], legal, aux[:, 4])
        return tf.concat([stats, checks, td_abs], axis=0)

    def train_step(self, arrays: Mapping[str, np.ndarray], who: str, update: int):
        """The graph step on the batch, then its finiteness checks (a refused step raises, nothing applied).

        Returns the metrics ``loss``, ``q_mean``, ``td_abs`` and ``|TD|`` per row for the priorities.
        Outside a strategy the batch goes in as two tensors and comes back as one array, through
        the step's concrete function (traced once, on the first call), which skips the argument
        matching a ``tf.function`` call does each time.
        """
        if not self._packed:
            stats, td_abs, checks = self._step_fn(*[arrays[k].astype(np.int32) if k == "act" else arrays[k]
                                                    for k in _STEP_INPUTS])
            self.check(who, update, step_names("loss"), checks)
            return dict(zip(("loss", "q_mean", "td_abs"), stats.numpy().tolist())), td_abs.numpy()
        if self._step_graph is None:
            self._step_graph = self._step_fn.get_concrete_function()
        pair, aux = pack_batch(arrays)
        out = self._step_graph(tf.constant(pair), tf.constant(aux)).numpy()
        self.check(who, update, step_names("loss"), out[3:5])
        return dict(zip(("loss", "q_mean", "td_abs"), out[:3].tolist())), out[5:]


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
