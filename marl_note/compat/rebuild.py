"""Rebuild a built-in agent in place from its recorded config plus changes, keeping what it learned.

The path :meth:`~marl_note.agents.checkpoints.saving.Saving.restore` takes to construct an agent from a
checkpoint's config, taken on a live agent: ``type(agent)(spaces, **{**agent.config, **changes})``,
then the old ``state_dict()`` (weights, optimiser slots, counters, generator, exploration state)
is loaded into the new object, the replay buffer is carried over when no replay option changed,
and the new object's attributes replace the old one's, so every reference to the agent sees it.

What a distributed run attached survives: a TF agent's ``strategy`` is a runtime constructor
argument (``unsaved_params``) handed to the new object, and the networks' ``grad_hook`` (a PyTorch
agent's gradient averaging over the ranks) moves to the new networks, so a rebuilt agent keeps
taking synchronous steps.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["REPLAY_OPTIONS", "rebuild", "replay_held"]

# constructor arguments a built-in agent's replay buffer (or rollout) is built from
REPLAY_OPTIONS = ("buffer_size", "prioritized", "alpha", "beta", "initial_td", "num_steps", "her", "compute_reward",
                  "replay", "augment")
_CARRIED = ("_feed", "replay", "rollout")  # the objects that hold an agent's stored transitions


def replay_held(agent: Any) -> int:
    """Transitions the agent's replay holds, stored or waiting in an unfinished episode."""
    replay = getattr(agent, "replay", None)
    held = len(replay) if replay is not None else 0
    return held + int(getattr(replay, "num_pending", 0) or 0)


def rebuild(agent: Any, changes: Mapping[str, Any], fresh_state: tuple[str, ...] = (),
            keep_state: bool = True) -> None:
    """Rebuild ``agent`` in place with the constructor arguments ``changes``.

    ``fresh_state``: prefixes of state keys taken from the new object instead of the old one
    (the state of a newly given exploration policy or noise process). ``keep_state=False`` keeps
    nothing learned (for a change of network shapes, allowed only before any training). Raises
    ValueError, leaving ``agent`` untouched, when a replay option changes while the replay holds
    transitions, and whatever the constructor raises for a bad value.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.compat.torch import DQN
        >>> agent = DQN(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
        >>> q = agent.q_values(np.ones((1, 3)))
        >>> rebuild(agent, {"buffer_size": 500})
        >>> agent.replay.capacity, agent.config["buffer_size"], bool((agent.q_values(np.ones((1, 3))) == q).all())
        (500, 500, True)
    """
    config = agent.config
    cls = type(agent)
    changed_replay = [k for k in REPLAY_OPTIONS if k in changes and not _same(changes[k], config.get(k))]
    held = replay_held(agent)
    if changed_replay and held:
        raise ValueError(f"changing {changed_replay} of {cls.__name__} would discard the {held} transitions its "
                         f"replay buffer holds; change replay options before training")
    spaces = {name: getattr(agent, name) for name in cls.saving_spaces}
    runtime = {name: getattr(agent, name) for name in getattr(cls, "unsaved_params", ()) if hasattr(agent, name)}
    fresh = cls(**spaces, **{**config, **runtime, **changes})
    _carry_grad_hook(agent, fresh)
    if keep_state:
        state = dict(agent.state_dict())
        if fresh_state:
            state.update({k: v for k, v in fresh.state_dict().items() if k.startswith(fresh_state)})
        fresh.load_state_dict(state)
        carried = ("rollout",) if changed_replay else _CARRIED
        for name in carried:
            if name in agent.__dict__ and name in fresh.__dict__:
                fresh.__dict__[name] = agent.__dict__[name]
    for name, value in agent.__dict__.items():  # attributes set after construction (agent.path, run options)
        fresh.__dict__.setdefault(name, value)
    agent.__dict__.clear()
    agent.__dict__.update(fresh.__dict__)
    for seat in agent.__dict__.get("_seats", ()):  # MADDPG's seat actors act through their learner
        seat.joint_learner = agent


def _carry_grad_hook(old: Any, new: Any) -> None:
    """Give ``new``'s networks the gradient hook ``old``'s had (set after construction, by the
    distributed run's ``prepare``; no constructor argument records it)."""
    hook = getattr(old.__dict__.get("nets"), "grad_hook", None)
    nets = new.__dict__.get("nets")
    if hook is not None and nets is not None and hasattr(nets, "grad_hook"):
        nets.grad_hook = hook


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # arrays and other objects without a plain truth value
        return False
