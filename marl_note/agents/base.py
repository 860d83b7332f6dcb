"""The agent contract (numpy in, numpy out) and the simplest agent.

Everything the trainer, the actor pool, checkpoints, the command line, the finders and the
distributed contexts need from an agent is one of the Protocols below; they ask with
``isinstance`` (each is runtime-checkable) and never probe an agent's attributes. An agent
implements the ones it needs:

- ``Acting``: ``act(obs, mask=None, explore=False)``, all a scripted seat needs;
  ``Agent``: with its ``action_space``; ``PerEnvAgent``: keeps per-env state
  (``accepts_env_ids = True``, ``act(..., env_ids=)``); ``HasObservationSpace``: declares
  the ``observation_space`` checked against its seat's.
- ``Learner``: ``observe(transitions)`` and ``update(batch_size) -> metrics``, a learning seat;
  ``Stateful``: ``state_dict()`` / ``load_state_dict(state)`` of numpy arrays (run checkpoints);
  ``LearningAgent``: all of these; ``CountsEnvSteps``: ``observe_env_steps(n)``, told the env
  steps behind each delivery; ``HasReplay``: a ``replay`` buffer whose contents are saved too.
- ``JointLearner``: a centralised learner (MADDPG), ``observe_joint``, ``update``,
  ``seat_agents()``; ``JointSeat``: one of its seat actors (``joint_learner``).
- ``Saveable``: ``save_param`` / ``restore_param``, ``param_keys`` and the recorded ``config``;
  ``Cloneable``: ``clone()`` (self-play snapshots); ``Tunable``: learning rates and
  hyperparameters that may change during a run.
- ``RemoteActing``: a picklable, framework-free acting shell and its numpy acting state (the
  actor pool); ``DistributedTrainable``: the backend networks a distributed run wraps, and
  whether its epochs stop on a local KL.

Whether an agent is on-policy is not an attribute to probe: :func:`marl_note.agents.registry.is_on_policy`
is the one definition (the registry entry, or an ``on_policy: ClassVar[bool]`` the class declares).

Example:
    >>> import gymnasium as gym
    >>> from marl_note.agents.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
    >>> [isinstance(agent, p) for p in (LearningAgent, Saveable, Tunable, RemoteActing, JointLearner)]
    [True, True, True, True, False]
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from marl_note.types import EnvSpec, JointTransitions, Transitions, obs_batch_size

__all__ = ["Acting", "Agent", "PerEnvAgent", "EpisodeAware", "HasObservationSpace", "Learner", "Stateful",
           "LearningAgent", "CountsEnvSteps", "HasReplay", "JointLearner", "JointLearnerClass", "JointSeat", "Saveable",
           "Cloneable", "Tunable",
           "RemotePort", "RemoteActing", "DistributedTrainable", "ActionProbabilities", "RandomAgent",
           "is_learning_agent"]


@runtime_checkable
class Acting(Protocol):
    """Batched ``act``: all a scripted seat needs (its spaces are optional).

    Example:
        >>> class Zero:
        ...     def act(self, obs, mask=None, explore=False):
        ...         return np.zeros(len(obs), dtype=np.int64)
        >>> isinstance(Zero(), Acting), isinstance(Zero(), Agent)
        (True, False)
    """

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray: ...


@runtime_checkable
class Agent(Acting, Protocol):
    """``Acting`` with the action space it was built for.

    Example:
        >>> import gymnasium as gym
        >>> class AlwaysZero:
        ...     action_space = gym.spaces.Discrete(3)
        ...     def act(self, obs, mask=None, explore=False):
        ...         return np.zeros(len(obs), dtype=np.int64)
        >>> isinstance(AlwaysZero(), Agent)
        True
    """

    action_space: gym.Space

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray: ...


@runtime_checkable
class HasObservationSpace(Protocol):
    """An agent that declares the observation space it was built for (checked against its seat's).

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2), gym.spaces.Discrete(3)), HasObservationSpace)
        True
    """

    observation_space: gym.Space


@runtime_checkable
class Learner(Protocol):
    """A learning seat: ``observe`` this agent's transitions, ``update`` from them.

    ``update`` returns metrics that include ``"gradient_steps"`` (an int).

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), Learner)
        False
    """

    def observe(self, transitions: Transitions) -> None: ...

    def update(self, batch_size: int) -> dict[str, Any]: ...


@runtime_checkable
class Stateful(Protocol):
    """Numpy state a run checkpoint saves and puts back (agents and callbacks alike).

    Example:
        >>> class Counter:
        ...     def state_dict(self): return {"n": np.asarray(0)}
        ...     def load_state_dict(self, state): pass
        >>> isinstance(Counter(), Stateful)
        True
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class LearningAgent(Agent, Learner, Stateful, HasObservationSpace, Protocol):
    """A seat that learns: ``observe`` transitions, ``update``, numpy state, both spaces.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), LearningAgent)
        False
    """


