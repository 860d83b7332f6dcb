"""The numpy half that every built-in agent shares, and the seam to its backend networks.

A built-in algorithm lives in three files (docs/ARCHITECTURE.md, "Adding an algorithm"):

- ``agents/<algo>.py``: a frozen ``<Algo>Config`` dataclass (defaults and validation, written once;
  built from the option groups of :mod:`marl_note.agents.options`) and ``<Algo>Core(AgentCore)``
  with ``config_class = <Algo>Config``: acting, storing, the update schedule, exploration, extra
  state and ``repr``, all numpy. Its ``__init__(observation_space, action_space, *, config=None,
  seed=None, ..., **overrides)`` starts from ``cfg = self._resolve_config(config, overrides)``.
  It draws the initial weights in numpy (:mod:`marl_note.agents.networks`) and hands them, with
  numpy batches, to its networks.
- ``agents/torch/<algo>.py`` and ``agents/tf/<algo>.py``: ``<Algo>Networks`` (a
  :class:`~marl_note.agents.torch.common.TorchNetworks` or
  :class:`~marl_note.agents.tf.common.TFNetworks`): the networks built from those weights,
  forward passes on numpy input, one train step on a numpy batch returning metrics, and target
  syncs; then the public class, one line: ``class DQN(DQNCore): Networks = DQNNetworks``.

The core never imports a framework; the networks never see a gymnasium space, a replay buffer or
an exploration policy. ``state_dict()`` is the networks' arrays (PyTorch names and layouts in
both backends) plus the core's counters, generator and extra state, so a checkpoint written by
either backend loads in the other.

Example:
    >>> import gymnasium as gym
    >>> from marl_note.agents.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
    >>> isinstance(agent, AgentCore), agent.agent_steps, agent.updates
    (True, 0, 0)
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np

from marl_note.agents.checkpoints.saving import Saving
from marl_note.agents.exploration.policies import LinearSchedule
from marl_note.agents.numpy_policy import NumpyPolicy
from marl_note.agents.options import RENAMED, config_signature, resolve_config
from marl_note.rng import rng_from_array, rng_to_array
from marl_note.validation import positive_float

if TYPE_CHECKING:
    from marl_note.agents.noise_scale import NoiseScaleProbe, ReplaySignal

__all__ = ["AgentCore", "LEGACY_STATE_KEYS", "Adjustable"]

# keys that release 0.1.0 wrote and nothing reads any more: ignored when a checkpoint is loaded
LEGACY_STATE_KEYS = ("torch_rng",)


class Adjustable:
    """``hyperparameters()`` / ``set_hyperparameter()`` over a core's config, policy and replay."""

    cfg: Any
    nets: Any

    def _config_knobs(self) -> tuple[str, ...]:
        """The config fields that may change at run time (each core names its own)."""
        return ()

    def _eps_policy(self) -> Any:
        policy = getattr(self, "policy", None)
        return policy if type(policy).__name__ == "EpsGreedyQPolicy" else None

    def _prioritized_replay(self) -> Any:
        replay = getattr(self, "replay", None)
        return replay if callable(getattr(replay, "set_alpha", None)) else None

    def _windowed_replay(self) -> Any:
        replay = getattr(self, "replay", None)
        return replay if callable(getattr(replay, "set_window", None)) else None

    def hyperparameters(self) -> dict[str, float]:
        """``{name: current value}`` of every hyperparameter :meth:`set_hyperparameter` accepts."""
        out = {name: float(getattr(self.cfg, name)) for name in self._config_knobs()
               if getattr(self.cfg, name) is not None}
        if self._eps_policy() is not None:
            out["eps"] = float(self._eps_policy().eps)
        replay = self._prioritized_replay()
        if replay is not None:
            out["alpha"], out["beta"] = float(replay.alpha), float(replay.beta)
        replay = self._windowed_replay()
        if replay is not None:
            out["window_size"] = float(replay.capacity if replay.window is None else replay.window)
        return out

    def set_hyperparameter(self, name: str, value: float) -> float:
        """Set one hyperparameter from the next step on (checked first; nothing changes on an error);
        returns the value now in force."""
        known = self.hyperparameters()
        replay = getattr(self, "replay", None)
        if name == "window_size" and name not in known and replay is not None:
            raise KeyError(f"{type(self).__name__}'s replay ({type(replay).__name__}) has no sampling window "
                           f"(uniform, prioritized and compact replay buffers have one)")
        if name not in known:
            raise KeyError(f"{type(self).__name__} has no adjustable hyperparameter {name!r}; "
                           f"it has {sorted(known)}")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
        if name in self._config_knobs():
            self.cfg = dataclasses.replace(self.cfg, **{name: value})  # the config checks it
            for attr in ("cfg", "config"):
                if hasattr(self.nets, attr):
                    setattr(self.nets, attr, self.cfg)
            if callable(getattr(self.nets, "set_hyperparameter", None)):
                self.nets.set_hyperparameter(name, float(getattr(self.cfg, name)))
            if name == "gamma" and "gamma" in vars(self):
                self.gamma = self.cfg.gamma
        elif name == "eps":
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"eps must be in [0, 1], got {value}")
            self._eps_policy().schedule = LinearSchedule(value, None, 1)
        elif name == "window_size":
            if not value.is_integer():
                raise ValueError(f"window_size must be a whole number of items, got {value}")
            self._windowed_replay().set_window(int(value))
        elif name == "alpha":
            self._prioritized_replay().set_alpha(value)
        else:
            self._prioritized_replay().set_beta(value)
        return self.hyperparameters()[name]


