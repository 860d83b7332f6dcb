"""Proximal policy optimisation (clipped objective, GAE) with masked categorical or Gaussian actions.

The TensorFlow/Keras twin of :class:`marl_note.agents.torch.PPO`: same arguments, behaviour and
numpy state. No act-time extras are stored: at the start of ``update()`` one batched forward
pass over the stored (obs, act) gives the behaviour policy's log-probabilities and the values
GAE needs; each minibatch step is a ``tf.function``.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.checks import check_mask, check_transitions
from marl_note.agents.configs import (
    apply_ppo_config,
    apply_ppo_priority_config,
    ppo_action_output,
)
from marl_note.agents.policies import masked_argmax, masked_softmax, sample_categorical
from marl_note.agents.tf.common import Adam, TFAgent, check_finite_update, guarded_apply, mlp, step_names
from marl_note.types import Transitions

_LOG_2PI = math.log(2 * math.pi)


class ActorCritic:
    """Policy head (logits or Gaussian mean) and value head over separate or shared Keras MLP trunks.

    ``params`` lists ``(torch_key, variable, transposed)`` in the order of the PyTorch
    ``ActorCritic.parameters()`` (``log_std`` first, then trunk, pi, v), relative to ``net.``.

    Example:
        >>> import numpy as np
        >>> net = ActorCritic(3, 2, (8,), "tanh", shared=True, continuous=False, log_std_init=0.0,
        ...                   rng=np.random.default_rng(0))
        >>> [tuple(t.shape) for t in net(np.zeros((5, 3), np.float32))]
        [(5, 2), (5,)]
    """

    def __init__(self, in_dim: int, out_dim: int, hidden_sizes, activation: str, shared: bool,
                 continuous: bool, log_std_init: float, rng: np.random.Generator, prefix: str = "net"):
        hidden_sizes = tuple(hidden_sizes)
        last = int(hidden_sizes[-1]) if len(hidden_sizes) else in_dim
        self.shared = shared
        self.params: list = []
        self.log_std = None
        if continuous:
            self.log_std = keras.Variable(np.full(out_dim, float(log_std_init), np.float32), name="log_std")
            self.params.append((f"{prefix}.log_std", self.log_std, False))
        self.trunk = None
        if shared:
            self.trunk, p = mlp(f"{prefix}.trunk", in_dim, hidden_sizes, None, activation, rng, "orthogonal")
            self.params += p
            self.pi, p = mlp(f"{prefix}.pi", last, (), out_dim, activation, rng, "orthogonal", out_gain=0.01)
            self.params += p
            self.v, p = mlp(f"{prefix}.v", last, (), 1, activation, rng, "orthogonal", out_gain=1.0)
            self.params += p
        else:
            self.pi, p = mlp(f"{prefix}.pi", in_dim, hidden_sizes, out_dim, activation, rng, "orthogonal",
                             out_gain=0.01)
            self.params += p
            self.v, p = mlp(f"{prefix}.v", in_dim, hidden_sizes, 1, activation, rng, "orthogonal", out_gain=1.0)
            self.params += p
        self.variables = [v for _, v, _ in self.params]

    def policy_out(self, x):
        return self.pi(self.trunk(x) if self.shared else x)

    def __call__(self, x):
        h = self.trunk(x) if self.shared else x
        return self.pi(h), tf.squeeze(self.v(h), -1)


class PPO(TFAgent):
    """PPO with a clipped surrogate, GAE(lambda), advantage normalisation and gradient clipping.

    Discrete actions use a masked categorical (illegal logits are ``-inf``; exploring samples,
    ``explore=False`` takes the best legal logit). Box actions use a diagonal Gaussian with a
    state-independent log-std; ``act`` returns the raw sample (the caller clips to the bounds).
    ``update(batch_size)`` does nothing until ``n_steps`` transitions are stored, then runs
    ``n_epochs`` passes of minibatches of ``batch_size`` over all of them and clears the rollout.
    Each minibatch step is a ``tf.function`` (XLA with ``compile=True``).

    ``PR=True`` draws each epoch's minibatches (as many as a plain epoch has) with replacement
    from a :class:`~marl_note.replay.PrioritizedReplayBuffer` over the rollout instead of a
    permutation: priorities ``lambda_ * |return - V(s)| + (1 - lambda_) * |ratio - 1|`` are fed
    back after every minibatch, items start at ``lambda_ * initial_TD + (1 - lambda_) *
    initial_ratio``, ``alpha`` is the prioritization exponent and the importance weights'
    ``beta`` anneals linearly to 1 over 100k gradient steps; both loss terms are weighted.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), n_steps=4, n_epochs=2, seed=0)
        >>> a = agent.act(np.zeros((4, 3)), explore=True)
        >>> agent.observe(Transitions(obs=np.zeros((4, 3)), act=a, rew=np.ones(4), next_obs=np.zeros((4, 3)),
        ...     terminated=np.array([0, 0, 0, 1], bool), truncated=np.zeros(4, bool), stream=np.zeros(4, int)))
        >>> agent.update(batch_size=2)["gradient_steps"]
        4
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "tanh", shared: bool = False,
                 lr: float = 3e-4, gamma: float = 0.99, gae_lambda: float = 0.95, clip_range: float = 0.2,
                 ent_coef: float = 0.0, vf_coef: float = 0.5, n_epochs: int = 10, n_steps: int = 2048,
                 max_grad_norm: float | None = 0.5, normalize_advantage: bool = True,
                 target_kl: float | None = None, log_std_init: float = 0.0,
                 seed: int | None = None, device: str = "cpu", compile: bool = False,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 lambda_: float = 0.5, initial_ratio: float = 1.0):
        continuous, out_dim = ppo_action_output(action_space)
        self.continuous = continuous
        super().__init__(observation_space, action_space, seed, device, compile)
        apply_ppo_config(self, observation_space, action_space, continuous, out_dim, gamma=gamma,
                         gae_lambda=gae_lambda, clip_range=clip_range, ent_coef=ent_coef, vf_coef=vf_coef,
                         n_epochs=n_epochs, n_steps=n_steps, max_grad_norm=max_grad_norm,
                         normalize_advantage=normalize_advantage, target_kl=target_kl)
        with tf.device(self.device):
            self.net = ActorCritic(self.encoder.dim, out_dim, tuple(hidden_sizes), activation, shared,
                                   self.continuous, log_std_init, self.init_rng)
            self.optimizer = Adam(learning_rate=lr, epsilon=1e-5)
            self.optimizer.build(self.net.variables)
        self._params = {"net": self.net.params}
        self._optims = {"optimizer": [self.optimizer, self.net.params, float(lr)]}

        f32 = tf.float32
        x_spec = tf.TensorSpec([None, self.encoder.dim], f32)
        act_spec = tf.TensorSpec([None, out_dim], f32) if self.continuous else tf.TensorSpec([None], tf.int32)
        mask_spec = tf.TensorSpec([None, out_dim], tf.bool)
        vec = tf.TensorSpec([None], f32)
        self._policy_fn = tf.function(self.net.policy_out, input_signature=[x_spec], reduce_retracing=True)
        self._value_fn = tf.function(lambda x: self.net(x)[1], input_signature=[x_spec], reduce_retracing=True)
        self._evaluate_fn = tf.function(self.evaluate, input_signature=[x_spec, act_spec, mask_spec],
                                        reduce_retracing=True)
        self._train_fn = self._function(self._graph_step, [x_spec, act_spec, mask_spec, vec, vec, vec, vec])
        apply_ppo_priority_config(self, PR=PR, alpha=alpha, beta=beta, initial_TD=initial_TD, lambda_=lambda_,
                                  initial_ratio=initial_ratio)

    # -- acting ------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        out = self._policy_fn(self.encoder(obs)).numpy().astype(np.float64)
        if self.continuous:
            if explore:
                std = np.exp(self.net.log_std.numpy().astype(np.float64))
                out = out + std * self.rng.standard_normal(out.shape)
            return out.reshape(len(out), *self.action_space.shape).astype(self.action_space.dtype)
        mask = check_mask(mask, len(out), self.out_dim)
        a = sample_categorical(masked_softmax(out, mask), self.rng) if explore else masked_argmax(out, mask)
        return a + self.action_start

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        check_transitions(transitions, self.encoder)
        self.rollout.add(transitions)
        self.agent_steps += len(transitions)

    # -- distribution --------------------------------------------------------------------------------
    def _act_array(self, act: np.ndarray) -> np.ndarray:
        act = np.asarray(act)
        if self.continuous:
            return act.reshape(len(act), -1).astype(np.float32)
        return (act.astype(np.int64) - self.action_start).astype(np.int32)

    def _mask_array(self, mask: np.ndarray | None, n: int) -> np.ndarray:
        if mask is None or self.continuous:
            return np.ones((n, self.out_dim), bool)
        return check_mask(mask, n, self.out_dim)

    def evaluate(self, x, act, mask):
        """Log-probabilities of ``act``, entropies and values for encoded observations ``x``.

        ``mask`` is a bool ``[B, n]`` tensor (all True for no mask; ignored for Box actions).
        """
        out, values = self.net(x)
        if self.continuous:
            log_std = tf.broadcast_to(self.net.log_std, tf.shape(out))
            z = (act - out) / tf.exp(log_std)
            logp = tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * _LOG_2PI, -1)
            entropy = tf.reduce_sum(0.5 + 0.5 * _LOG_2PI + log_std, -1)
            return logp, entropy, values
        out = tf.where(mask, out, tf.constant(-np.inf, out.dtype))
        logp_all = tf.nn.log_softmax(out, axis=-1)
        logp = tf.gather(logp_all, act, batch_dims=1)
        safe = tf.where(mask, logp_all, tf.zeros_like(logp_all))
        entropy = -tf.reduce_sum(tf.exp(logp_all) * safe, -1)
        return logp, entropy, values

    def log_prob(self, obs: np.ndarray, act: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Log-probabilities of ``act`` under the current policy (numpy in, numpy out)."""
        x = self.encoder(obs)
        return self._evaluate_fn(x, self._act_array(act), self._mask_array(mask, len(x)))[0].numpy()

    # -- learning ----------------------------------------------------------------------------------
    def _graph_step(self, x, act, mask, old_logp, adv, ret, w):
        n = tf.shape(adv)[0]
        if self.normalize_advantage:
            nf = tf.cast(n, adv.dtype)
            centred = adv - tf.reduce_mean(adv)
            std = tf.sqrt(tf.reduce_sum(tf.square(centred)) / tf.maximum(nf - 1.0, 1.0))  # unbiased, as torch
            adv = tf.where(n > 1, centred / (std + 1e-8), adv)
        with tf.GradientTape() as tape:
            logp, entropy, v = self.evaluate(x, act, mask)
            log_ratio = logp - old_logp
            ratio = tf.exp(log_ratio)
            clipped = tf.clip_by_value(ratio, 1.0 - self.clip_range, 1.0 + self.clip_range)
            policy_loss = -tf.reduce_mean(w * tf.minimum(ratio * adv, clipped * adv))
            value_loss = tf.reduce_mean(w * tf.square(v - ret))
            loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * tf.reduce_mean(entropy)
        _, checks = guarded_apply(self.optimizer, tape.gradient(loss, self.net.variables), self.net.variables, loss,
                                  self.max_grad_norm)
        kl = tf.reduce_mean((ratio - 1.0) - log_ratio)
        clip_fraction = tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > self.clip_range, tf.float32))
        return tf.stack([policy_loss, value_loss, tf.reduce_mean(entropy), kl, clip_fraction]), ret - v, ratio, checks

    def update(self, batch_size: int) -> dict[str, Any]:
        """Train on the stored rollout once it holds ``n_steps`` transitions, then clear it."""
        if len(self.rollout) < self.n_steps:
            return {"gradient_steps": 0}
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        from marl_note.replay import compute_gae
        data = self.rollout.get()
        n = len(data)
        x = self.encoder(data.obs)
        act = self._act_array(data.act)
        mask = self._mask_array(data.mask, n)
        old_logp, _, values = (t.numpy() for t in self._evaluate_fn(x, act, mask))
        next_values = self._value_fn(self.encoder(data.next_obs, "next_obs")).numpy()
        adv, ret = compute_gae(data.rew, values, next_values, data.terminated, data.truncated, data.stream,
                               self.gamma, self.gae_lambda)

        names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
        sums = np.zeros(len(names))
        steps = 0
        per = self._prioritized_rollout(data) if self.PR else None
        for _ in range(self.n_epochs):
            epoch_kl = []
            for idx, w in self._minibatches(n, batch_size, per):
                out, td, ratio, checks = self._train_fn(x[idx], act[idx], mask[idx], old_logp[idx], adv[idx],
                                                        ret[idx], w)
                check_finite_update(type(self).__name__, self.updates + 1, step_names("loss"), checks)
                self.updates += 1
                out = out.numpy()
                if per is not None:
                    per.update_priorities(idx, td.numpy(), ratios=ratio.numpy(), lambda_=self.lambda_)
                sums += out
                epoch_kl.append(out[3])
                steps += 1
            if self.target_kl is not None and np.mean(epoch_kl) > 1.5 * self.target_kl:
                break
        self.rollout.clear()
        metrics: dict[str, Any] = {k: float(v) / steps for k, v in zip(names, sums)}
        var = float(np.var(ret, ddof=1)) if n > 1 else float("nan")
        metrics["explained_variance"] = (float("nan") if not var or np.isnan(var)
                                         else 1.0 - float(np.var(ret - values, ddof=1)) / var)
        if per is not None:
            metrics["per_ess"] = per.effective_sample_size()
            metrics["per_beta"] = per.beta
        metrics["gradient_steps"] = steps
        return metrics

    # -- prioritized minibatches (PR=True) --------------------------------------------------------
    def _prioritized_rollout(self, data: Transitions):
        """A prioritized buffer holding this rollout in order (storage index == row)."""
        from marl_note.replay import PrioritizedReplayBuffer
        beta = self.beta + (1.0 - self.beta) * min(1.0, self.updates / 100_000)
        initial = self.lambda_ * self.initial_TD + (1.0 - self.lambda_) * self.initial_ratio
        per = PrioritizedReplayBuffer(len(data), self.observation_space, self.action_space, alpha=self.alpha,
                                      beta=beta, beta_final=beta, beta_annealing_steps=0, initial_TD=initial,
                                      seed=int(self.rng.integers(0, 2**63 - 1)))
        per.add(data)
        return per

    def _minibatches(self, n: int, batch_size: int, per):
        """``(indices, importance weights)`` for one epoch (weights are ones without ``PR``)."""
        if per is None:
            perm = self.rng.permutation(n)
            for start in range(0, n, batch_size):
                idx = perm[start:start + batch_size]
                yield idx, np.ones(len(idx), np.float32)
            return
        for _ in range(-(-n // batch_size)):
            b = per.sample(batch_size)
            yield b.indices, np.asarray(b.weights, np.float32)

    def __repr__(self) -> str:
        kind = "gaussian" if self.continuous else "categorical"
        return (f"PPO(obs_dim={self.encoder.dim}, {kind}[{self.out_dim}], agent_steps={self.agent_steps}, "
                f"updates={self.updates})")