@runtime_checkable
class CountsEnvSteps(Protocol):
    """Told how many env steps (not rows) each delivery of transitions covered.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> isinstance(DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,)), CountsEnvSteps)
        True
    """

    def observe_env_steps(self, env_steps: int) -> None: ...


@runtime_checkable
class HasReplay(Protocol):
    """An agent with a replay buffer (``state_dict`` / ``load_state_dict`` of its contents).

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN, PPO
        >>> space, acts = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
        >>> isinstance(DQN(space, acts, hidden_sizes=(4,)), HasReplay), isinstance(PPO(space, acts), HasReplay)
        (True, False)
    """

    replay: Any


@runtime_checkable
class PerEnvAgent(Agent, Protocol):
    """An agent with per-env state: ``accepts_env_ids = True`` and ``act(..., env_ids=)``.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), PerEnvAgent)
        False
    """

    accepts_env_ids: bool

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False,
            env_ids: np.ndarray | None = None) -> np.ndarray: ...


@runtime_checkable
class EpisodeAware(Protocol):
    """An agent told when an env starts an episode: ``begin_episode(env_ids)`` (NFSP draws the policy it
    plays for the episode); the collector calls it for each agent seated in the env, after ``reset``
    and whenever the env starts its next episode.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), EpisodeAware)
        False
    """

    def begin_episode(self, env_ids: np.ndarray) -> None: ...


@runtime_checkable
class JointLearner(Protocol):
    """A centralised learner (MADDPG) behind seat actors whose ``joint_learner`` it is.

    It learns from joint per-step data of every seat (``observe_joint``) instead of per-seat
    transitions; ``seat_agents()`` are its seat actors in seat order.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), JointLearner)
        False
    """

    def observe_joint(self, joint: JointTransitions) -> None: ...

    def update(self, batch_size: int) -> dict[str, Any]: ...

    def seat_agents(self) -> Sequence[Any]: ...


@runtime_checkable
class JointLearnerClass(Protocol):
    """The class of a :class:`JointLearner`: it builds one over an env's seats from the env's
    :class:`~marl_note.types.EnvSpec` (its spaces, and its global state where the learner uses it).

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import MADDPG
        >>> spec = EnvSpec(("a", "b"), dict.fromkeys("ab", gym.spaces.Box(-1, 1, (3,))),
        ...                dict.fromkeys("ab", gym.spaces.Discrete(2)), turn_based=False, has_action_mask=False)
        >>> isinstance(MADDPG, JointLearnerClass), len(MADDPG.from_spec(spec, hidden_sizes=(4,)).seat_agents())
        (True, 2)
    """

    def from_spec(self, spec: EnvSpec, **hyperparameters: Any) -> JointLearner: ...


@runtime_checkable
class JointSeat(Acting, Protocol):
    """A seat actor of a :class:`JointLearner`: it acts for one seat and learns through ``joint_learner``.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import MADDPG
        >>> m = MADDPG({"a": gym.spaces.Box(-1, 1, (3,))}, {"a": gym.spaces.Discrete(2)}, hidden_sizes=(4,))
        >>> seat = m.seat_agents()[0]
        >>> isinstance(seat, JointSeat), isinstance(m, JointLearner), seat.joint_learner is m
        (True, True, True)
    """

    joint_learner: JointLearner