class RemoteLink:
    """An agent's side of acting in another process (:class:`~marl_note.agents.base.RemoteActing`).

    ``shell()`` is a picklable copy of the agent that acts in an actor process: an instance of its numpy
    core class without networks or replay when it acts in numpy, else a copy of itself with its networks;
    it raises a TypeError saying why when the agent cannot act there. ``state()`` is what a shell needs to
    act as the agent does now (numpy weights, counters, exploration state); ``load(state, version)``
    applies a published state to a shell. The code is :mod:`marl_note.agents.acting_shell`, imported
    only when the pool asks.

    Example:
        >>> import gymnasium as gym, numpy as np, pickle
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
        >>> shell = pickle.loads(pickle.dumps(agent.remote.shell()))
        >>> shell.remote.load(agent.remote.state(), version=0)
        >>> bool((shell.act(np.ones((2, 3))) == agent.act(np.ones((2, 3)))).all())
        True
    """

    def __init__(self, agent: AgentCore):
        self.agent = agent

    def shell(self) -> Any:
        from marl_note.agents import acting_shell  # only the pool needs it: not on the import path of an agent

        return acting_shell.acting_shell(self.agent, AgentCore)

    def state(self) -> dict[str, np.ndarray]:
        from marl_note.agents import acting_shell

        return acting_shell.acting_state(self.agent, AgentCore)

    def load(self, state: Mapping[str, np.ndarray], version: int) -> None:
        from marl_note.agents import acting_shell

        acting_shell.load_acting_state(self.agent, state, version)


