"""Option groups shared by the built-in agents' configs, and the ``config=`` handling of their constructors.

Each algorithm's config (``DQNConfig``, ``PPOConfig``, ...) is a frozen dataclass that extends the
groups here with its own fields: a group's fields are the config's own (``cfg.buffer_size``), and the
group checks them, written once, whenever a config is made or replaced. A default is written once:
in the group, or, where an algorithm differs, in that algorithm's config (which redeclares the field).

- :class:`NetworkOptions`: ``hidden_sizes``, ``activation`` (every built-in algorithm);
  :class:`TorsoOptions` adds ``torso``, ``conv_layers`` (DQN, PPO, DDPG, SAC, AlphaZero).
- :class:`BufferOptions`: ``buffer_size`` (DQN, DDPG, SAC, MADDPG, AlphaZero, RL).
- :class:`PriorityOptions`: ``prioritized``, ``alpha``, ``beta``, ``initial_td`` (DQN, DDPG, SAC, PPO, RL);
  :class:`ReplayOptions` is both with ``num_steps`` (DQN, DDPG, SAC, RL), and :class:`FeedOptions`
  adds ``her``, ``compute_reward``, ``replay``, ``augment`` (DQN, DDPG, SAC).
- :class:`ScheduleOptions`: ``learning_starts``, ``replay_ratio``, ``update_steps`` (DQN, DDPG, SAC,
  MADDPG, AlphaZero); :class:`UpdateCountOptions` adds ``update_count`` (DQN, DDPG, SAC).

A constructor takes ``config=`` (an instance of the algorithm's config) and keyword overrides of its
fields, then the runtime options (``seed``, ``device``, ``compile``, ``numpy_acting``)::

    DQN(obs_space, act_space, config=DQNConfig(lr=1e-3), gamma=0.95)   # lr from the config, gamma given
    DQN(obs_space, act_space, lr=1e-3, gamma=0.95)                     # the same agent

:func:`resolve_config` turns ``config`` and the overrides into the checked config (an unknown name is
a TypeError naming the close matches); :func:`config_signature` gives the constructor the signature
that lists every field, so ``inspect.signature(DQN)``, ``help(DQN)``, checkpoints and the command line
see the options by name.

The original library's capitalised names (:data:`RENAMED`: ``PR``, ``initial_TD``, ``MARL``) keep
working for one release with a DeprecationWarning naming the new one; a checkpoint whose recorded
config holds them restores silently (``restore`` maps them).

Example:
    >>> @dataclasses.dataclass(frozen=True)
    ... class ExampleConfig(ReplayOptions):
    ...     gamma: float = 0.99
    >>> cfg = resolve_config(ExampleConfig, ExampleConfig(buffer_size=50), {"num_steps": 3}, "Example")
    >>> cfg.buffer_size, cfg.num_steps, cfg.prioritized
    (50, 3, False)
    >>> resolve_config(ExampleConfig, None, {"buffer_sise": 5}, "Example")
    Traceback (most recent call last):
    ...
    TypeError: Example got an unexpected keyword argument 'buffer_sise' (did you mean 'buffer_size'?)
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import FrameType, MappingProxyType
from typing import Any, TypeVar

import numpy as np

from marl_note.agents.encoders import TORSOS, check_conv_layers, torso_factory
from marl_note.agents.networks import ACTIVATIONS, check_hidden_sizes
from marl_note.agents.schedule import check_update_count
from marl_note.replay.feed import ReplayFeed, check_num_steps, check_prioritized_options
from marl_note.validation import check_callable, non_negative_float, non_negative_int, optional, positive_int

__all__ = ["RENAMED", "Options", "NetworkOptions", "TorsoOptions", "BufferOptions", "PriorityOptions",
           "ReplayOptions", "FeedOptions", "ScheduleOptions", "UpdateCountOptions", "resolve_config",
           "config_signature", "rename_deprecated"]

#: The original library's capitalised constructor names and their new names: the one alias table.
RENAMED: Mapping[str, str] = MappingProxyType({"PR": "prioritized", "initial_TD": "initial_td",
                                               "MARL": "centralized_critic"})

C = TypeVar("C", bound="Options")


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside marl_note, for a warning raised in the caller."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "marl_note":
        frame, level = frame.f_back, level + 1
    return level


def _warn_renamed(old: str, who: str) -> None:
    warnings.warn(f"{who}: {old} is deprecated, use {RENAMED[old]} ({old} is the original library's name; it goes "
                  f"away in the next release)", DeprecationWarning, stacklevel=_user_stacklevel())


@dataclasses.dataclass(frozen=True)
class Options:
    """Base of the option groups and configs: ``__post_init__`` runs every class's own ``_check``,
    the groups' first (base classes before the classes that extend them)."""

    def __post_init__(self) -> None:
        for klass in reversed(type(self).__mro__):
            check = klass.__dict__.get("_check")
            if check is not None:
                check(self)

    def _put(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


@dataclasses.dataclass(frozen=True)
class NetworkOptions(Options):
    """The MLP: ``hidden_sizes`` (the units of each hidden layer) and its ``activation``."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "relu"

    def _check(self) -> None:
        self._put("hidden_sizes", check_hidden_sizes(self.hidden_sizes))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}: activation must be one of {list(ACTIVATIONS)}")


@dataclasses.dataclass(frozen=True)
class TorsoOptions(NetworkOptions):
    """What reads the observations before the MLP: ``torso`` ``"auto"`` (a conv torso for images),
    ``"mlp"`` or ``"conv"``, and the conv torso's ``conv_layers`` ``((channels, kernel, stride,
    padding), ...)`` (None: the default layers). A config with ``user_torso = True`` (DQN) also takes
    a user-supplied torso: a function or its ``"module:qualname"`` import path."""

    user_torso = False  # a class attribute, not a field: whether torso may be a user's factory
    torso: Any = "auto"
    conv_layers: Any = None

    def _check(self) -> None:
        if self.user_torso:
            torso_factory(self.torso)  # a ValueError for a torso a checkpoint could not import again
        elif not isinstance(self.torso, str) or self.torso not in TORSOS:
            raise ValueError(f"torso must be one of {list(TORSOS)} (a user-supplied torso is for DQN), "
                             f"got {self.torso!r}")
        self._put("conv_layers", None if self.conv_layers is None else check_conv_layers(self.conv_layers))


@dataclasses.dataclass(frozen=True)
class BufferOptions(Options):
    """``buffer_size``: the items the agent's replay holds (oldest dropped first)."""

    buffer_size: int = 100_000

    def _check(self) -> None:
        self._put("buffer_size", positive_int("buffer_size", self.buffer_size, "items the replay holds"))


