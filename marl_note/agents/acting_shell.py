"""What an actor process acts with: a framework-free shell of a built-in agent, refreshed from a board.

The implementation of :class:`~marl_note.agents.base.RemoteActing` for
:class:`~marl_note.agents.core.AgentCore` (its ``acting_shell``, ``acting_state`` and
``load_acting_state`` call these functions); it reads the agent's own attributes, which only
``marl_note.agents`` may do. The actor pool calls the Protocol's methods.

A built-in agent acts in numpy through its :class:`~marl_note.agents.numpy_policy.NumpyPolicy`.
:func:`acting_shell` copies what acting needs (spaces, config, encoder, exploration policy, the
numpy copy) into an instance of the agent's numpy core class (``DQNCore``, ``DDPGCore``, ...),
without its framework networks or replay buffer, so it unpickles in a process that never imports
torch or TensorFlow. :func:`acting_state` is what the learner publishes for it (the numpy
weights, ``agent_steps``, the replay size and the exploration schedule's state),
:func:`load_acting_state` what the actor applies.

An agent without a numpy copy (a user ``RL`` subclass, or one built with ``numpy_acting=False``)
falls back to acting in its framework: its shell is a copy of the agent itself without its replay
(the actor imports the framework when it unpickles it), its published weights are its networks'
arrays (``nets.numpy_weights``), loaded into the shell's networks (not its optimisers).

Example:
    >>> import gymnasium as gym, numpy as np, pickle
    >>> from marl_note.agents.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
    >>> shell = pickle.loads(pickle.dumps(agent.remote.shell()))
    >>> type(shell).__name__
    'DQNCore'
    >>> shell.remote.load(agent.remote.state(), version=0)
    >>> bool((shell.act(np.ones((4, 3))) == agent.act(np.ones((4, 3)))).all())
    True
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents.registry import core_of, is_on_policy

__all__ = ["acting_shell", "acting_state", "load_acting_state", "refusal"]

_DROPPED = ("nets", "replay", "_feed", "noise_scale", "_noise_scale", "rollout")


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


def _core_class(agent: Any, root: type) -> type | None:
    """The numpy core class a registered algorithm's own backend class names (None for a user subclass: its
    overrides would be lost in a core-class shell; :func:`~marl_note.agents.registry.core_of`)."""
    core = core_of(agent)
    return core if core is not None and issubclass(core, root) else None


def _in_framework(agent: Any, root: type) -> bool:
    """Whether ``agent`` acts in an actor through its framework (it has no numpy acting copy)."""
    return _core_class(agent, root) is None or agent.numpy_policy() is None


def refusal(agent: Any) -> str | None:
    """Why ``agent`` (an ``AgentCore``) cannot act in an actor process (None: it can)."""
    name = type(agent).__name__
    if not callable(getattr(getattr(agent, "nets", None), "numpy_weights", None)):
        return (f"{name} is not a marl_note agent (AgentCore with networks behind the numpy seam); the pool "
                f"trainer's actors act only with those (train it with actors=None)")
    if hasattr(agent, "observe_joint"):
        return f"{name} learns from joint per-step data (MADDPG), which the pool trainer does not support yet"
    feed = getattr(agent, "_feed", None)
    if feed is not None and getattr(feed, "goal", False):
        return f"{name} has goal-dict observations (HER/goal envs), which the pool trainer does not support yet"
    if feed is None and not is_on_policy(agent, default=False):
        return f"{name} is neither a replay agent nor on-policy; the pool trainer trains DQN, DDPG, SAC and PPO"
    return None


def acting_shell(agent: Any, root: type) -> Any:
    """A picklable copy of ``agent`` that acts (weights loaded by :func:`load_acting_state`): framework-free
    for an agent with a numpy copy, else the agent's own class with its networks (module docstring).
    ``root``: the class whose subclasses are numpy cores (``AgentCore``)."""
    reason = refusal(agent)
    if reason is not None:
        raise TypeError(reason)
    framework = _in_framework(agent, root)
    cls = type(agent) if framework else _core_class(agent, root)
    assert cls is not None
    shell: Any = object.__new__(cls)
    shell.__dict__.update({k: v for k, v in agent.__dict__.items() if k not in _DROPPED and k != "batch"})
    if framework:  # its networks travel with it; acting_state sends their weights
        shell.nets = agent.nets
    else:
        shell.__dict__["_numpy_policy"] = copy.deepcopy(agent.numpy_policy())
        shell.nets = _PublishedNets()
    if "replay" in agent.__dict__ or "_feed" in agent.__dict__:  # exploration may read the replay's size
        size = _Size()
        shell.__dict__["replay"] = size
        feed = agent.__dict__.get("_feed")
        if feed is not None:
            feed = copy.copy(feed)
            feed.replay, feed.nstep, feed.augment = size, None, None
        shell.__dict__["_feed"] = feed
    shell.rng = np.random.default_rng(agent.rng.integers(0, 2**63 - 1))
    return shell


def _network_weights(agent: Any, root: type) -> dict[str, np.ndarray]:
    if _in_framework(agent, root):
        return agent.nets.numpy_weights(agent.nets.weight_names)
    policy = agent.numpy_policy()
    assert policy is not None
    return dict(policy.weights)


def acting_state(agent: Any, root: type) -> dict[str, np.ndarray]:
    """What an actor needs to act as ``agent`` does now: numpy weights, counters, exploration state."""
    out = {f"w.{k}": v for k, v in _network_weights(agent, root).items()}
    out["agent_steps"] = np.asarray(agent.agent_steps, np.int64)
    feed = getattr(agent, "_feed", None)
    out["replay_size"] = np.asarray(len(feed if feed is not None else getattr(agent, "replay", ())), np.int64)
    explorer: Any = getattr(agent, "policy", None)
    if hasattr(explorer, "state_dict"):
        out.update({f"policy.{k}": np.asarray(v) for k, v in explorer.state_dict().items()})
    return out


def load_acting_state(shell: Any, state: Mapping[str, np.ndarray], version: int) -> None:
    """Apply a published :func:`acting_state` to ``shell`` as weights ``version``."""
    weights = {k[2:]: v for k, v in state.items() if k.startswith("w.")}
    if isinstance(shell.nets, _PublishedNets):
        shell.nets.version = int(version)
        shell._numpy_policy.load(weights, int(version))
    else:  # a framework shell: the networks' weights, not its optimisers
        optimizers, shell.nets.optimizers = shell.nets.optimizers, {}
        try:
            shell.nets.load_state_dict(weights)
        finally:
            shell.nets.optimizers = optimizers
    shell.agent_steps = int(state["agent_steps"])
    if isinstance(shell.__dict__.get("replay"), _Size):
        shell.replay.size = int(state["replay_size"])
    explorer: Any = getattr(shell, "policy", None)
    keys = {k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")}
    if keys and hasattr(explorer, "load_state_dict"):
        explorer.load_state_dict(keys)
