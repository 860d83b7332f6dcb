"""Multi-agent DDPG (MADDPG) in TensorFlow/Keras: decentralised actors, centralised critics.

The same algorithm, arguments, defaults and numpy state as :class:`marl_note.agents.torch.MADDPG`
(the numpy side lives in :mod:`marl_note.agents.maddpg_common`); one gradient step of all agents
is one ``tf.function`` call (``_graph_step``).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
import tensorflow as tf

from marl_note.agents.maddpg_common import JointLearnerBase, MADDPGSeat, encode_obs
from marl_note.agents.tf.common import (Adam, apply_if, check_finite_update, guarded_apply, mlp, optimizer_from_numpy,
                                        optimizer_slot_shapes, optimizer_to_numpy, params_from_numpy,
                                        params_to_numpy, step_names, tf_device,
                                        torch_generator_state)
from marl_note.types import JointTransitions

__all__ = ["MADDPG", "MADDPGSeat"]


def masked_logits(logits, legal):
    """``logits`` with illegal actions (``legal == 0``) at -1e9: no softmax probability, never the argmax."""
    return tf.where(legal > 0, logits, tf.constant(-1e9, logits.dtype))


class MADDPG(JointLearnerBase):
    """MADDPG: per-agent decentralised actors and centralised critics ``Q_i(all obs, all actions)``.

    See :class:`marl_note.agents.torch.MADDPG` for the algorithm; arguments, defaults and
    ``state_dict()`` keys and layouts are identical (Dense kernels stored as torch's ``[out, in]``),
    so weights, optimiser moments and exploration state move between the backends.
    ``compile=True`` compiles the gradient step with XLA.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.types import JointTransitions
        >>> obs = {"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Box(-1, 1, (3,))}
        >>> acts = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,))}
        >>> m = MADDPG(obs, acts, learning_starts=4, seed=0)
        >>> [s.act(np.zeros((5, s.observation_space.shape[0]))).shape for s in m.seat_agents()]
        [(5,), (5, 2)]
        >>> m.observe_joint(JointTransitions(("a", "b"), obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))},
        ...     act={"a": np.array([0, 1, 2, 0]), "b": np.zeros((4, 2))}, rew=np.ones((4, 2)),
        ...     next_obs={"a": np.zeros((4, 2)), "b": np.zeros((4, 3))}, terminated=np.zeros((4, 2), bool),
        ...     truncated=np.zeros((4, 2), bool), alive=np.ones((4, 2), bool)))
        >>> m.update(batch_size=4)["gradient_steps"]
        1
        >>> m.state_dict()["a.critic.0.weight"].shape  # [out, in]: all observations and actions
        (64, 10)
    """

    def __init__(self, observation_spaces: Mapping[str, gym.Space], action_spaces: Mapping[str, gym.Space], *,
                 hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "relu", actor_lr: float = 1e-2,
                 critic_lr: float = 1e-2, gamma: float = 0.95, tau: float = 0.01, buffer_size: int = 100_000,
                 learning_starts: int = 1024, replay_ratio: float = 0.05, update_steps: int | None = None,
                 temperature: float = 1.0, noise_sigma: float = 0.1, noise: Mapping[str, Any] | None = None,
                 action_reg: float = 1e-3, max_grad_norm: float | None = 0.5, centralized_critic: bool = True,
                 MARL: bool | None = None, reward_done_func_ma: Callable | None = None,
                 seed: int | None = None, device: str = "cpu", compile: bool = False):
        super().__init__(observation_spaces, action_spaces, gamma=gamma, tau=tau, buffer_size=buffer_size,
                         learning_starts=learning_starts, replay_ratio=replay_ratio, update_steps=update_steps,
                         temperature=temperature, noise_sigma=noise_sigma, noise=noise, action_reg=action_reg,
                         max_grad_norm=max_grad_norm, centralized_critic=centralized_critic, MARL=MARL,
                         reward_done_func_ma=reward_done_func_ma, seed=seed)
        self.device = tf_device(device)
        self.compile = bool(compile)
        init_rng = np.random.default_rng(self.init_seed)
        self._torch_rng = torch_generator_state(self.init_seed)
        self.actor, self.critic, self.actor_target, self.critic_target = {}, {}, {}, {}
        self._params: dict[str, list] = {}  # "<agent>.<net>" -> [(torch key, variable, transposed)]
        self._optims: dict[str, list] = {}  # "<agent>.<opt>" -> [optimizer, params, lr]
        with tf.device(self.device):
            for a in self.agents:
                actor_in, critic_in = self.obs_dim[a], self.critic_input_dim(a)
                for name, nets, in_dim, out in (("actor", self.actor, actor_in, self.act_dim[a]),
                                                ("critic", self.critic, critic_in, 1),
                                                ("actor_target", self.actor_target, actor_in, self.act_dim[a]),
                                                ("critic_target", self.critic_target, critic_in, 1)):
                    nets[a], self._params[f"{a}.{name}"] = mlp(f"{a}.{name}", in_dim, hidden_sizes, out,
                                                               activation, init_rng)
                for target, source in (("actor_target", "actor"), ("critic_target", "critic")):
                    for (_, t, _), (_, s, _) in zip(self._params[f"{a}.{target}"], self._params[f"{a}.{source}"]):
                        t.assign(s)
                for net, lr in (("actor", actor_lr), ("critic", critic_lr)):
                    opt = Adam(learning_rate=lr, epsilon=1e-8)
                    opt.build([v for _, v, _ in self._params[f"{a}.{net}"]])
                    self._optims[f"{a}.{net}_optimizer"] = [opt, self._params[f"{a}.{net}"], float(lr)]

        f32 = tf.float32
        n = len(self.agents)
        per = lambda dims: [tf.TensorSpec([None, d], f32) for d in dims]  # noqa: E731
        obs_specs, act_specs = per([self.obs_dim[a] for a in self.agents]), per([self.act_dim[a] for a in self.agents])
        joint = tf.TensorSpec([None, n], f32)
        signature = [obs_specs, act_specs, obs_specs, act_specs, [tf.TensorSpec([], f32)] * n,
                     joint, joint, joint, joint, act_specs, act_specs]
        self._train_fn = tf.function(self._graph_step, input_signature=signature, reduce_retracing=True,
                                     jit_compile=True if self.compile else None)
        self._forward = {a: tf.function(self.actor[a].__call__, input_signature=[tf.TensorSpec([None, self.obs_dim[a]], f32)],
                                        reduce_retracing=True) for a in self.agents}

    # -- acting ------------------------------------------------------------------------------------
    def actor_outputs(self, agent: str, obs: Any) -> np.ndarray:
        """Actor output ``[B, act_dim]``: logits (Discrete) or tanh units in [-1, 1] (Box)."""
        out = self._forward[agent](encode_obs(self.observation_spaces[agent], obs))
        return (out if self.discrete[agent] else tf.tanh(out)).numpy()

    # -- learning ----------------------------------------------------------------------------------
    def _critic_in(self, i: int, obs: list, acts: list):
        return tf.concat(obs + acts, axis=1) if self.centralized_critic else tf.concat([obs[i], acts[i]], axis=1)

    def _target_action(self, agent: str, next_obs, legal):
        out = self.actor_target[agent](next_obs)
        if self.discrete[agent]:
            out = masked_logits(out, legal)
            return tf.one_hot(tf.argmax(out, axis=1), self.act_dim[agent], dtype=out.dtype)
        return tf.tanh(out)

    def _apply(self, name: str, tape, loss, ok, checks: list):
        """Apply one optimiser's step when it and every earlier one are finite; returns the new ``ok``."""
        opt, params, _ = self._optims[name]
        variables = [v for _, v, _ in params]
        ok, step_checks = guarded_apply(opt, tape.gradient(loss, variables), variables, loss, self.max_grad_norm, ok)
        checks.append(step_checks)
        return ok

    def _graph_step(self, obs, acts, next_obs, gumbel, temperature, rew, terminated, alive, next_live, mask,
                    next_mask):
        obs, acts, next_obs, gumbel = list(obs), list(acts), list(next_obs), list(gumbel)
        next_acts = [tf.stop_gradient(self._target_action(a, next_obs[j], next_mask[j])) * next_live[:, j:j + 1]
                     for j, a in enumerate(self.agents)]
        critic_losses, actor_losses, q_means, checks = [], [], [], []
        ok = tf.constant(True)
        for i, a in enumerate(self.agents):
            w = alive[:, i]
            denom = tf.maximum(tf.reduce_sum(w), 1.0)
            next_q = tf.squeeze(self.critic_target[a](self._critic_in(i, next_obs, next_acts)), 1)
            target = tf.stop_gradient(rew[:, i] + self.gamma * (1.0 - terminated[:, i]) * next_q)
            with tf.GradientTape() as tape:
                q = tf.squeeze(self.critic[a](self._critic_in(i, obs, acts), training=True), 1)
                critic_loss = tf.reduce_sum(w * tf.square(q - target)) / denom
            ok = self._apply(f"{a}.critic_optimizer", tape, critic_loss, ok, checks)
            with tf.GradientTape() as tape:
                out = self.actor[a](obs[i], training=True)
                if self.discrete[a]:  # straight-through Gumbel-softmax: one-hot forward, relaxed backward
                    soft = tf.nn.softmax((masked_logits(out, mask[i]) + gumbel[i]) / temperature[i], axis=1)
                    hard = tf.one_hot(tf.argmax(soft, axis=1), self.act_dim[a], dtype=soft.dtype)
                    own = hard - tf.stop_gradient(soft) + soft
                    reg = tf.reduce_mean(tf.square(out), axis=1)
                else:
                    own = tf.tanh(out)
                    reg = tf.reduce_mean(tf.square(own), axis=1)
                q_pi = tf.squeeze(self.critic[a](self._critic_in(i, obs, acts[:i] + [own] + acts[i + 1:])), 1)
                actor_loss = tf.reduce_sum(w * (self.action_reg * reg - q_pi)) / denom
            ok = self._apply(f"{a}.actor_optimizer", tape, actor_loss, ok, checks)
            critic_losses.append(critic_loss)
            actor_losses.append(actor_loss)
            q_means.append(tf.reduce_sum(w * q) / denom)
        apply_if(ok, self._polyak)
        return (tf.reduce_mean(critic_losses), tf.reduce_mean(actor_losses), tf.reduce_mean(q_means),
                tf.concat(checks, 0))

    def _polyak(self) -> None:
        for a in self.agents:
            for target, source in (("actor_target", "actor"), ("critic_target", "critic")):
                for (_, t, _), (_, s, _) in zip(self._params[f"{a}.{target}"], self._params[f"{a}.{source}"]):
                    t.assign(t + self.tau * (s - t))

    def learn(self, batch: JointTransitions) -> dict[str, float]:
        """One gradient step of every agent's critic, then its actor, on an explicit joint batch."""
        p = self.prepare_batch(batch)
        with tf.device(self.device):
            critic_loss, actor_loss, q_mean, checks = self._train_fn(
                p["obs"], p["act"], p["next_obs"], p["gumbel"], p["temperature"], p["rew"], p["terminated"],
                p["alive"], p["next_live"], p["mask"], p["next_mask"])
        names = step_names(*(f"agent {a!r} {part} loss" for a in self.agents for part in ("critic", "actor")))
        check_finite_update(type(self).__name__, self.updates + 1, names, checks)
        self.updates += 1
        return {"critic_loss": float(critic_loss), "actor_loss": float(actor_loss), "q_mean": float(q_mean)}

    # -- state -------------------------------------------------------------------------------------
    def _optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return optimizer_slot_shapes(self._optims)

    def _net_state(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for params in self._params.values():
            out.update(params_to_numpy(params))
        for name, (opt, params, lr) in self._optims.items():
            out.update(optimizer_to_numpy(name, opt, lr, params))
        out["torch_rng"] = self._torch_rng.copy()
        return out

    def _load_net_state(self, state: Mapping[str, Any]) -> None:
        for params in self._params.values():
            params_from_numpy(params, state)
        for name, entry in self._optims.items():
            opt, params, _ = entry
            lr = optimizer_from_numpy(name, opt, params, state)
            if lr is not None:
                entry[2] = lr
                opt.learning_rate.assign(lr)
        if "torch_rng" in state:
            self._torch_rng = np.array(state["torch_rng"], np.uint8).reshape(-1)
