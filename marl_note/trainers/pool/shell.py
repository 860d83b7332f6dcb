"""What an actor process acts with: a framework-free shell of a built-in agent, refreshed from a board.

A built-in agent (:class:`~marl_note.agents.core.AgentCore`) acts in numpy through its
:class:`~marl_note.agents.numpy_policy.NumpyPolicy`. :func:`acting_shell` copies what acting needs
(spaces, config, encoder, exploration policy, the numpy copy) into an instance of the agent's numpy
core class (``DQNCore``, ``DDPGCore``, ...), without its framework networks or replay buffer, so it
unpickles in a process that never imports torch or TensorFlow. :func:`acting_state` is what the
learner publishes for it (the numpy weights, ``agent_steps``, the replay size and the exploration
schedule's state), :func:`load_acting_state` what the actor applies.

Example:
    >>> import gymnasium as gym, numpy as np, pickle
    >>> from marl_note.agents.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
    >>> shell = pickle.loads(pickle.dumps(acting_shell(agent)))
    >>> type(shell).__name__
    'DQNCore'
    >>> load_acting_state(shell, acting_state(agent), version=0)
    >>> bool((shell.act(np.ones((4, 3))) == agent.act(np.ones((4, 3)))).all())
    True
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from marl_note.agents.core import AgentCore

__all__ = ["acting_shell", "acting_state", "load_acting_state", "on_policy", "shell_refusal"]

_FRAMEWORK_MODULES = ("marl_note.agents.torch", "marl_note.agents.tf")
_DROPPED = ("nets", "replay", "_feed", "noise_scale", "rollout")


def on_policy(agent: Any) -> bool:
    """Whether ``agent`` learns only from data collected with its current weights (PPO)."""
    from marl_note.agents.ppo import PPOCore

    return isinstance(agent, PPOCore)


class _PublishedNets:
    """Stands for the framework networks in a shell: only the version of the published weights."""

    def __init__(self) -> None:
        self.version = -1

    def numpy_weights(self, prefixes: Any) -> dict[str, np.ndarray]:
        raise RuntimeError("an acting shell has no networks: its weights come from the learner's board")


class _Size:
    """Stands for the replay buffer in a shell: ``len()`` is the learner's published replay size."""

    def __init__(self) -> None:
        self.size = 0

    def __len__(self) -> int:
        return self.size


def _core_class(agent: Any) -> type | None:
    """The numpy core class of a built-in backend agent (its first base outside the backends)."""
    cls = type(agent)
    if not cls.__module__.startswith(_FRAMEWORK_MODULES):
        return None  # a user subclass: its overrides would be lost in a core-class shell
    for base in cls.__mro__[1:]:
        if issubclass(base, AgentCore) and not base.__module__.startswith(_FRAMEWORK_MODULES):
            return base
    return None


def shell_refusal(agent: Any) -> str | None:
    """Why ``agent`` cannot act in an actor process (None: it can)."""
    name = type(agent).__name__
    if not isinstance(agent, AgentCore) or _core_class(agent) is None:
        return (f"{name} is not a built-in marl_note agent with a numpy acting copy; the pool trainer's actors "
                f"act only through such copies (train it with actors=None)")
    if agent.numpy_policy() is None:
        return f"{name} was built with numpy_acting=False; build it with numpy_acting=True to train with actors"
    if getattr(agent, "joint_learner", None) is not None or hasattr(agent, "observe_joint"):
        return f"{name} learns from joint per-step data (MADDPG), which the pool trainer does not support yet"
    feed = getattr(agent, "_feed", None)
    if feed is not None and getattr(feed, "goal", False):
        return f"{name} has goal-dict observations (HER/goal envs), which the pool trainer does not support yet"
    if feed is None and not on_policy(agent):
        return f"{name} is neither a replay agent nor PPO; the pool trainer trains DQN, DDPG, SAC and PPO"
    return None


def acting_shell(agent: AgentCore) -> Any:
    """A picklable, framework-free copy of ``agent`` that acts (weights loaded by :func:`load_acting_state`)."""
    reason = shell_refusal(agent)
    if reason is not None:
        raise TypeError(reason)
    core = _core_class(agent)
    assert core is not None
    shell: Any = object.__new__(core)
    shell.__dict__.update({k: v for k, v in agent.__dict__.items() if k not in _DROPPED})
    shell.__dict__["_numpy_policy"] = copy.deepcopy(agent.numpy_policy())
    shell.nets = _PublishedNets()
    if "_feed" in agent.__dict__:  # a replay agent: exploration schedules may read the replay's size
        size = _Size()
        feed = copy.copy(agent.__dict__["_feed"])
        feed.replay, feed.nstep, feed.augment = size, None, None
        shell.__dict__["_feed"] = feed
        shell.__dict__["replay"] = size
    shell.rng = np.random.default_rng(agent.rng.integers(0, 2**63 - 1))
    return shell


def acting_state(agent: AgentCore) -> dict[str, np.ndarray]:
    """What an actor needs to act as ``agent`` does now: numpy weights, counters, exploration state."""
    policy = agent.numpy_policy()
    assert policy is not None
    out = {f"w.{k}": v for k, v in policy.weights.items()}
    out["agent_steps"] = np.asarray(agent.agent_steps, np.int64)
    out["replay_size"] = np.asarray(len(getattr(agent, "_feed", ())), np.int64)
    explorer: Any = getattr(agent, "policy", None)
    if hasattr(explorer, "state_dict"):
        out.update({f"policy.{k}": np.asarray(v) for k, v in explorer.state_dict().items()})
    return out


def load_acting_state(shell: Any, state: dict[str, np.ndarray], version: int) -> None:
    """Apply a published :func:`acting_state` to ``shell`` as weights ``version``."""
    shell.nets.version = int(version)
    shell._numpy_policy.load({k[2:]: v for k, v in state.items() if k.startswith("w.")}, int(version))
    shell.agent_steps = int(state["agent_steps"])
    if "_feed" in shell.__dict__:
        shell._feed.replay.size = int(state["replay_size"])
    explorer: Any = getattr(shell, "policy", None)
    keys = {k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")}
    if keys and hasattr(explorer, "load_state_dict"):
        explorer.load_state_dict(keys)
