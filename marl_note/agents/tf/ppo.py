"""PPO in TensorFlow/Keras: the actor-critic built from numpy weights and one clipped-objective step.

Everything else (acting, rollout, GAE, minibatches, priorities, epochs) is
:class:`marl_note.agents.ppo.PPOCore`; the state_dict keys and layouts are the PyTorch agent's.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.ppo import PPOConfig, PPOCore
from marl_note.agents.tf.common import graph_function, step_names
from marl_note.agents.tf.distribute import UNSAVED_PARAMS, strategy_init
from marl_note.agents.tf.networks import ConvTorso, TFNetworks, keras_mlp

__all__ = ["PPO", "PPONetworks"]

_LOG_2PI = math.log(2 * math.pi)


class PPONetworks(TFNetworks):
    """The actor-critic ``net`` (``log_std``, ``trunk``, ``pi``, ``v``) and its Adam ``optimizer``.

    Example (a shared trunk and a Gaussian policy over 2 action dimensions):
        >>> import numpy as np
        >>> from marl_note.agents.networks import mlp_weights
        >>> g = np.random.default_rng(0)
        >>> w = {"net.log_std": np.zeros(2, np.float32), **mlp_weights("net.trunk", 3, (8,), None, g),
        ...      **mlp_weights("net.pi", 8, (), 2, g), **mlp_weights("net.v", 8, (), 1, g)}
        >>> nets = PPONetworks(w, PPOConfig(shared=True), continuous=True)
        >>> nets.policy(np.zeros((4, 3), np.float32)).shape, nets.log_std().tolist()
        ((4, 2), [0.0, 0.0])
    """

    def __init__(self, weights: Mapping[str, np.ndarray], cfg: PPOConfig, continuous: bool, device: Any = "cpu",
                 compile: bool = False):
        super().__init__(device, compile)
        self.cfg, self.continuous = cfg, continuous
        self.clip_var = tf.Variable(np.float32(cfg.clip_range), trainable=False, name="clip_range")  # read when traced
        params: list = []
        self.std_log = self.trunk = None
        with tf.device(self.device):
            if "net.log_std" in weights:  # first, as in the torch module's parameters()
                self.std_log = keras.Variable(np.asarray(weights["net.log_std"], np.float32), name="log_std")
                params.append(("net.log_std", self.std_log, False))
            self.conv = ConvTorso("net.conv", weights, cfg.conv_layers, cfg.activation) if cfg.torso == "conv" else None
            if self.conv is not None:  # images: one conv torso under pi and v
                params += self.conv.params
            if cfg.shared and "net.trunk.0.weight" in weights:
                self.trunk, trunk_params = keras_mlp("net.trunk", weights, cfg.activation)
                params += trunk_params
            self.pi, pi_params = keras_mlp("net.pi", weights, cfg.activation)
            self.v, v_params = keras_mlp("net.v", weights, cfg.activation)
        self.params["net"] = params + pi_params + v_params
        self.adam("optimizer", ["net"], lr=cfg.lr, eps=1e-5)
        self._hidden = keras.activations.get(cfg.activation)

        self.in_dim = int(weights["net.trunk.0.weight" if self.trunk is not None else "net.pi.0.weight"].shape[1])
        n_out = int(self.pi.layers[-1].units)
        x = (tf.TensorSpec([None, self.in_dim], tf.float32) if self.conv is None
             else self.obs_spec(weights, "net", cfg.conv_layers))
        act = tf.TensorSpec([None, n_out], tf.float32) if continuous else tf.TensorSpec([None], tf.int64)
        mask, vec = tf.TensorSpec([None, n_out], tf.bool), tf.TensorSpec([None], tf.float32)
        self._policy_fn = graph_function(self._policy_out, input_signature=[x])
        self._values_fn = graph_function(lambda x: self._forward(x)[1], input_signature=[x])
        self._evaluate_fn = graph_function(self._evaluate, input_signature=[x, act, mask])
        self._train_fn = self.function(self._step, [x, act, mask, vec, vec, vec, vec])
        self._grad_sq_fn = self.function(self._grad_sq, [x, act, mask, vec, vec, vec, vec])

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name == "clip_range":
            self.clip_var.assign(np.float32(value))

    # -- graph code --------------------------------------------------------------------------------
    def _features(self, x):
        if self.conv is not None:
            x = tf.reshape(self.conv(x), [-1, self.in_dim])
        if not self.cfg.shared:
            return x
        return x if self.trunk is None else self._hidden(self.trunk(x))

    def _policy_out(self, x):
        return self.pi(self._features(x))

    def _forward(self, x):
        h = self._features(x)
        return self.pi(h), tf.squeeze(self.v(h), -1)

    def _evaluate(self, x, act, mask):
        """Log-probabilities of ``act``, entropies and values (``mask``: bool ``[B, n]``, unused for Box)."""
        out, values = self._forward(x)
        if self.continuous:
            log_std = tf.broadcast_to(self.std_log, tf.shape(out))
            logp = tf.reduce_sum(-0.5 * tf.square((act - out) / tf.exp(log_std)) - log_std - 0.5 * _LOG_2PI, -1)
            return logp, tf.reduce_sum(0.5 + 0.5 * _LOG_2PI + log_std, -1), values
        logp_all = tf.nn.log_softmax(tf.where(mask, out, tf.constant(-np.inf, out.dtype)), axis=-1)
        entropy = -tf.reduce_sum(tf.exp(logp_all) * tf.where(mask, logp_all, tf.zeros_like(logp_all)), -1)
        return tf.gather(logp_all, act, batch_dims=1), entropy, values

    def _loss(self, x, act, mask, old_logp, adv, ret, w):
        cfg = self.cfg
        logp, entropies, v = self._evaluate(x, act, mask)
        log_ratio = logp - old_logp
        ratio = tf.exp(log_ratio)
        clipped = tf.clip_by_value(ratio, 1.0 - self.clip_var, 1.0 + self.clip_var)
        surrogate = tf.minimum(ratio * adv, clipped * adv)
        terms = [-tf.reduce_mean(w * surrogate), tf.reduce_mean(w * tf.square(v - ret)), tf.reduce_mean(entropies)]
        return terms[0] + cfg.vf_coef * terms[1] - cfg.ent_coef * terms[2], terms, log_ratio, v

    def _step(self, x, act, mask, old_logp, adv, ret, w):
        with tf.GradientTape() as tape:
            loss, terms, log_ratio, v = self._loss(x, act, mask, old_logp, adv, ret, w)
        _, checks = self.apply("optimizer", tape, loss, self.cfg.max_grad_norm)
        return tf.stack(terms), log_ratio, ret - v, checks

    def _grad_sq(self, x, act, mask, old_logp, adv, ret, w):
        with tf.GradientTape() as tape:
            loss = self._loss(x, act, mask, old_logp, adv, ret, w)[0]
        grads = tape.gradient(loss, self.variables("net"))
        return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads])

    def grad_sq_norm(self, x, act, mask, old_logp, adv, ret, w) -> float:
        """``|G_B|^2`` of the minibatch loss over the actor-critic's variables (float64; nothing written)."""
        vectors = (np.asarray(a, np.float32) for a in (old_logp, adv, ret, w))
        return float(self._grad_sq_fn(x, act, mask, *vectors).numpy())

    # -- numpy in, numpy out -----------------------------------------------------------------------
    def policy(self, x: np.ndarray) -> np.ndarray:
        """Logits (Discrete) or Gaussian means (Box), ``[B, n]``."""
        return self._policy_fn(x).numpy()

    def log_std(self) -> np.ndarray:
        assert self.std_log is not None, "a categorical policy has no log-std"
        return self.std_log.numpy()

    def values(self, x: np.ndarray) -> np.ndarray:
        return self._values_fn(x).numpy()

    def evaluate(self, x: np.ndarray, act: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(log-probabilities of act, values)``."""
        logp, _, values = self._evaluate_fn(x, act, mask)
        return logp.numpy(), values.numpy()

    def train_step(self, x, act, mask, old_logp, adv, ret, w, *, who: str, update: int) -> dict[str, Any]:
        """One clipped-objective step on a numpy minibatch; returns what the torch step returns."""
        vectors = (np.asarray(a, np.float32) for a in (old_logp, adv, ret, w))
        terms, log_ratio, td, checks = self._train_fn(x, act, mask, *vectors)
        self.check(who, update, step_names("loss"), checks)
        policy_loss, value_loss, entropy = terms.numpy().tolist()
        return {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                "log_ratio": log_ratio.numpy(), "td": td.numpy()}


class PPO(PPOCore):
    """PPO (:class:`~marl_note.agents.ppo.PPOCore`) on TensorFlow; each minibatch step is a ``tf.function``.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> agent.act(np.zeros((4, 3)), mask=np.array([[0, 1]] * 4, bool)).tolist(), agent
        ([1, 1, 1, 1], PPO(obs_dim=3, categorical[2], agent_steps=0, updates=0))
    """

    Networks = PPONetworks
    unsaved_params = UNSAVED_PARAMS
    __init__ = strategy_init(PPOCore)
