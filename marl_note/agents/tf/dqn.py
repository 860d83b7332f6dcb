"""Deep Q-learning (double DQN by default) with masked actions, in TensorFlow/Keras.

The same algorithm, arguments and numpy state as :class:`marl_note.agents.torch.DQN`; read top to
bottom: acting (``act``), storing (``observe``), the TD target (``td_target``), one gradient step
(``_gradient_step``, a ``tf.function``) and the update schedule (``update``).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import tensorflow as tf

from marl_note.agents.checks import check_mask, check_transitions
from marl_note.agents.configs import DQNSharedMethods, apply_dqn_config
from marl_note.agents.policies import masked_argmax
from marl_note.agents.replay_options import network_space
from marl_note.agents.tf.common import Adam, TFAgent, check_finite_update, guarded_apply, mlp, step_names
from marl_note.types import Transitions


class DQN(DQNSharedMethods, TFAgent):
    """DQN over a Discrete action space: MLP Q-network, target network, replay, masked actions.

    Exploration uses any policy from :mod:`marl_note.agents.policies` (default: epsilon-greedy
    annealed from 1.0 to 0.05 over 10k agent steps); greedy actions are the best legal action.
    The TD target ``r + discount * (1 - terminated) * Q_target(s', a*)`` takes ``a*`` among the
    actions legal at ``s'`` (``next_mask``), chosen by the online network when ``double=True``;
    ``discount`` is ``transitions.discount`` when present (n-step), else ``gamma``. Truncation
    still bootstraps. Each ``update()`` call does ``update_steps`` gradient steps, or
    ``max(1, round(replay_ratio * new transitions since the last call))`` when that is None,
    and none until ``learning_starts`` transitions are stored. With ``tau`` set the target
    network follows by Polyak averaging after every step; otherwise it is copied every
    ``target_update`` steps. A ``replay`` with prioritized sampling (batches carrying
    ``weights``) gets importance-weighted losses and ``update_priorities`` calls. The replay
    options ``PR, alpha, beta, initial_TD, num_steps, her, compute_reward, augment`` are the PyTorch
    DQN's (see :class:`~marl_note.agents.replay_options.ReplayFeed`).

    The gradient step is a ``tf.function``; ``compile=True`` compiles it with XLA
    (``jit_compile=True``). ``state_dict()`` matches the PyTorch DQN key for key.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), learning_starts=8, seed=0)
        >>> agent.act(np.zeros((2, 4)), mask=np.array([[0, 1, 0], [1, 0, 0]], bool)).tolist()
        [1, 0]
        >>> agent.observe(Transitions(obs=np.zeros((8, 4)), act=np.zeros(8, int), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 4)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"]
        2
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: tuple[int, ...] = (128, 128), activation: str = "relu",
                 lr: float = 1e-3, gamma: float = 0.99, buffer_size: int = 100_000,
                 learning_starts: int = 1000, double: bool = True, target_update: int = 100,
                 tau: float | None = None, criterion: str = "huber", max_grad_norm: float | None = 10.0,
                 replay_ratio: float = 0.25, update_steps: int | None = None, policy=None, replay=None,
                 seed: int | None = None, device: str = "cpu", compile: bool = False,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 num_steps: int = 1, her=None, compute_reward=None, augment=None):
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"DQN needs a Discrete action space, got {action_space!r}; "
                            f"use a continuous-control agent for Box actions")
        super().__init__(network_space(observation_space), action_space, seed, device, compile)
        self.observation_space = observation_space  # a goal env's Dict space; the networks see the flat one
        apply_dqn_config(self, observation_space, action_space, gamma=gamma, buffer_size=buffer_size,
                         learning_starts=learning_starts, double=double, target_update=target_update, tau=tau,
                         criterion=criterion, max_grad_norm=max_grad_norm, replay_ratio=replay_ratio,
                         update_steps=update_steps, policy=policy, replay=replay, PR=PR, alpha=alpha, beta=beta,
                         initial_TD=initial_TD, num_steps=num_steps, her=her, compute_reward=compute_reward,
                         augment=augment)

        dim = self.encoder.dim
        with tf.device(self.device):
            self.q_net, q_params = mlp("q_net", dim, hidden_sizes, self.n_actions, activation, self.init_rng)
            self.target_net, t_params = mlp("target_net", dim, hidden_sizes, self.n_actions, activation,
                                            self.init_rng)
            for (_, t, _), (_, s, _) in zip(t_params, q_params):
                t.assign(s)
            self.optimizer = Adam(learning_rate=lr, epsilon=1e-8)
            self.optimizer.build([v for _, v, _ in q_params])
        self._q_vars = [v for _, v, _ in q_params]
        self._t_vars = [v for _, v, _ in t_params]
        self._params = {"q_net": q_params, "target_net": t_params}
        self._optims = {"optimizer": [self.optimizer, q_params, float(lr)]}
        self._new_transitions = 0

        f32, i32 = tf.float32, tf.int32
        obs_spec = tf.TensorSpec([None, dim], f32)
        vec = tf.TensorSpec([None], f32)
        legal = tf.TensorSpec([None, self.n_actions], tf.bool)
        self._forward = tf.function(lambda x: self.q_net(x), input_signature=[obs_spec], reduce_retracing=True)
        self._target_fn = self._function(self._graph_target, [obs_spec, vec, vec, vec, legal])
        self._train_fn = self._function(self._graph_step, [obs_spec, tf.TensorSpec([None], i32), obs_spec,
                                                           vec, vec, vec, legal, vec])
        self._copy_fn = tf.function(self._graph_copy, input_signature=[tf.TensorSpec([], f32)])

    # -- acting ------------------------------------------------------------------------------------
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Online Q-values ``[B, n]`` as float32 numpy."""
        return self._forward(self.encoder(self._feed.observation(obs))).numpy()

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        q = self.q_values(obs)
        mask = check_mask(mask, len(q), self.n_actions)
        a = self.policy.select(q, mask, self.rng) if explore else masked_argmax(q, mask)
        return a + self.action_start

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        self._feed.add(transitions, flat)  # n-step accumulation / HER episode storage happen here
        n = len(transitions)
        self.agent_steps += n
        self._new_transitions += n
        if hasattr(self.policy, "step"):
            self.policy.step(n)

    # -- learning ----------------------------------------------------------------------------------
    def _target_inputs(self, batch: Transitions) -> list:
        n = len(batch)
        rew = np.asarray(batch.rew, np.float32)
        alive = (~np.asarray(batch.terminated, bool)).astype(np.float32)
        discount = (np.full(n, self.gamma, np.float32) if batch.discount is None
                    else np.asarray(batch.discount, np.float32))
        legal = (np.ones((n, self.n_actions), bool) if batch.next_mask is None
                 else check_mask(batch.next_mask, n, self.n_actions, "next_mask"))
        return [self.encoder(batch.next_obs, "next_obs"), rew, alive, discount, legal]

    def _graph_target(self, next_obs, rew, alive, discount, legal):
        q_target = self.target_net(next_obs)
        chooser = self.q_net(next_obs) if self.double else q_target
        chooser = tf.where(legal, chooser, tf.constant(-np.inf, chooser.dtype))
        alive = alive * tf.cast(tf.reduce_any(legal, axis=1), alive.dtype)
        best = tf.argmax(chooser, axis=1, output_type=tf.int32)
        next_v = tf.gather(q_target, best, batch_dims=1)
        return tf.stop_gradient(rew + discount * alive * next_v)

    def td_target(self, batch: Transitions) -> tf.Tensor:
        """``r + discount * (1 - terminated) * Q_target(s', a*)`` with ``a*`` legal at ``s'``.

        Rows whose ``next_mask`` has no legal action do not bootstrap.
        """
        return self._target_fn(*self._target_inputs(batch))

    def _graph_step(self, obs, act, next_obs, rew, alive, discount, legal, weights):
        target = self._graph_target(next_obs, rew, alive, discount, legal)
        with tf.GradientTape() as tape:
            q = tf.gather(self.q_net(obs, training=True), act, batch_dims=1)
            err = q - target
            if self.criterion == "huber":
                abs_err = tf.abs(err)
                losses = tf.where(abs_err < 1.0, 0.5 * tf.square(err), abs_err - 0.5)
            else:
                losses = tf.square(err)
            loss = tf.reduce_mean(weights * losses)
        _, checks = guarded_apply(self.optimizer, tape.gradient(loss, self._q_vars), self._q_vars, loss,
                                  self.max_grad_norm)
        td = tf.abs(target - q)
        return loss, tf.reduce_mean(q), td, checks

    def _graph_copy(self, tau):
        for t, s in zip(self._t_vars, self._q_vars):
            t.assign(t + tau * (s - t))

    def _update_target(self) -> None:
        if self.tau is not None:
            self._copy_fn(tf.constant(self.tau, tf.float32))
        elif self.updates % self.target_update == 0:
            for t, s in zip(self._t_vars, self._q_vars):
                t.assign(s)

    def learn(self, batch: Transitions) -> dict[str, float]:
        """One gradient step on an explicit batch (``_gradient_step`` samples one from replay)."""
        n = len(batch)
        weights = (np.ones(n, np.float32) if batch.weights is None else np.asarray(batch.weights, np.float32))
        act = np.asarray(batch.act, np.int64) - self.action_start
        next_obs, rew, alive, discount, legal = self._target_inputs(batch)
        loss, q_mean, td, checks = self._train_fn(self.encoder(batch.obs), act.astype(np.int32), next_obs, rew,
                                                  alive, discount, legal, weights)
        check_finite_update(type(self).__name__, self.updates + 1, step_names("loss"), checks)
        self.updates += 1
        self._update_target()
        td = td.numpy()
        if batch.weights is not None and hasattr(self.replay, "update_priorities"):
            self.replay.update_priorities(batch.indices, td)
        return {"loss": float(loss), "q_mean": float(q_mean), "td_abs": float(td.mean())}

    def _gradient_step(self, batch_size: int) -> dict[str, float]:
        return self.learn(self.replay.sample(batch_size))
