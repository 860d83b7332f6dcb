"""Write your own TensorFlow/Keras agent on :class:`RL`: networks, ``action``, a loss, ``update_param``.

The contract and everything numpy are :mod:`marl_note.compat.rl`'s, as for the PyTorch ``RL``.
Here: the networks are Keras model attributes whose weights exist (e.g. a ``keras.Sequential``
starting with ``keras.Input``) and the optimiser a Keras optimiser attribute; compute targets
under ``tf.stop_gradient``. ``action`` and the gradient step run as ``tf.function`` unless
``RL(..., tf_function=False)``.

Optimisers: ``self.optimizer`` trains every network weight the loss has a gradient for (found on
the first step). With several, set ``self.optimizers = [opt_a, opt_b]`` and ``self.param_groups
= [net_a, net_b]`` (a Keras model or a list of variables per optimiser; Keras optimisers do not
know their variables in advance) and return ``[loss_a, loss_b]``: all gradients are taken on the
same forward pass, loss ``i`` only with respect to group ``i``, then every optimiser applies its
own, and none does unless every loss and gradient norm is finite.

Under a ``tf.distribute`` strategy (``MirroredStrategy``, ``MultiWorkerMirroredStrategy``): build
the agent inside ``strategy.scope()`` (``with strategy.scope(): agent = MyDQN(...)``), so that its
networks and optimisers are the strategy's; each gradient step then runs on every replica on its
slice of the batch, and the optimisers apply the global batch's gradients (each replica's scaled
by its share of the rows, summed), as the built-in TF agents do. A network or optimiser made
outside the scope, ``tf_function=False`` and a ``ParameterServerStrategy`` are refused at
construction.

``state_dict()`` keys: ``<network attribute>.<index>.<variable name>`` for weights,
``<optimizer attribute>.lr`` for the learning rate, ``<optimizer attribute>.<index>`` for optimiser
variables once it has stepped (with ``<name>.var_index`` naming the weights it trains), counters,
the numpy rng and the policy/noise state.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from marl_note.agents.tf.common import apply_if, check_finite_update, step_names
from marl_note.agents.tf.distribute import (
    active_strategy,
    apply_across_replicas,
    in_replica_step,
    reduced_then,
    replicated_function,
)
from marl_note.compat.rl import RLCore
from marl_note.compat.rl_config import discover, loss_list
from marl_note.compat.workflow import Workflow

__all__ = ["RL", "RLNetworks"]


class RLNetworks:
    """The user's Keras models and optimisers (attributes of the agent) behind the numpy seam.

    ``groups[i]`` are the variables optimiser ``i`` trains: from ``param_groups``, from a
    checkpoint's ``var_index``, or (one optimiser) every weight the loss reaches on the first step.
    """

    module_kind = "Keras model"
    device = None  # TensorFlow places the user's models itself

    def __init__(self, tf_function: bool = True):
        self.tf_function = bool(tf_function)
        self.models: dict[str, keras.layers.Layer] = {}
        self.optimizers: dict[str, keras.optimizers.Optimizer] = {}
        self.groups: list[list] | None = None
        self._action_fn: Any = None
        self._step_fn: Any = None
        self._fresh: dict[str, list[np.ndarray]] = {}  # optimizer name -> its variables right after build
        self.strategy: tf.distribute.Strategy | None = None  # the strategy whose scope built the agent (setup)

    @property
    def weight_names(self) -> tuple[str, ...]:
        return tuple(self.models)

    def discover(self, agent: RLCore) -> None:
        self.models, self.optimizers = discover(agent, keras.layers.Layer, keras.optimizers.Optimizer)

    def setup(self, agent: RLCore) -> None:
        """Build models that have no weights yet by one call of ``action``; refuse those still without."""
        if not all(net.built and net.weights for net in self.models.values()):
            agent.action(tf.convert_to_tensor(agent.obs_array(np.zeros((1, *agent.encoder.shape)))))
        unbuilt = [k for k, net in self.models.items() if not (net.built and net.weights)]
        if unbuilt:
            raise TypeError(f"{type(agent).__name__}: networks {unbuilt} have no weights yet; give them an input "
                            f"shape (keras.Sequential([keras.Input(shape), ...])) so they exist at construction")
        self.strategy = active_strategy()
        if self.strategy is not None:
            self._check_strategy(agent)

    def _check_strategy(self, agent: RLCore) -> None:
        """Refuse, before any step, what cannot run under the strategy whose scope builds the agent."""
        name, kind = type(agent).__name__, type(self.strategy).__name__
        if isinstance(self.strategy, tf.distribute.experimental.ParameterServerStrategy):
            raise TypeError(f"{name}: RL subclasses do not run under a ParameterServerStrategy (their steps are not "
                            f"scheduled on workers); use MirroredStrategy or MultiWorkerMirroredStrategy, or a "
                            f"built-in TF agent")
        if not self.tf_function:
            raise ValueError(f"{name}(tf_function=False) steps eagerly; under {kind} each step runs on every replica "
                             f"as a tf.function: drop tf_function=False")
        outside = [k for k, net in self.models.items() if not all(_distributed(v) for v in net.weights)]
        outside += [k for k, opt in self.optimizers.items() if not _distributed(opt.iterations)]
        if outside:
            raise TypeError(f"{name}: {outside} were made outside {kind}.scope(); build the whole agent inside it "
                            f"(with strategy.scope(): agent = {name}(...)) so its weights and optimizers are "
                            f"the strategy's")
        for opt in self.optimizers.values():
            apply_across_replicas(opt)

    def set_groups(self, agent: RLCore) -> None:
        groups = getattr(agent, "param_groups", None)
        if len(self.optimizers) > 1 and groups is None:
            raise TypeError(f"{type(agent).__name__}: with several optimizers set self.param_groups = [...] "
                            f"(one network or list of variables per optimizer)")
        if groups is not None:
            self.groups = [list(g.trainable_variables) if isinstance(g, keras.layers.Layer) else list(g)
                           for g in groups]

    @staticmethod
    def blend(target: keras.layers.Layer, source: keras.layers.Layer, tau: float | None) -> None:
        """Copy ``source``'s weights into ``target`` (``tau=None``) or move them ``tau`` of the way."""
        for t, s in zip(target.weights, source.weights, strict=True):
            t.assign(s if tau is None else t * (1.0 - tau) + s * tau)

    def weights(self) -> list[tuple[str, Any]]:
        """``(state key, variable)`` of every network weight, in a fixed order."""
        return [(f"{name}.{j}.{v.name}", v) for name, net in self.models.items() for j, v in enumerate(net.weights)]

    # -- forward and train step ------------------------------------------------------------------------
    def forward(self, agent: RLCore, s: np.ndarray) -> Any:
        """``agent.action(s)`` as numpy (a tuple of arrays where it returns a tuple or list)."""
        if self._action_fn is None:
            self._action_fn = tf.function(agent.action, reduce_retracing=True) if self.tf_function else agent.action
        return _numpy(self._action_fn(tf.convert_to_tensor(s)))

    @staticmethod
    def call(fn: Any, arrays: tuple[np.ndarray, ...]) -> Any:
        """``fn`` of the batch's tensors (eagerly, no gradient tape) as numpy (e.g. ``td_error``)."""
        return _numpy(fn(*(tf.convert_to_tensor(x) for x in arrays)))

    def _losses_and_grads(self, agent: RLCore, tensors: tuple, groups: list[list]) -> tuple[list, list]:
        with tf.GradientTape(persistent=True) as tape:
            losses = loss_list(agent, agent(*tensors), len(self.optimizers))
        for i, loss in enumerate(losses):
            if not tf.is_tensor(loss) or loss.shape.num_elements() != 1:
                raise ValueError(f"loss {i} must be a scalar tensor, got {type(loss).__name__} "
                                 f"{getattr(loss, 'shape', '')}")
        grads = [tape.gradient(loss, group) for loss, group in zip(losses, groups)]
        del tape
        return losses, grads

    def _apply(self, losses: list, grads: list, max_grad_norm: float | None) -> tf.Tensor:
        """Apply every optimiser's step once all losses and gradient norms are finite (none otherwise).

        Returns float32 ``[losses..., loss 0, its gradient norm, loss 1, ...]``. In a replica of a
        strategy: once, on the global batch's losses and gradients.
        """
        if in_replica_step():
            return reduced_then(lambda ls, gs: self._apply_local(ls, gs, max_grad_norm), losses, grads)
        return self._apply_local(losses, grads, max_grad_norm)

    def _apply_local(self, losses: list, grads: list, max_grad_norm: float | None) -> tf.Tensor:
        assert self.groups is not None
        steps, checks = [], []
        for loss, gs, group in zip(losses, grads, self.groups):
            pairs = [(g, v) for g, v in zip(gs, group) if g is not None]
            norm = tf.linalg.global_norm([g for g, _ in pairs])
            if max_grad_norm is not None:
                clipped, _ = tf.clip_by_global_norm([g for g, _ in pairs], float(max_grad_norm), use_norm=norm)
                pairs = list(zip(clipped, [v for _, v in pairs]))
            steps.append(pairs)
            checks += [tf.reshape(tf.cast(loss, tf.float32), []), tf.cast(norm, tf.float32)]
        stacked = tf.stack(checks)

        def apply_all() -> None:
            for opt, pairs in zip(self.optimizers.values(), steps):
                opt.apply_gradients(pairs)

        apply_if(tf.reduce_all(tf.math.is_finite(stacked)), apply_all)
        return tf.concat([stacked[::2], stacked], 0)

    def _find_groups(self, agent: RLCore, tensors: tuple) -> tuple[list, list]:
        """Eagerly: the one optimiser trains every weight the loss reaches; the losses and those gradients."""
        every = [v for _, v in self.weights() if v.trainable]
        losses, grads = self._losses_and_grads(agent, tensors, [every])
        self.groups = [[v for v, g in zip(every, grads[0]) if g is not None]]
        if not self.groups[0]:
            raise ValueError(f"{type(agent).__name__}: the loss has no gradient with respect to any network weight")
        return losses, [[g for g in grads[0] if g is not None]]

    def _first_step(self, agent: RLCore, tensors: tuple) -> tf.Tensor:
        """Eagerly: find the one optimiser's weights (:meth:`_find_groups`) and step on them."""
        losses, grads = self._find_groups(agent, tensors)
        self._build_optimizers()
        return self._apply(losses, grads, agent.max_grad_norm)

    def _build_optimizers(self) -> None:
        for name, opt, group in zip(self.optimizers, self.optimizers.values(), self.groups or []):
            if not opt.built:
                self._build(name, opt, group)

    def _build(self, name: str, opt: Any, group: list) -> None:
        """Build ``opt`` on ``group`` and remember its fresh variables (what loading an unstepped state resets to)."""
        if self.strategy is not None:
            with self.strategy.scope():
                opt.build(group)
        else:
            opt.build(group)
        self._fresh[name] = [np.array(v.numpy()) for v in opt.variables]

    def train_step(self, agent: RLCore, arrays: tuple[np.ndarray, ...]) -> list[float]:
        """One guarded gradient step of the user's loss(es) on the numpy batch; the losses as floats."""
        tensors = tuple(tf.convert_to_tensor(x) for x in arrays)
        if self.groups is None and self.strategy is not None:
            self._find_groups(agent, tensors)  # (then the replicated step below, from the first step on)
        if self.groups is None:
            out = self._first_step(agent, tensors)
        else:
            if self._step_fn is None:
                self._build_optimizers()

                def step(*batch: tf.Tensor) -> tf.Tensor:
                    assert self.groups is not None
                    return self._apply(*self._losses_and_grads(agent, batch, self.groups), agent.max_grad_norm)
                if self.strategy is not None:
                    specs = [tf.TensorSpec([None, *t.shape[1:]], t.dtype) for t in tensors]
                    self._step_fn = replicated_function(self.strategy, step, specs)
                else:
                    self._step_fn = tf.function(step, reduce_retracing=True) if self.tf_function else step
            out = self._step_fn(*tensors)
        values, k = np.asarray(out), len(self.optimizers)
        names = step_names(*(["loss"] if k == 1 else [f"loss {i}" for i in range(k)]))
        check_finite_update(type(agent).__name__, agent.updates + 1, names, values[k:])
        return [float(x) for x in values[:k]]

    # -- learning rates --------------------------------------------------------------------------------
    def learning_rates(self) -> dict[str, float]:
        """``{optimizer name: learning rate}`` (a schedule's current value)."""
        return {name: float(np.asarray(opt.learning_rate)) for name, opt in self.optimizers.items()}

    def set_learning_rate(self, name: str, lr: float) -> None:
        """Set optimiser ``name``'s learning rate; a Keras optimiser built on a schedule refuses."""
        opt = self.optimizers[name]
        if not _settable(opt):
            raise TypeError(f"{name} ({type(opt).__name__}) follows a LearningRateSchedule, so its learning rate "
                            f"cannot be set; give it a float learning_rate to set it at run time")
        opt.learning_rate = lr

    # -- numpy state -----------------------------------------------------------------------------------
    def optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return {}  # optimiser variables are saved whole (``<name>.<i>``), not as per-parameter slots

    def lr_keys(self) -> tuple[str, ...]:
        """The ``<name>.lr`` state keys (optimisers with a settable learning rate)."""
        return tuple(f"{name}.lr" for name, opt in self.optimizers.items() if _settable(opt))

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, ``<name>.lr`` and, once an optimiser has stepped, its variables and ``var_index``."""
        weights = self.weights()
        out = {key: np.array(v.numpy()) for key, v in weights}
        ids = {id(v): i for i, (_, v) in enumerate(weights)}
        for k, (name, opt) in enumerate(self.optimizers.items()):
            if _settable(opt):
                out[f"{name}.lr"] = np.asarray(float(np.asarray(opt.learning_rate)), np.float64)
            if opt.built and self.groups is not None and int(opt.iterations.numpy()) > 0:
                out[f"{name}.var_index"] = np.asarray([ids[id(v)] for v in self.groups[k]], np.int64)
                out.update({f"{name}.{i}": np.array(v.numpy()) for i, v in enumerate(opt.variables)})
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        weights = self.weights()
        missing = [key for key, _ in weights if key not in state]
        if missing:
            raise KeyError(f"state_dict is missing {missing[:8]}")
        for key, v in weights:
            if tuple(np.shape(state[key])) != tuple(v.shape):
                raise ValueError(f"{key} has shape {np.shape(state[key])}, this network expects {tuple(v.shape)}")
        groups: list[Any] = list(self.groups) if self.groups is not None else [None] * len(self.optimizers)
        for k, (name, opt) in enumerate(self.optimizers.items()):
            if f"{name}.var_index" in state:
                groups[k] = self._load_optimizer(name, opt, state, weights)
            elif name in self._fresh:  # a state saved before this optimiser stepped: back to its fresh variables
                for v, fresh in zip(opt.variables, self._fresh[name]):
                    v.assign(fresh)
            if f"{name}.lr" in state and _settable(opt):
                opt.learning_rate = float(np.asarray(state[f"{name}.lr"]))
        for key, v in weights:
            v.assign(np.asarray(state[key], v.dtype))
        if all(g is not None for g in groups):
            self.groups = groups
            self._step_fn = None

    def _load_optimizer(self, name: str, opt: Any, state: Mapping[str, Any], weights: list[tuple[str, Any]]) -> list:
        """Build ``opt`` on the weights its ``var_index`` names and load its variables; returns those weights."""
        index = np.asarray(state[f"{name}.var_index"], np.int64).reshape(-1)
        if index.size and (index.min() < 0 or index.max() >= len(weights)):
            raise ValueError(f"{name}.var_index points outside the {len(weights)} network weights")
        group = [weights[i][1] for i in index]
        if not opt.built:
            self._build(name, opt, group)
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
        return group


def _numpy(out: Any) -> Any:
    if isinstance(out, (tuple, list)):
        return tuple(_numpy(o) for o in out)
    return np.asarray(out)


def _distributed(variable: Any) -> bool:
    """Whether a (Keras) variable is a ``tf.distribute`` one (made in a strategy's scope)."""
    return isinstance(getattr(variable, "value", variable), tf.distribute.DistributedValues)


def _settable(opt: Any) -> bool:
    """Whether a Keras optimiser's learning rate is a variable (not a LearningRateSchedule)."""
    return isinstance(opt.learning_rate, keras.Variable)


class RL(Workflow, RLCore):
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
        >>> rng = np.random.default_rng(0)
        >>> batch = Transitions(obs=rng.uniform(-1, 1, (8, 4)), act=rng.integers(0, 2, 8), rew=np.ones(8),
        ...                     next_obs=rng.uniform(-1, 1, (8, 4)), terminated=np.ones(8, bool),
        ...                     truncated=np.zeros(8, bool))
        >>> agent.observe(batch); metrics = agent.update(batch_size=4)
        >>> metrics["gradient_steps"], sorted(agent._nets), "optimizer.var_index" in agent.state_dict()
        (1, ['q', 'target'], True)
    """

    Networks = RLNetworks

    def __init__(self, observation_space: Any, action_space: Any, *args: Any, seed: int | None = None,
                 **kwargs: Any):
        if seed is not None:  # the layers the subclass builds next start from the seed (Keras' global seed:
            keras.utils.set_random_seed(seed)  # Python's, numpy's global and the backend's generators)
        super().__init__(observation_space, action_space, *args, seed=seed, **kwargs)

    @property
    def optional_state_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """``<optimizer>.lr``: checkpoints written before the state saved learning rates lack them."""
        return self.nets.lr_keys()

    @property
    def tf_function(self) -> bool:
        """Whether ``action`` and the gradient step run as ``tf.function``."""
        return self.nets.tf_function

    def obs_tensor(self, obs: Any, name: str = "obs") -> tf.Tensor:
        """Observations as float32 ``[B, *obs_shape]`` (one-hot ``[B, n]`` for Discrete observations)."""
        return tf.convert_to_tensor(self.obs_array(obs, name))
