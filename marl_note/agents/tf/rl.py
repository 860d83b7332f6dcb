"""Write your own TensorFlow/Keras agent the way the original library asked: networks, ``action``, a loss.

The same contract as :mod:`marl_note.agents.torch.rl`, with Keras networks and optimisers:
subclass :class:`RL`, call ``super().__init__(observation_space, action_space, policy=...,
noise=..., buffer_size=..., learning_starts=..., update_steps=..., gamma=..., seed=...)``, build
the networks (Keras models whose weights exist, e.g. a ``keras.Sequential`` starting with
``keras.Input``) and ``self.optimizer`` in ``__init__``, and define ``action(s)`` (Q-values or
logits ``[B, n]`` for Discrete actions, actions ``[B, *shape]`` for Box), ``__call__(s, a,
next_s, r, d)`` returning the loss (``a`` int64 ``[B]`` for Discrete, float32 for Box; ``r``,
``d`` = terminated float32 ``[B]``) and optionally ``update_param()`` (called after every
gradient step; ``self.updates`` counts them). Compute targets under ``tf.stop_gradient``.

Optimisers: ``self.optimizer`` trains every network weight the loss has a gradient for (found on
the first step). With several, set ``self.optimizers = [opt_a, opt_b]`` and ``self.param_groups
= [net_a, net_b]`` (a Keras model or a list of variables per optimiser; Keras optimisers do not
know their variables in advance) and return ``[loss_a, loss_b]``: all gradients are taken on the
same forward pass, loss ``i`` only with respect to group ``i``, then every optimiser applies its
own. ``action`` and the gradient step run as ``tf.function`` unless ``tf_function=False``.

``state_dict()`` keys: ``<network attribute>.<index>.<variable name>`` for weights,
``<optimizer attribute>.<index>`` for optimiser variables (with ``<name>.var_index`` naming the
weights it trains), counters, the numpy rng and the policy/noise state.
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.checks import ObsEncoder, check_transitions
from marl_note.agents.noise import GaussianWhiteNoiseProcess, rng_state_from_array, rng_state_to_array
from marl_note.agents.policies import EpsGreedyQPolicy
from marl_note.agents.rl_common import explorer_state, load_explorer_state, run_updates, select_actions
from marl_note.agents.saving import Saving
from marl_note.agents.tf.common import apply_if, check_finite_update, step_names
from marl_note.types import Transitions

__all__ = ["RL"]


class RL(Saving):
    """Base class for user-defined TensorFlow/Keras agents: define the networks, ``action``, ``__call__``.

    Example (a complete DQN):
        >>> import gymnasium as gym, keras, numpy as np, tensorflow as tf
        >>> class MyDQN(RL):
        ...     def __init__(self, observation_space, action_space, lr=1e-3, seed=None):
        ...         super().__init__(observation_space, action_space, learning_starts=8, seed=seed)
        ...         def net():
        ...             return keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(32, "relu"),
        ...                                      keras.layers.Dense(self.n_actions)])
        ...         self.q, self.target = net(), net()
        ...         self.hard_update(self.target, self.q)
        ...         self.optimizer = keras.optimizers.Adam(lr)
        ...     def action(self, s):
        ...         return self.q(s)
        ...     def __call__(self, s, a, next_s, r, d):
        ...         y = tf.stop_gradient(r + self.gamma * (1 - d) * tf.reduce_max(self.target(next_s), 1))
        ...         q = tf.reduce_sum(self.q(s) * tf.one_hot(a, self.n_actions), 1)
        ...         return tf.reduce_mean(tf.square(q - y))
        ...     def update_param(self):
        ...         if self.updates % 100 == 0:
        ...             self.hard_update(self.target, self.q)
        >>> agent = MyDQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
        >>> agent.act(np.zeros((3, 4)), mask=np.array([[1, 0], [0, 1], [1, 1]], bool))[:2].tolist()
        [0, 1]
        >>> from marl_note.types import Transitions
        >>> agent.observe(Transitions(obs=np.zeros((8, 4)), act=np.zeros(8, int), rew=np.ones(8),
        ...     next_obs=np.zeros((8, 4)), terminated=np.ones(8, bool), truncated=np.zeros(8, bool)))
        >>> agent.update(batch_size=4)["gradient_steps"], sorted(agent._nets)
        (1, ['q', 'target'])
    """

    def __new__(cls, *args, **kwargs):
        missing = [name for name in ("action", "__call__") if getattr(cls, name) is getattr(RL, name)]
        if missing:
            raise TypeError(f"{cls.__name__} must define {' and '.join(_SIGNATURES[m] for m in missing)} "
                            f"to subclass marl_note.agents.tf.RL")
        return super().__new__(cls)

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, policy=None, noise=None,
                 buffer_size: int = 100_000, learning_starts: int = 1000, update_steps: int = 1,
                 gamma: float = 0.99, max_grad_norm: float | None = None, seed: int | None = None,
                 tf_function: bool = True):
        if not isinstance(observation_space, gym.Space) or not isinstance(action_space, gym.Space):
            raise TypeError("observation_space and action_space must be gymnasium spaces, got "
                            f"{type(observation_space).__name__} and {type(action_space).__name__}")
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"RL agents support Discrete and Box action spaces, got {action_space!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if int(update_steps) < 0 or int(learning_starts) < 0 or int(buffer_size) <= 0:
            raise ValueError("update_steps and learning_starts must be non-negative, buffer_size positive")
        if policy is not None and not self.discrete:
            raise TypeError("policy= is for Discrete action spaces; use noise= for Box actions")
        if noise is not None and self.discrete:
            raise TypeError("noise= is for Box action spaces; use policy= for Discrete actions")
        if policy is not None and not callable(getattr(policy, "select", None)):
            raise TypeError(f"policy must have select(values, mask, rng), got {type(policy).__name__}")
        if noise is not None and not callable(getattr(noise, "sample", None)):
            raise TypeError(f"noise must have sample(), got {type(noise).__name__}")
        self.observation_space, self.action_space = observation_space, action_space
        self.encoder = ObsEncoder(observation_space)
        self.obs_dim = self.encoder.dim
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.agent_steps = self.updates = 0
        self.gamma = float(gamma)
        self.learning_starts, self.update_steps = int(learning_starts), int(update_steps)
        self.max_grad_norm = max_grad_norm
        self.tf_function = bool(tf_function)
        self.policy = self.noise = None
        if self.discrete:
            self.n_actions, self.action_start = int(action_space.n), int(action_space.start)
            self.policy = policy if policy is not None else EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=10_000)
        else:
            self.noise = noise if noise is not None else GaussianWhiteNoiseProcess(
                sigma=0.1, size=action_space.shape, seed=int(self.rng.integers(0, 2**63 - 1)))
        from marl_note.replay import ReplayBuffer
        self.replay = ReplayBuffer(int(buffer_size), observation_space, action_space,
                                   seed=int(self.rng.integers(0, 2**63 - 1)))
        self.batch: Transitions | None = None
        self._nets: dict[str, keras.layers.Layer] = {}
        self._optims: dict[str, keras.optimizers.Optimizer] = {}
        self._groups: list[list] | None = None  # variables trained by each optimiser, fixed on the first step
        self._action_fn = self._step_fn = None
        self._rl_initialised = True

    # -- to be defined by subclasses --------------------------------------------------------------
    def action(self, s: tf.Tensor) -> tf.Tensor:
        """Q-values / logits ``[B, n]`` (Discrete) or actions ``[B, *shape]`` (Box) for observations ``s``."""
        raise NotImplementedError

    def __call__(self, s, a, next_s, r, d):
        """The loss (or one loss per optimiser) on a replay batch."""
        raise NotImplementedError

    def update_param(self) -> None:
        """Called after each gradient step (target network sync); nothing by default."""

    # -- helpers for subclasses ------------------------------------------------------------------------
    @staticmethod
    def hard_update(target: keras.layers.Layer, source: keras.layers.Layer) -> None:
        """Copy ``source``'s weights into ``target``."""
        for t, s in zip(target.weights, source.weights, strict=True):
            t.assign(s)

    @staticmethod
    def soft_update(target: keras.layers.Layer, source: keras.layers.Layer, tau: float) -> None:
        """``target <- (1 - tau) * target + tau * source`` (Polyak averaging)."""
        for t, s in zip(target.weights, source.weights, strict=True):
            t.assign(t * (1.0 - float(tau)) + s * float(tau))

    # -- construction checks ---------------------------------------------------------------------------
    def _after_init(self) -> None:
        name = type(self).__name__
        if not self.__dict__.get("_rl_initialised"):
            raise TypeError(f"{name}.__init__ must call super().__init__(observation_space, action_space, ...)")
        self._discover()
        if not self._nets:
            raise TypeError(f"{name}.__init__ must build its networks as Keras model attributes (self.q = ...)")
        if not all(net.built and net.weights for net in self._nets.values()):
            self.action(self.obs_tensor(np.zeros((1, *self.encoder.shape), np.float32)))
        unbuilt = [k for k, net in self._nets.items() if not (net.built and net.weights)]
        if unbuilt:
            raise TypeError(f"{name}: networks {unbuilt} have no weights yet; give them an input shape "
                            f"(keras.Sequential([keras.Input(shape), ...])) so they exist at construction")
        if not self._optims:
            raise TypeError(f"{name}.__init__ must create self.optimizer (or a list self.optimizers)")
        groups = getattr(self, "param_groups", None)
        if len(self._optims) > 1 and groups is None:
            raise TypeError(f"{name}: with several optimizers set self.param_groups = [...] (one network or "
                            f"list of variables per optimizer)")
        if groups is not None and len(groups) != len(self._optims):
            raise TypeError(f"{name}: self.param_groups has {len(groups)} entries for {len(self._optims)} optimizers")
        if groups is not None:
            self._groups = [list(g.trainable_variables) if isinstance(g, keras.layers.Layer) else list(g)
                            for g in groups]

    def _discover(self) -> None:
        nets, optims = {}, {}
        for attr, value in vars(self).items():
            if isinstance(value, keras.layers.Layer):
                nets[attr] = value
            elif isinstance(value, keras.optimizers.Optimizer):
                optims[attr] = value
        many = getattr(self, "optimizers", None)
        if many is not None:
            if not isinstance(many, (list, tuple)) or not all(isinstance(o, keras.optimizers.Optimizer) for o in many):
                raise TypeError("self.optimizers must be a list of Keras optimizers")
            if optims:
                raise TypeError(f"set either self.optimizers or single optimizer attributes, not both "
                                f"(found {sorted(optims)})")
            optims = {f"optimizers.{i}": o for i, o in enumerate(many)}
        elif len(optims) > 1:
            raise TypeError(f"several optimizer attributes {sorted(optims)}: put them in a list "
                            f"self.optimizers = [...] and return one loss per optimizer")
        self._nets, self._optims = nets, optims

    def _weights(self) -> list[tuple[str, Any]]:
        """``(state key, variable)`` of every network weight, in a fixed order."""
        return [(f"{name}.{j}.{v.name}", v) for name, net in self._nets.items() for j, v in enumerate(net.weights)]

    # -- tensors ---------------------------------------------------------------------------------------
    def obs_tensor(self, obs: Any, name: str = "obs") -> tf.Tensor:
        """Observations as float32 ``[B, *obs_shape]`` (one-hot ``[B, n]`` for Discrete observations)."""
        arr = self.encoder.check(obs, name)
        if isinstance(self.observation_space, gym.spaces.Discrete):
            return tf.convert_to_tensor(self.encoder(arr, name))
        return tf.convert_to_tensor(np.asarray(arr, np.float32))

    def _batch_tensors(self, batch: Transitions):
        if self.discrete:
            a = tf.convert_to_tensor(np.asarray(batch.act, np.int64) - self.action_start)
        else:
            a = tf.convert_to_tensor(np.asarray(batch.act, np.float32).reshape(len(batch), *self.action_space.shape))
        return (self.obs_tensor(batch.obs), a, self.obs_tensor(batch.next_obs, "next_obs"),
                tf.convert_to_tensor(np.asarray(batch.rew, np.float32)),
                tf.convert_to_tensor(np.asarray(batch.terminated, np.float32)))

    # -- acting ----------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        s = self.obs_tensor(obs)
        if self._action_fn is None:
            self._action_fn = tf.function(self.action, reduce_retracing=True) if self.tf_function else self.action
        out = np.asarray(self._action_fn(s))
        return select_actions(self, out, int(s.shape[0]), mask, explore)

    # -- storing ---------------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        check_transitions(transitions, self.encoder)
        self.replay.add(transitions)
        self.agent_steps += len(transitions)
        if self.policy is not None and hasattr(self.policy, "step"):
            self.policy.step(len(transitions))

    # -- learning --------------------------------------------------------------------------------------
    def _losses_and_grads(self, s, a, next_s, r, d, groups):
        with tf.GradientTape(persistent=True) as tape:
            out = self(s, a, next_s, r, d)
            losses = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(losses) != len(self._optims):
            raise ValueError(f"{type(self).__name__}.__call__ returned {len(losses)} losses for "
                             f"{len(self._optims)} optimizers; return one loss per optimizer")
        for i, loss in enumerate(losses):
            if not tf.is_tensor(loss) or loss.shape.num_elements() != 1:
                raise ValueError(f"loss {i} must be a scalar tensor, got {type(loss).__name__} "
                                 f"{getattr(loss, 'shape', '')}")
        grads = [tape.gradient(loss, group) for loss, group in zip(losses, groups)]
        del tape
        return losses, grads

    def _apply(self, losses, grads, groups):
        """Apply every optimiser's step once all losses and gradient norms are finite (none otherwise).

        Returns float32 ``[losses..., loss 0, its gradient norm, loss 1, ...]``.
        """
        steps, checks = [], []
        for loss, gs, group in zip(losses, grads, groups):
            pairs = [(g, v) for g, v in zip(gs, group) if g is not None]
            norm = tf.linalg.global_norm([g for g, _ in pairs])
            if self.max_grad_norm is not None:
                clipped, _ = tf.clip_by_global_norm([g for g, _ in pairs], float(self.max_grad_norm), use_norm=norm)
                pairs = list(zip(clipped, [v for _, v in pairs]))
            steps.append(pairs)
            checks += [tf.reshape(tf.cast(loss, tf.float32), []), tf.cast(norm, tf.float32)]
        checks = tf.stack(checks)

        def apply_all():
            for opt, pairs in zip(self._optims.values(), steps):
                opt.apply_gradients(pairs)

        apply_if(tf.reduce_all(tf.math.is_finite(checks)), apply_all)
        return tf.concat([checks[::2], checks], 0)

    def _train_step(self, s, a, next_s, r, d):
        losses, grads = self._losses_and_grads(s, a, next_s, r, d, self._groups)
        return self._apply(losses, grads, self._groups)

    def _gradient_step(self, batch_size: int) -> list[float]:
        self.batch = self.replay.sample(batch_size)
        tensors = self._batch_tensors(self.batch)
        if self._groups is None:  # first step, eagerly: one optimiser trains what the loss reaches
            every = [v for _, v in self._weights() if v.trainable]
            losses, grads = self._losses_and_grads(*tensors, [every])
            self._groups = [[v for v, g in zip(every, grads[0]) if g is not None]]
            if not self._groups[0]:
                raise ValueError(f"{type(self).__name__}: the loss has no gradient with respect to any network weight")
            grads = [[g for g in grads[0] if g is not None]]
            for opt, group in zip(self._optims.values(), self._groups):
                if not opt.built:
                    opt.build(group)
            out = self._apply(losses, grads, self._groups)
        else:
            if self._step_fn is None:
                for opt, group in zip(self._optims.values(), self._groups):
                    if not opt.built:
                        opt.build(group)
                self._step_fn = (tf.function(self._train_step, reduce_retracing=True) if self.tf_function
                                 else self._train_step)
            out = self._step_fn(*tensors)
        out = np.asarray(out)
        k = len(self._optims)
        names = step_names(*(["loss"] if k == 1 else [f"loss {i}" for i in range(k)]))
        check_finite_update(type(self).__name__, self.updates + 1, names, out[k:])
        self.updates += 1
        self.update_param()
        return [float(x) for x in out[:k]]

    def update(self, batch_size: int) -> dict[str, Any]:
        """``update_steps`` gradient steps (none before ``learning_starts`` transitions); mean losses."""
        return run_updates(self, batch_size)

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, optimiser variables, counters, rng and exploration state, as numpy arrays only."""
        self._discover()
        weights = self._weights()
        out = {key: np.array(v.numpy()) for key, v in weights}
        ids = {id(v): i for i, (_, v) in enumerate(weights)}
        for k, (name, opt) in enumerate(self._optims.items()):
            if opt.built and self._groups is not None:
                out[f"{name}.var_index"] = np.asarray([ids[id(v)] for v in self._groups[k]], np.int64)
                out.update({f"{name}.{i}": np.array(v.numpy()) for i, v in enumerate(opt.variables)})
        out["agent_steps"] = np.asarray(self.agent_steps, np.int64)
        out["updates"] = np.asarray(self.updates, np.int64)
        out["rng"] = rng_state_to_array(self.rng)
        out.update(explorer_state(self))
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._discover()
        weights = self._weights()
        missing = [key for key, _ in weights if key not in state]
        if missing:
            raise KeyError(f"state_dict is missing {missing[:8]}")
        for key, v in weights:
            if tuple(np.shape(state[key])) != tuple(v.shape):
                raise ValueError(f"{key} has shape {np.shape(state[key])}, this network expects {tuple(v.shape)}")
        groups = list(self._groups) if self._groups is not None else [None] * len(self._optims)
        for k, (name, opt) in enumerate(self._optims.items()):
            if f"{name}.var_index" not in state:
                continue
            index = np.asarray(state[f"{name}.var_index"], np.int64).reshape(-1)
            if index.size and (index.min() < 0 or index.max() >= len(weights)):
                raise ValueError(f"{name}.var_index points outside the {len(weights)} network weights")
            groups[k] = [weights[i][1] for i in index]
            if not opt.built:
                opt.build(groups[k])
            saved = sorted(int(key[len(name) + 1:]) for key in state
                           if key.startswith(name + ".") and key[len(name) + 1:].isdigit())
            if saved != list(range(len(opt.variables))):
                raise ValueError(f"{name}: the checkpoint has {len(saved)} optimizer variables, this optimizer "
                                 f"has {len(opt.variables)}")
            for i, v in enumerate(opt.variables):
                if tuple(np.shape(state[f"{name}.{i}"])) != tuple(v.shape):
                    raise ValueError(f"{name}.{i} has shape {np.shape(state[f'{name}.{i}'])}, expected {tuple(v.shape)}")
            for i, v in enumerate(opt.variables):
                v.assign(np.asarray(state[f"{name}.{i}"]))
        for key, v in weights:
            v.assign(np.asarray(state[key], v.dtype))
        if all(g is not None for g in groups):
            self._groups = groups
            self._step_fn = None
        self.agent_steps = int(np.asarray(state["agent_steps"]))
        self.updates = int(np.asarray(state["updates"]))
        rng_state_from_array(self.rng, state["rng"])
        load_explorer_state(self, state)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(nets={sorted(self._nets)}, agent_steps={self.agent_steps}, "
                f"updates={self.updates})")


_SIGNATURES = {"action": "action(self, s)", "__call__": "__call__(self, s, a, next_s, r, d) returning the loss"}