@dataclasses.dataclass(frozen=True)
class PriorityOptions(Options):
    """Prioritized sampling: ``prioritized=True``, the exponent ``alpha`` (0 uniform, 1 proportional
    to ``|TD|``), the importance-weight exponent ``beta`` (annealed to 1) and ``initial_td``, the
    ``|TD|`` new items start with (the original library's ``PR`` and ``initial_TD``)."""

    prioritized: bool = False
    alpha: float = 0.6
    beta: float = 0.4
    initial_td: float = 1.0

    def _check(self) -> None:
        if not isinstance(self.prioritized, (bool, np.bool_)):
            raise TypeError(f"prioritized must be True or False, got {self.prioritized!r}")
        self._put("prioritized", bool(self.prioritized))
        alpha, beta, initial_td = check_prioritized_options(self.alpha, self.beta, self.initial_td, "initial_td")
        self._put("alpha", alpha)
        self._put("beta", beta)
        self._put("initial_td", initial_td)

    @property
    def PR(self) -> bool:  # the original library's name, deprecated
        _warn_renamed("PR", type(self).__name__)
        return self.prioritized

    @property
    def initial_TD(self) -> float:  # the original library's name, deprecated
        _warn_renamed("initial_TD", type(self).__name__)
        return self.initial_td


@dataclasses.dataclass(frozen=True)
class ReplayOptions(PriorityOptions, BufferOptions):
    """A transition replay: its size, prioritized sampling and ``num_steps`` (n-step returns)."""

    num_steps: int = 1

    def _check(self) -> None:
        self._put("num_steps", check_num_steps(self.num_steps))

    def _feed_options(self) -> dict[str, Any]:
        return {}

    def replay_feed(self, observation_space: Any, action_space: Any, gamma: float, seed: int | None) -> ReplayFeed:
        """The :class:`~marl_note.replay.feed.ReplayFeed` these options describe."""
        return ReplayFeed(observation_space, action_space, buffer_size=self.buffer_size, gamma=gamma,
                          PR=self.prioritized, alpha=self.alpha, beta=self.beta, initial_TD=self.initial_td,
                          num_steps=self.num_steps, seed=seed, **self._feed_options())