class AgentCore(Saving, Adjustable):
    """Spaces, seeding, counters and numpy state of a built-in agent; ``self.nets`` does the math.

    ``rng`` drives exploration and replay sampling; ``init_rng`` (seeded from it) draws the initial
    weights, identically for both backends. Subclasses build ``self.nets = self.Networks(...)`` in
    their ``__init__`` and add their own state through ``_extra_state`` / ``_load_extra_state``.
    The original library's workflow (``set``, ``train``, ``visualize_*``) is not part of the core:
    :mod:`marl_note.compat` adds it (``from marl_note.compat.torch import DQN``).
    A class that names its ``config_class`` takes ``config=`` and keyword overrides of that
    config's fields in its own ``__init__`` (see :mod:`marl_note.agents.options`); its ``__init__``
    is given the signature that lists every field, and checkpoints record the resolved fields.
    """

    Networks: ClassVar[type]  # the backend's networks class, set by the public class
    config_class: ClassVar[type | None] = None  # the algorithm's config dataclass
    renamed_params: ClassVar[Mapping[str, str]] = RENAMED  # deprecated constructor names (checkpoints map them)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        init = cls.__dict__.get("__init__")
        if init is not None and "config_class" in cls.__dict__:  # before Saving wraps __init__ to record it
            init.__signature__ = config_signature(init, cls.__dict__["config_class"])
        super().__init_subclass__(**kwargs)

    def _resolve_config(self, config: Any, overrides: Mapping[str, Any]) -> Any:
        """This class's checked config: ``config`` (None: the defaults) with ``overrides`` applied."""
        assert self.config_class is not None
        return resolve_config(self.config_class, config, overrides, type(self).__name__,
                              ("config", "seed", "device", "compile", "numpy_acting"))

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, seed: int | None,
                 device: Any = "cpu", compile: bool = False):
        if not isinstance(observation_space, gym.Space) or not isinstance(action_space, gym.Space):
            raise TypeError("observation_space and action_space must be gymnasium spaces, got "
                            f"{type(observation_space).__name__} and {type(action_space).__name__}")
        if getattr(type(self), "Networks", None) is None:
            raise TypeError(f"{type(self).__name__} has no backend: use marl_note.agents.torch.{type(self).__name__} "
                            f"or marl_note.agents.tf.{type(self).__name__}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = device
        self.compile = bool(compile)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.init_rng = np.random.default_rng(int(self.rng.integers(0, 2**63 - 1)))
        self.agent_steps = 0
        self.updates = 0
        self.nets: Any = None
        self._numpy_policy: NumpyPolicy | None = None  # set by _publish_numpy (numpy_acting=True)
        self._noise_scale: NoiseScaleProbe | None = None  # made on first use; not part of state_dict()

    @property
    def noise_scale(self) -> NoiseScaleProbe:
        """The agent's gradient noise scale (:class:`~marl_note.agents.noise_scale.NoiseScaleProbe`): measures
        ``|G_B|^2`` on its data and keeps the estimate (made on first use: only adaptive control reads it)."""
        if self._noise_scale is None:
            from marl_note.agents.noise_scale import NoiseScaleProbe

            self._noise_scale = NoiseScaleProbe(self._grad_sq_norm, self._noise_passes, self._noise_batch,
                                                self._noise_ready, self._noise_rows, self._replica_pair,
                                                self._replay_signal)
        return self._noise_scale

    # -- the numpy acting copy ---------------------------------------------------------------------
    def _publish_numpy(self, numpy_acting: bool, nets: Mapping[str, tuple[str, str]], activation: str,
                       extra: tuple[str, ...] = (), conv: Any = None, conv_prefix: str | None = None) -> None:
        """Act through a numpy copy of ``nets`` (see :class:`NumpyPolicy`; ``conv``: the layers of their
        conv torsos) when ``numpy_acting``; a conv torso acts in the framework where the backend's
        ``numpy_conv_acting`` is False (torch: its conv kernels beat numpy's im2col at the default sizes)."""
        if conv and not getattr(self.Networks, "numpy_conv_acting", True):
            numpy_acting = False
        self._numpy_policy = NumpyPolicy(nets, activation, extra, conv, conv_prefix) if numpy_acting else None

    def numpy_policy(self) -> NumpyPolicy | None:
        """The numpy copy of the acting networks, refreshed if the weights changed since it was taken
        (``version`` is the networks' change count); None when acting goes through the framework."""
        policy = self._numpy_policy
        if policy is not None and policy.version != self.nets.version:
            policy.load(self.nets.numpy_weights(policy.prefixes), self.nets.version)
        return policy

    # -- acting in another process (RemoteActing) -------------------------------------------------
    @property
    def remote(self) -> RemoteLink:
        """How this agent acts in another process (the actor pool): ``remote.shell()``, ``remote.state()``,
        ``shell.remote.load(state, version)`` (:class:`RemoteLink`)."""
        return RemoteLink(self)

    # -- distributed training (DistributedTrainable) ---------------------------------------------------
    @property
    def local_kl_stop(self) -> bool:
        """Whether each replica of a distributed run would end its epochs on its own KL (PPO's ``target_kl``)."""
        return False

    @property
    def distributed_networks(self) -> Any:
        """The backend networks a distributed run wraps (their modules, optimisers, gradient hook)."""
        discover = getattr(self.nets, "discover", None)
        if callable(discover):  # an RL subclass: its modules are the agent's attributes
            discover(self)
        return self.nets

    # -- what Saving needs -------------------------------------------------------------------------
    @property
    def _nets(self) -> tuple[str, ...]:
        """Names of the networks whose arrays are the weights (``save_param``)."""
        return tuple(self.nets.weight_names) if self.nets is not None else ()

    def _optimizer_slot_shapes(self) -> dict[str, list[tuple[int, ...]]]:
        return self.nets.optimizer_slot_shapes()

    # -- learning rates ------------------------------------------------------------------------------
    def learning_rates(self) -> dict[str, float]:
        """``{optimizer name: learning rate}`` of every optimiser, read from the optimisers themselves.

        The names are those of the state keys (``optimizer``, ``actor_optimizer``,
        ``agent_0.critic_optimizer``, ...); ``state_dict()`` saves each rate as ``<name>.lr``.

        Example:
            >>> import gymnasium as gym
            >>> from marl_note.agents.torch import DDPG
            >>> agent = DDPG(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), hidden_sizes=(4,), seed=0)
            >>> agent.learning_rates()
            {'actor_optimizer': 0.001, 'critic_optimizer': 0.001}
            >>> agent.set_learning_rate(3e-4, "critic_optimizer")
            {'actor_optimizer': 0.001, 'critic_optimizer': 0.0003}
            >>> float(agent.state_dict()["critic_optimizer.lr"])
            0.0003
        """
        return dict(self.nets.learning_rates())

    def set_learning_rate(self, lr: float, optimizer: str | Sequence[str] | None = None) -> dict[str, float]:
        """Set the learning rate of ``optimizer`` (a name from :meth:`learning_rates`, a list of
        names, or None: every optimiser) to ``lr``, effective from the next gradient step.

        Every optimiser named gets the same ``lr`` (to keep the ratios of several, read
        :meth:`learning_rates` and set each). The constructor's ``lr`` arguments (``agent.config``)
        are left as they were; ``state_dict()`` and ``save()`` record the new rates, and loading
        a state sets them back. Returns :meth:`learning_rates`. A rate that is not a positive
        finite number, or an unknown optimiser name, raises before anything is changed.

        Example:
            >>> import gymnasium as gym
            >>> from marl_note.agents.torch import DQN
            >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
            >>> agent.set_learning_rate(1e-2)
            {'optimizer': 0.01}
            >>> agent.set_learning_rate(1e-2, "critic")
            Traceback (most recent call last):
            ...
            KeyError: "DQN has no optimizer 'critic'; its optimizers are ['optimizer']"
        """
        lr = positive_float("lr", lr, "the learning rate")
        current = self.learning_rates()
        names = list(current) if optimizer is None else [optimizer] if isinstance(optimizer, str) else list(optimizer)
        if not names:
            raise ValueError("optimizer names no optimiser: pass a name, a non-empty list of names, or None for all")
        unknown = [n for n in names if n not in current]
        if unknown:
            what = f"optimizer {unknown[0]!r}" if len(unknown) == 1 else f"optimizers {unknown}"
            raise KeyError(f"{type(self).__name__} has no {what}; its optimizers are {list(current)}")
        for name in names:
            self.nets.set_learning_rate(name, lr)
        return self.learning_rates()

    # -- gradient noise scale (what self.noise_scale measures with) ---------------------------------
    def _grad_sq_norm(self, batch: Any) -> float:
        """``|G_B|^2`` of ``batch``'s mean main loss (see ``NoiseScaleProbe.grad_sq_norm``)."""
        return float(self.nets.grad_sq_norm(self._gradient_inputs(batch)))

    def _gradient_inputs(self, batch: Any) -> Any:
        """What the networks' ``grad_sq_norm`` takes for ``batch`` (each core says)."""
        raise NotImplementedError(f"{type(self).__name__} has no grad_sq_norm")

    def _replica_pair(self, optimizer: str, rows: int) -> tuple[float, int, float, int] | None:
        """The noise measurement of the last distributed step of ``optimizer`` (None in one process); read
        from the networks of now (``set()`` may have rebuilt them)."""
        measure = getattr(self.nets, "replica_grad_sq", None)
        return measure(optimizer, rows) if measure is not None else None

    def _fold_replica_noise(self, optimizer: str, rows: int) -> None:
        """After a distributed gradient step, fold its free noise measurement (``NoiseScaleProbe.fold_replica``)."""
        pair = self._replica_pair(optimizer, rows)  # taken once: the networks forget it
        if pair is not None:
            self.noise_scale.estimator.update(*pair)

    def _noise_batch(self, size: int, rng: np.random.Generator) -> Any:
        replay = getattr(self, "replay", None)
        if replay is None or len(replay) == 0:
            return None
        if not callable(getattr(replay, "get", None)):
            return replay.sample(size)
        return replay.get(rng.integers(0, len(replay), size=size, dtype=np.int64))

    def _noise_passes(self, b_small: int, b_big: int, rng: np.random.Generator) -> Any:
        """The two gradient passes of a measurement on the agent's data (None while there is none)."""
        small = self._noise_batch(b_small, rng)
        if small is None:
            return None
        big = self._noise_batch(b_big, rng)
        return (lambda: self._grad_sq_norm(small)), (lambda: self._grad_sq_norm(big))

    def _noise_ready(self) -> bool:
        return self._noise_rows() > 0

    def _noise_rows(self) -> int:
        replay = getattr(self, "replay", None)
        return 0 if replay is None else len(replay)

    def _replay_signal(self) -> ReplaySignal:
        from marl_note.agents.noise_scale import ReplaySignal

        replay = getattr(self, "replay", None)
        if replay is None:
            return ReplaySignal()
        prioritized = callable(getattr(replay, "effective_sample_size", None))
        ess = None
        if prioritized and len(replay):
            count = replay.window_count() if callable(getattr(replay, "window_count", None)) else len(replay)
            ess = float(replay.effective_sample_size()) / max(1, count)
        return ReplaySignal(ess=ess, window_span=int(getattr(replay, "window_span", 0) or 0),
                            capacity=int(getattr(replay, "capacity", 0) or 0), prioritized=prioritized)

    # -- state ---------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights, optimiser slots, counters, generator and extra state, as numpy arrays only."""
        out = dict(self.nets.state_dict())
        out["agent_steps"] = np.asarray(self.agent_steps, np.int64)
        out["updates"] = np.asarray(self.updates, np.int64)
        out["rng"] = rng_to_array(self.rng)
        out.update(self._extra_state())
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.nets.load_state_dict(state)
        self.agent_steps = int(np.asarray(state["agent_steps"]))
        self.updates = int(np.asarray(state["updates"]))
        rng_from_array(self.rng, state["rng"])
        self._load_extra_state(state)