@runtime_checkable
class Saveable(Stateful, Protocol):
    """Checkpoints of one agent: weights only (``save_param`` / ``restore_param``), the names of the
    weight arrays in its state (``param_keys``), and the constructor arguments it records (``config``;
    the spaces named in ``saving_spaces`` are recorded beside them).

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,))
        >>> isinstance(agent, Saveable), agent.config["hidden_sizes"], agent.saving_spaces
        (True, (4,), ('observation_space', 'action_space'))
    """

    saving_spaces: ClassVar[tuple[str, ...]]

    @property
    def config(self) -> dict[str, Any]: ...

    def param_keys(self, state: Mapping[str, Any] | None = None) -> list[str]: ...

    def save_param(self, path: Any) -> str: ...

    def restore_param(self, path: Any, strict: bool = True) -> None: ...


@runtime_checkable
class Cloneable(Protocol):
    """An agent that makes its own independent copy (self-play snapshots use it first).

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), Cloneable)
        False
    """

    def clone(self) -> Any: ...


@runtime_checkable
class Tunable(Protocol):
    """Settings that may change during a run: the optimisers' learning rates and named hyperparameters
    (learning-rate finders, schedules, the adaptive callbacks: ``trainer.request(learning_rate=...,
    hyperparameters=...)`` changes them between update rounds, on every rank).

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,))
        >>> isinstance(agent, Tunable), agent.learning_rates()
        (True, {'optimizer': 0.001})
    """

    def learning_rates(self) -> dict[str, float]: ...

    def set_learning_rate(self, lr: float, optimizer: str | Sequence[str] | None = None) -> dict[str, float]: ...

    def hyperparameters(self) -> dict[str, float]: ...

    def set_hyperparameter(self, name: str, value: float) -> float: ...


class RemotePort(Protocol):
    """The three calls of acting in another process: ``shell()`` (a picklable copy that acts; a TypeError
    saying why when the agent cannot act remotely), ``state()`` (what the learner publishes, numpy arrays
    only) and, on a shell's port, ``load(state, version)``."""

    def shell(self) -> Any: ...

    def state(self) -> dict[str, np.ndarray]: ...

    def load(self, state: Mapping[str, np.ndarray], version: int) -> None: ...


@runtime_checkable
class RemoteActing(Protocol):
    """An agent that acts in another process (the actor pool), through its ``remote`` port.

    Example:
        >>> import gymnasium as gym, pickle
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
        >>> shell = pickle.loads(pickle.dumps(agent.remote.shell()))
        >>> shell.remote.load(agent.remote.state(), version=0)
        >>> bool((shell.act(np.ones((2, 3))) == agent.act(np.ones((2, 3)))).all())
        True
    """

    @property
    def remote(self) -> RemotePort: ...


@runtime_checkable
class DistributedTrainable(Protocol):
    """An agent a distributed run (torch ranks, TF workers) trains in lockstep.

    ``distributed_networks`` is its backend networks object (a ``TorchNetworks`` or
    ``TFNetworks``: the modules to broadcast and whose gradients to average); ``local_kl_stop`` is
    True when each replica would end its epochs on its own KL (PPO's ``target_kl``), which would
    break the lockstep.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import PPO
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), target_kl=0.01)
        >>> isinstance(agent, DistributedTrainable), agent.local_kl_stop
        (True, True)
    """

    @property
    def local_kl_stop(self) -> bool: ...

    @property
    def distributed_networks(self) -> Any: ...


@runtime_checkable
class ActionProbabilities(Protocol):
    """The probabilities of the policy an agent acts by, per legal action (discrete actions).

    ``policy_probs(obs, mask=None)`` returns an array ``[batch, n_actions]`` whose rows sum to 1
    over the legal actions (``mask`` True) and are 0 on illegal ones: a greedy agent's row is
    one-hot on the action ``act`` picks, a softmax policy's row its masked softmax. Exact
    evaluation (exploitability in OpenSpiel games) reads this.

    Example:
        >>> class Left:
        ...     def act(self, obs, mask=None, explore=False):
        ...         return np.zeros(len(obs), dtype=np.int64)
        ...     def policy_probs(self, obs, mask=None):
        ...         return np.tile([1.0, 0.0], (len(obs), 1))
        >>> isinstance(Left(), ActionProbabilities)
        True
    """

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray: ...