@dataclasses.dataclass(frozen=True)
class FeedOptions(ReplayOptions):
    """Hindsight replay for goal envs (``her=dict(strategy="future", k=4)`` with
    ``compute_reward=env.compute_reward``), a buffer of your own (``replay=``) and ``augment=fn``
    (also stores ``fn(transitions)``, a batch or a list of batches, next to every stored batch)."""

    her: Any = None
    compute_reward: Callable | None = None
    replay: Any = None
    augment: Callable | None = None

    def _check(self) -> None:
        check_callable("compute_reward", self.compute_reward, "compute_reward(achieved_goal, desired_goal, info)")
        check_callable("augment", self.augment, "transitions -> transitions (or a list of them)")

    def _feed_options(self) -> dict[str, Any]:
        return {"her": self.her, "compute_reward": self.compute_reward, "replay": self.replay,
                "augment": self.augment}


@dataclasses.dataclass(frozen=True)
class ScheduleOptions(Options):
    """The update schedule (:mod:`~marl_note.agents.schedule`): no gradient step before
    ``learning_starts`` items are stored, then ``update_steps`` per ``update()`` call or, when that
    is None, ``max(1, round(replay_ratio * new items))``."""

    learning_starts: int = 1000
    replay_ratio: float = 1.0
    update_steps: int | None = None

    def _check(self) -> None:
        self._put("learning_starts", non_negative_int("learning_starts", self.learning_starts,
                                                      "items stored before the first gradient step"))
        self._put("replay_ratio", non_negative_float("replay_ratio", self.replay_ratio,
                                                     "gradient steps per new item"))
        self._put("update_steps", optional(non_negative_int, "update_steps", self.update_steps,
                                           "gradient steps per update() call"))


@dataclasses.dataclass(frozen=True)
class UpdateCountOptions(ScheduleOptions):
    """``update_count``: what ``replay_ratio`` multiplies, ``"env_steps"`` or ``"transitions"``."""

    update_count: str = "env_steps"

    def _check(self) -> None:
        self._put("update_count", check_update_count(self.update_count))


# --------------------------------------------------------------------------- constructors

def _close_matches(name: str, names: Iterable[str]) -> str:
    found = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(n) for n in found)}?)" if found else ""


def rename_deprecated(kwargs: Mapping[str, Any], fields: Iterable[str], who: str) -> dict[str, Any]:
    """``kwargs`` with the capitalised names of :data:`RENAMED` that ``fields`` has a new name for
    replaced by it, one DeprecationWarning each; a TypeError when both names are given."""
    fields = set(fields)
    out = dict(kwargs)
    for old, new in RENAMED.items():
        if old in out and new in fields:
            if new in out:
                raise TypeError(f"{who}: give {new} or its old name {old}, not both")
            _warn_renamed(old, who)
            out[new] = out.pop(old)
    return out


def resolve_config(config_class: type[C], config: C | None, overrides: Mapping[str, Any], who: str,
                   runtime: Iterable[str] = ()) -> C:
    """The checked config: ``config`` (default: ``config_class()``) with ``overrides`` replacing its fields.

    ``overrides`` may use the deprecated names of :data:`RENAMED` (a DeprecationWarning each); an
    unknown name is a TypeError naming the close matches among the fields and ``runtime`` (the
    constructor's other arguments); a ``config`` of another class is a TypeError.
    """
    if config is not None and not isinstance(config, config_class):
        raise TypeError(f"{who} takes config={config_class.__name__}(...), got {type(config).__name__}")
    fields = config_class.field_names()
    changes = rename_deprecated(overrides, fields, who)
    unknown = [k for k in changes if k not in fields]
    if unknown:
        name = unknown[0]
        raise TypeError(f"{who} got an unexpected keyword argument {name!r}"
                        f"{_close_matches(name, [*fields, *runtime, *RENAMED])}")
    if config is None:
        return config_class(**changes)
    return dataclasses.replace(config, **changes) if changes else config


def config_signature(init: Callable, config_class: type[Options]) -> inspect.Signature:
    """``init``'s signature with a keyword-only parameter per field of ``config_class`` (its default
    the field's) after ``config``, and without ``init``'s ``**overrides`` (a ``**`` parameter of
    another name stays: the RL base class takes its backend's options there)."""
    signature = inspect.signature(init)
    params = list(signature.parameters.values())
    names = {p.name for p in params}
    at = next(i for i, p in enumerate(params) if p.name == "config") + 1
    fields = []
    for f in dataclasses.fields(config_class):
        if f.name in names:
            raise TypeError(f"{config_class.__name__}.{f.name} clashes with a constructor argument of that name")
        fields.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                        annotation=f.type))
    rest = [p for p in params[at:] if not (p.kind is inspect.Parameter.VAR_KEYWORD and p.name == "overrides")]
    return signature.replace(parameters=[*params[:at], *fields, *rest])
