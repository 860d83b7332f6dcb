"""The agent contract (numpy in, numpy out) and the simplest agent.

Acting contract, enough for scripted opponents::

    act(obs, mask=None, explore=False) -> actions      # batched over the leading axis

An agent that keeps per-env state (MADDPG's exploration noise) sets ``accepts_env_ids = True``; the
collector then also passes ``env_ids=`` (the env index of each row).

Learning agents add::

    observe(transitions)           # store a batch of this agent's Transitions
    update(batch_size) -> dict     # metrics; must include "gradient_steps" (int)
    state_dict() / load_state_dict(state)   # numpy arrays only
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from marl_note.types import JointTransitions, Transitions, obs_batch_size


@runtime_checkable
class Agent(Protocol):
    """What every seat needs: an action space and batched ``act``.

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
class LearningAgent(Agent, Protocol):
    """A seat that learns: ``observe`` transitions, ``update``, numpy state.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), LearningAgent)
        False
    """

    observation_space: gym.Space

    def observe(self, transitions: Transitions) -> None: ...

    def update(self, batch_size: int) -> dict[str, Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


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
class JointLearner(Protocol):
    """A centralised learner (MADDPG) behind seat actors whose ``joint_learner`` it is.

    It learns from joint per-step data of every seat (``observe_joint``) instead of per-seat
    transitions.

    Example:
        >>> import gymnasium as gym
        >>> isinstance(RandomAgent(gym.spaces.Discrete(2)), JointLearner)
        False
    """

    def observe_joint(self, joint: JointTransitions) -> None: ...

    def update(self, batch_size: int) -> dict[str, Any]: ...


def is_learning_agent(agent: Any) -> bool:
    return all(callable(getattr(agent, name, None)) for name in ("act", "observe", "update"))


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


@runtime_checkable
class Tunable(Protocol):
    """Settings that may change during a run: the optimisers' learning rates and named hyperparameters
    (what ``trainer.request(learning_rate=..., hyperparameters=...)`` changes between update rounds).

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