def masked_probs(probs: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``probs [batch, n]`` zeroed on illegal actions and renormalised over the legal ones.

    A row whose legal actions all have probability 0 becomes uniform over its legal actions;
    a row with no legal action is refused.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if mask is None:
        return probs / probs.sum(axis=1, keepdims=True)
    mask = np.asarray(mask, dtype=bool).reshape(probs.shape)
    if not mask.any(axis=1).all():
        raise ValueError("policy_probs got an observation with no legal action")
    out = np.where(mask, probs, 0.0)
    total = out.sum(axis=1, keepdims=True)
    empty = total[:, 0] <= 0
    if empty.any():
        out[empty] = mask[empty]
        total[empty] = mask[empty].sum(axis=1, keepdims=True)
    return out / total


def is_learning_agent(agent: Any) -> bool:
    """Whether ``agent`` acts and learns (:class:`Acting` and :class:`Learner`)."""
    return isinstance(agent, Acting) and isinstance(agent, Learner)


class RandomAgent:
    """Uniformly random over legal actions (or over the action space when unmasked).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> agent = RandomAgent(gym.spaces.Discrete(3), seed=0)
        >>> agent.act(np.zeros((2, 4)), mask=np.array([[0, 1, 0], [1, 0, 0]], bool)).tolist()
        [1, 0]
    """

    def __init__(self, action_space: gym.Space, observation_space: gym.Space | None = None, seed: int | None = None):
        if not isinstance(action_space, gym.Space):
            raise TypeError(f"RandomAgent needs a gymnasium action space, got {type(action_space).__name__}")
        self.action_space = action_space
        if observation_space is not None:
            self.observation_space = observation_space
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        n = obs_batch_size(obs)  # a goal env's observations are a dict of batched arrays
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            if mask is None:
                return space.start + self.rng.integers(0, space.n, size=n)
            mask = np.asarray(mask, bool)
            # pick the k-th legal action with k uniform in [0, num_legal)
            counts = mask.sum(axis=1)
            if np.any(counts == 0):
                raise ValueError("RandomAgent got an observation with no legal action")
            k = (self.rng.random(n) * counts).astype(np.int64)
            return space.start + (np.cumsum(mask, axis=1) > k[:, None]).argmax(axis=1)
        if isinstance(space, gym.spaces.Box):
            low = np.where(np.isfinite(space.low), space.low, -1.0)
            high = np.where(np.isfinite(space.high), space.high, 1.0)
            return self.rng.uniform(low, high, size=(n, *space.shape)).astype(space.dtype)
        return np.stack([space.sample() for _ in range(n)])

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Uniform over the legal actions (over all actions without a mask); Discrete spaces only.

        Example:
            >>> import gymnasium as gym, numpy as np
            >>> RandomAgent(gym.spaces.Discrete(3)).policy_probs(np.zeros((1, 2)), np.array([[1, 0, 1]], bool))
            array([[0.5, 0. , 0.5]])
        """
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise TypeError(f"policy_probs needs a Discrete action space, got {type(self.action_space).__name__}")
        n = obs_batch_size(obs)
        return masked_probs(np.ones((n, int(self.action_space.n))), mask)


# Protocols of the optional parts: adaptive batch

@runtime_checkable
class NoiseScaleMeter(Protocol):
    """What adaptive control reads from an agent's data (``agent.noise_scale``, a
    :class:`~marl_note.agents.noise_scale.NoiseScaleProbe` for the built-in agents): a gradient noise
    scale measured on two batches of its own data, folded into ``estimator``, with the seconds of the
    two passes; whether there is data to measure now and how many rows; the replay's signals.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
        >>> isinstance(agent.noise_scale, NoiseScaleMeter), agent.noise_scale.ready()
        (True, False)
    """

    estimator: Any  # a marl_note.agents.noise_scale.GradientNoiseScale
    seconds: tuple[int, float, int, float] | None

    def measure(self, b_small: int, b_big: int, rng: np.random.Generator | None = None) -> float | None: ...

    def ready(self) -> bool: ...

    def rows(self) -> int: ...

    def replay_signal(self) -> Any: ...  # a marl_note.agents.noise_scale.ReplaySignal


@runtime_checkable
class NoiseScaled(Protocol):
    """An agent whose gradient noise scale adaptive control can measure: ``noise_scale`` is its
    :class:`NoiseScaleMeter`.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), NoiseScaled)
        False
    """

    @property
    def noise_scale(self) -> NoiseScaleMeter: ...
