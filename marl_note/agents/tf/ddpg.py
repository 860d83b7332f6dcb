"""Deep deterministic policy gradient (DDPG) for Box actions, in TensorFlow/Keras, with HER for goal envs.

The twin of :class:`marl_note.agents.torch.DDPG`: same arguments, behaviour and numpy state
(``actor.0.weight`` ... as torch ``[out, in]`` layouts, torch-rule Adam moments), so weights and
optimiser state move between the backends. Each gradient step is one ``tf.function``.
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import tensorflow as tf

from marl_note.agents.checks import check_transitions
from marl_note.agents.configs import apply_ddpg_config
from marl_note.agents.continuous import check_box_action_space
from marl_note.agents.replay_options import network_space
from marl_note.agents.rl_common import run_update_schedule
from marl_note.agents.tf.common import Adam, TFAgent, check_finite_update, guarded_apply, mlp, step_names
from marl_note.types import Transitions


class DDPG(TFAgent):
    """DDPG: a deterministic tanh actor, a Q critic, Polyak-averaged target copies of both, replay.

    See :class:`marl_note.agents.torch.DDPG` for the algorithm and every argument; this class
    takes the same ones (plus ``compile=True`` for XLA) and its ``state_dict()`` has the same
    keys and layouts.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import Transitions
        >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(0.0, 2.0, (2,)), learning_starts=8, seed=0)
        >>> a = agent.act(np.zeros((4, 3)), explore=True)
        >>> a.shape, bool(((0 <= a) & (a <= 2)).all())
        ((4, 2), True)
        >>> agent.observe(Transitions(obs=np.zeros((8, 3)), act=np.ones((8, 2)), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 3)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"]
        8
        >>> agent.state_dict()["actor.0.weight"].shape  # torch layout [out, in]
        (256, 3)
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: tuple[int, ...] = (256, 256), activation: str = "relu",
                 actor_lr: float = 1e-3, critic_lr: float = 1e-3, gamma: float = 0.98, tau: float = 0.05,
                 buffer_size: int = 100_000, learning_starts: int = 1000, replay_ratio: float = 1.0,
                 update_steps: int | None = None, noise=None, action_l2: float = 0.0,
                 target_clip: tuple[float, float] | None = None, max_grad_norm: float | None = None,
                 PR: bool = False, alpha: float = 0.6, beta: float = 0.4, initial_TD: float = 1.0,
                 num_steps: int = 1, her=None, compute_reward=None, replay=None, augment=None,
                 seed: int | None = None, device: str = "cpu", compile: bool = False):
        check_box_action_space(action_space)
        super().__init__(network_space(observation_space), action_space, seed, device, compile)
        self.observation_space = observation_space
        apply_ddpg_config(self, observation_space, action_space, gamma=gamma, tau=tau, buffer_size=buffer_size,
                          learning_starts=learning_starts, replay_ratio=replay_ratio, update_steps=update_steps,
                          noise=noise, action_l2=action_l2, target_clip=target_clip, max_grad_norm=max_grad_norm,
                          PR=PR, alpha=alpha, beta=beta, initial_TD=initial_TD, num_steps=num_steps, her=her,
                          compute_reward=compute_reward, replay=replay, augment=augment)

        obs_dim, act_dim = self.encoder.dim, self.scaler.dim
        with tf.device(self.device):
            self.actor, actor_p = mlp("actor", obs_dim, hidden_sizes, act_dim, activation, self.init_rng)
            self.critic, critic_p = mlp("critic", obs_dim + act_dim, hidden_sizes, 1, activation, self.init_rng)
            self.actor_target, actor_tp = mlp("actor_target", obs_dim, hidden_sizes, act_dim, activation,
                                              self.init_rng)
            self.critic_target, critic_tp = mlp("critic_target", obs_dim + act_dim, hidden_sizes, 1, activation,
                                                self.init_rng)
            for target, source in ((actor_tp, actor_p), (critic_tp, critic_p)):
                for (_, t, _), (_, s, _) in zip(target, source):
                    t.assign(s)
            self.actor_optimizer = Adam(learning_rate=actor_lr, epsilon=1e-8)
            self.actor_optimizer.build([v for _, v, _ in actor_p])
            self.critic_optimizer = Adam(learning_rate=critic_lr, epsilon=1e-8)
            self.critic_optimizer.build([v for _, v, _ in critic_p])
        self._actor_vars = [v for _, v, _ in actor_p]
        self._critic_vars = [v for _, v, _ in critic_p]
        self._pairs = list(zip([v for _, v, _ in actor_tp + critic_tp], self._actor_vars + self._critic_vars))
        self._params = {"actor": actor_p, "critic": critic_p, "actor_target": actor_tp, "critic_target": critic_tp}
        self._optims = {"actor_optimizer": [self.actor_optimizer, actor_p, float(actor_lr)],
                        "critic_optimizer": [self.critic_optimizer, critic_p, float(critic_lr)]}
        self._new_transitions = 0

        f32 = tf.float32
        obs_spec, act_spec, vec = (tf.TensorSpec([None, obs_dim], f32), tf.TensorSpec([None, act_dim], f32),
                                   tf.TensorSpec([None], f32))
        self._actor_fn = tf.function(lambda x: tf.tanh(self.actor(x)), input_signature=[obs_spec],
                                     reduce_retracing=True)
        self._critic_fn = tf.function(lambda x, a: self.critic(tf.concat([x, a], 1))[:, 0],
                                      input_signature=[obs_spec, act_spec], reduce_retracing=True)
        self._target_fn = self._function(self._graph_target, [obs_spec, vec, vec, vec])
        self._train_fn = self._function(self._graph_step, [obs_spec, act_spec, obs_spec, vec, vec, vec, vec])
        self._polyak_fn = tf.function(self._graph_polyak, input_signature=[tf.TensorSpec([], f32)])

    @property
    def prioritized(self) -> bool:
        return self._feed.prioritized

    # -- acting ------------------------------------------------------------------------------------
    def unit_actions(self, obs: Any) -> np.ndarray:
        """Deterministic actor outputs in [-1, 1], ``[B, action_dim]`` float32."""
        return self._actor_fn(self.encoder(self._feed.observation(obs))).numpy()

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        """Actions within the Box bounds, ``[B, *action_shape]``; ``mask`` is ignored (Box actions)."""
        unit = self.unit_actions(obs).astype(np.float64)
        if explore:
            unit = self.noise(unit)
        return self.scaler.to_env(unit)

    def q_values(self, obs: Any, act: np.ndarray) -> np.ndarray:
        """Online critic values ``[B]`` for env-scale actions."""
        return self._critic_fn(self.encoder(self._feed.observation(obs)), self.scaler.to_unit(act)).numpy()

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        flat = check_transitions(self._feed.flat(transitions), self.encoder)
        act = np.asarray(flat.act)
        if act.shape[1:] != self.scaler.shape:
            raise ValueError(f"transitions.act has shape {act.shape}, expected (batch, *{self.scaler.shape})")
        self._feed.add(transitions, flat)
        n = len(transitions)
        self.agent_steps += n
        self._new_transitions += n
        self.noise.episodes_ended(transitions.stream, transitions.done)

    # -- learning ----------------------------------------------------------------------------------
    def _target_inputs(self, batch: Transitions) -> list:
        n = len(batch)
        discount = (np.full(n, self.gamma, np.float32) if batch.discount is None
                    else np.asarray(batch.discount, np.float32))
        return [self.encoder(batch.next_obs, "next_obs"), np.asarray(batch.rew, np.float32),
                (~np.asarray(batch.terminated, bool)).astype(np.float32), discount]

    def _graph_target(self, next_obs, rew, alive, discount):
        next_a = tf.tanh(self.actor_target(next_obs))
        next_q = self.critic_target(tf.concat([next_obs, next_a], 1))[:, 0]
        target = rew + discount * alive * next_q
        if self.target_clip is not None:
            target = tf.clip_by_value(target, *self.target_clip)
        return tf.stop_gradient(target)

    def td_target(self, batch: Transitions) -> tf.Tensor:
        """``r + discount * (1 - terminated) * Q_target(s', mu_target(s'))``, clipped to ``target_clip``."""
        return self._target_fn(*self._target_inputs(batch))

    def _graph_step(self, obs, act, next_obs, rew, alive, discount, weights):
        target = self._graph_target(next_obs, rew, alive, discount)
        with tf.GradientTape() as tape:
            q = self.critic(tf.concat([obs, act], 1), training=True)[:, 0]
            critic_loss = tf.reduce_mean(weights * tf.square(q - target))
        ok, critic_checks = guarded_apply(self.critic_optimizer, tape.gradient(critic_loss, self._critic_vars),
                                          self._critic_vars, critic_loss, self.max_grad_norm)
        with tf.GradientTape() as tape:
            mu = tf.tanh(self.actor(obs, training=True))
            actor_loss = -tf.reduce_mean(self.critic(tf.concat([obs, mu], 1))[:, 0])
            if self.action_l2 > 0:
                actor_loss = actor_loss + self.action_l2 * tf.reduce_mean(tf.square(mu))
        _, actor_checks = guarded_apply(self.actor_optimizer, tape.gradient(actor_loss, self._actor_vars),
                                        self._actor_vars, actor_loss, self.max_grad_norm, ok)
        return critic_loss, actor_loss, tf.reduce_mean(q), target - q, tf.concat([critic_checks, actor_checks], 0)

    def _graph_polyak(self, tau):
        for t, s in self._pairs:
            t.assign(t + tau * (s - t))

    def learn(self, batch: Transitions) -> dict[str, float]:
        """One gradient step on an explicit batch (``_gradient_step`` samples one from replay)."""
        weights = (np.ones(len(batch), np.float32) if batch.weights is None
                   else np.asarray(batch.weights, np.float32))
        critic_loss, actor_loss, q_mean, td, checks = self._train_fn(
            self.encoder(batch.obs), self.scaler.to_unit(batch.act), *self._target_inputs(batch), weights)
        check_finite_update(type(self).__name__, self.updates + 1, step_names("critic loss", "actor loss"), checks)
        self.updates += 1
        self._polyak_fn(tf.constant(self.tau, tf.float32))
        td = td.numpy()
        self._feed.update_priorities(batch, td)
        return {"critic_loss": float(critic_loss), "actor_loss": float(actor_loss), "q_mean": float(q_mean),
                "td_abs": float(np.abs(td).mean())}

    def _gradient_step(self, batch_size: int) -> dict[str, float]:
        return self.learn(self._feed.sample(batch_size))

    def update(self, batch_size: int) -> dict[str, Any]:
        """Run this call's gradient steps; returns mean metrics and ``gradient_steps``."""
        new, self._new_transitions = self._new_transitions, 0
        return run_update_schedule(self, batch_size, self._gradient_step, new=new, extra=self._noise_metrics)

    def _noise_metrics(self) -> dict[str, float]:
        sigma = getattr(self.noise.process, "current_sigma", None)
        return {} if sigma is None else {"noise_sigma": float(sigma)}

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        return {"new_transitions": np.asarray(self._new_transitions, np.int64), **self.noise.state_dict()}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self._new_transitions = int(np.asarray(state.get("new_transitions", 0)))
        self.noise.load_state_dict(state)

    def __repr__(self) -> str:
        return (f"DDPG(obs_dim={self.encoder.dim}, action_dim={self.scaler.dim}, her={self._feed.her}, "
                f"prioritized={self.prioritized}, agent_steps={self.agent_steps}, updates={self.updates})")
