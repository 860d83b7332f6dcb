"""Constructor-config capture and its JSON encoding, for :mod:`marl_note.agents.checkpoints.saving`.

:func:`capturing_init` wraps an agent's ``__init__`` so the outermost call records its keyword
arguments (defaults applied, spaces left out: they are stored separately in the manifest; a class
names its space arguments in ``saving_spaces``, default :data:`SPACE_PARAMS`; arguments named in
``unsaved_params``, such as a TF agent's ``strategy``, are not recorded; a ``config=`` instance of
the class's ``config_class`` is recorded as its fields, and the deprecated names of ``renamed_params``
as their new names).
:func:`encode_config` / :func:`decode_config` turn such a config into JSON values and back: JSON
values as they are; tuples, dicts, numpy arrays/scalars and Gymnasium spaces with a ``$`` tag;
exploration policies, noise processes and replay buffers of this library as
``{"$object": class name, "kwargs": ...}``. Anything else is refused with a TypeError naming the
argument; decoding raises :class:`~marl_note.agents.checkpoints.format.CheckpointError` for anything
:func:`encode_config` did not write and never imports or executes code named in the config.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.checkpoints.format import CheckpointError, space_from_json, space_to_json

__all__ = ["capturing_init", "encode_config", "decode_config", "SPACE_PARAMS", "Unrecorded"]

SPACE_PARAMS = ("observation_space", "action_space")  # constructor arguments recorded outside the config


# --------------------------------------------------------------------------- config capture

def capturing_init(init):
    """``init`` wrapped to record the outermost call's arguments as ``self._saving_config``, then run
    ``self._after_init()`` if the class defines it."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if "_saving_config" in self.__dict__:  # an inner super().__init__ call: the outer one is recorded
            return init(self, *args, **kwargs)
        renamed = {old: new for old, new in getattr(type(self), "renamed_params", {}).items()
                   if old not in signature.parameters}  # deprecated names, recorded as the new ones
        named = {renamed.get(k, k): v for k, v in kwargs.items()}
        try:
            bound = signature.bind(self, *args, **named)
        except TypeError:
            return init(self, *args, **kwargs)  # let the constructor raise its own TypeError
        given = set(bound.arguments) | set(named)
        bound.apply_defaults()
        config: dict[str, Any] = {}
        extra_positional = ()
        space_params = getattr(type(self), "saving_spaces", SPACE_PARAMS)
        unsaved = getattr(type(self), "unsaved_params", ())  # runtime options (a tf.distribute strategy)
        for name, value in list(bound.arguments.items())[1:]:
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                config.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                extra_positional = tuple(value)
            elif name not in space_params:
                config[name] = value
        for name in unsaved:
            config.pop(name, None)
        _expand_config(config, getattr(type(self), "config_class", None), given)
        self.__dict__["_saving_config"] = config
        self.__dict__["_saving_varargs"] = extra_positional
        init(self, *args, **kwargs)
        after = getattr(self, "_after_init", None)
        if callable(after):
            after()

    __init__._saving_wrapped = True  # type: ignore[attr-defined]
    return __init__


def _expand_config(config: dict[str, Any], config_class: type | None, given: set[str]) -> None:
    """A ``config=`` argument (an instance of the class's ``config_class``, or None) recorded as its
    fields; an argument given by name next to it wins."""
    if config_class is None or "config" not in config:
        return
    value = config["config"]
    if value is not None and not (isinstance(value, config_class) and dataclasses.is_dataclass(value)):
        return  # some other argument named config
    del config["config"]
    if value is not None:
        config.update({f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.name not in given})


def _policy_kwargs(p) -> dict[str, Any]:
    from marl_note.agents.exploration import policies as P

    def sched(s, start, end):
        return {start: s.start, end: s.end, "n_steps_annealing": s.n_steps}

    if type(p) in (P.GreedyQPolicy, P.SoftmaxPolicy):
        return {}
    if type(p) is P.EpsGreedyQPolicy:
        return sched(p.schedule, "eps", "eps_min")
    if type(p) is P.BoltzmannQPolicy:
        return {**sched(p.schedule, "tau", "tau_min"), "clip": tuple(p.clip)}
    if type(p) is P.MaxBoltzmannQPolicy:
        return {**sched(p.eps_schedule, "eps", "eps_min"), **sched(p.tau_schedule, "tau", "tau_min"),
                "clip": tuple(p.clip)}
    if type(p) is P.BoltzmannGumbelQPolicy:
        return {"C": p.C}
    if type(p) is P.GumbelSoftmaxPolicy:
        return sched(p.schedule, "temperature", "temperature_min")
    raise KeyError


def _noise_kwargs(p) -> dict[str, Any]:
    from marl_note.agents.exploration import noise as N

    base = {"mu": p.mu, "sigma": p.schedule.start, "sigma_min": p.schedule.end,
            "n_steps_annealing": p.schedule.n_steps, "size": tuple(p.size)}
    if type(p) is N.GaussianWhiteNoiseProcess:
        return base
    if type(p) is N.OrnsteinUhlenbeckProcess:
        return {**base, "theta": p.theta, "dt": p.dt, "x0": p.x0}
    raise KeyError


def _replay_kwargs(r) -> dict[str, Any]:
    from marl_note.replay import PrioritizedReplayBuffer, ReplayBuffer

    base = {"capacity": r.capacity, "observation_space": r.observation_space, "action_space": r.action_space}
    if type(r) is ReplayBuffer:
        return base
    if type(r) is PrioritizedReplayBuffer:
        return {**base, "alpha": r.alpha, "beta": r.beta_initial, "beta_final": r.beta_final,
                "beta_annealing_steps": r.beta_annealing_steps, "eps": r.eps}
    raise KeyError


def _recordable_classes() -> dict[str, tuple[type, Any]]:
    from marl_note.agents.exploration import noise as N
    from marl_note.agents.exploration import policies as P
    from marl_note.replay import PrioritizedReplayBuffer, ReplayBuffer

    table: dict[str, tuple[type, Any]] = {c.__name__: (c, _policy_kwargs) for c in (
        P.GreedyQPolicy, P.SoftmaxPolicy, P.EpsGreedyQPolicy, P.BoltzmannQPolicy, P.MaxBoltzmannQPolicy,
        P.BoltzmannGumbelQPolicy, P.GumbelSoftmaxPolicy)}
    table.update({c.__name__: (c, _noise_kwargs) for c in (N.GaussianWhiteNoiseProcess, N.OrnsteinUhlenbeckProcess)})
    table.update({c.__name__: (c, _replay_kwargs) for c in (ReplayBuffer, PrioritizedReplayBuffer)})
    return table


_RUNTIME_ATTRS = {"steps", "n_steps", "rng", "_rng", "x_prev", "action_counts", "_storage", "_tree",
                  "_max_priority", "_sample_calls", "_buffer"}


def _describe(obj: Any, top: bool = True) -> Any:
    """Configuration attributes of a policy/noise/replay object, for checking a recorded recipe."""
    if isinstance(obj, np.ndarray):
        return ("array", obj.dtype.str, obj.shape, obj.tolist())
    if isinstance(obj, (list, tuple)):
        return [_describe(v, False) for v in obj]
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, gym.Space)):
        return (type(obj).__name__, {k: _describe(v, False) for k, v in sorted(vars(obj).items())
                                     if not (top and k in _RUNTIME_ATTRS)})
    return obj


class Unrecorded:
    """Stands in, after decoding, for a function argument that a checkpoint records by name only.

    Example:
        >>> decode_config(encode_config({"augment": len}))["augment"]
        Unrecorded('builtins.len')
    """

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Unrecorded({self.name!r})"


def encode_config(config: Mapping[str, Any], owner: str = "agent") -> dict[str, Any]:
    """Constructor arguments as JSON-able values; TypeError naming an argument that cannot be recorded.

    Example:
        >>> from marl_note.agents.exploration.policies import EpsGreedyQPolicy
        >>> encode_config({"hidden_sizes": (64, 64), "policy": EpsGreedyQPolicy(0.5)})["policy"]["$object"]
        'EpsGreedyQPolicy'
        >>> decode_config(encode_config({"hidden_sizes": (64, 64)}))
        {'hidden_sizes': (64, 64)}
    """
    return {str(k): _encode(v, f"{owner}({k}=...)") for k, v in config.items()}


def _encode(v: Any, where: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple):
        return {"$tuple": [_encode(x, where) for x in v]}
    if isinstance(v, list):
        return [_encode(x, where) for x in v]
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise TypeError(f"{where}: dict keys must be strings to be recorded in a checkpoint")
        return {"$dict": {k: _encode(x, where) for k, x in v.items()}}
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in "biuf":
            raise TypeError(f"{where}: only numeric arrays can be recorded, got dtype {v.dtype}")
        return {"$array": v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, gym.Space):
        return {"$space": space_to_json(v)}
    if type(v).__name__ == "device" and type(v).__module__ == "torch":
        return str(v)
    table = _recordable_classes()
    entry = table.get(type(v).__name__)
    if entry is not None and entry[0] is type(v):
        kwargs = entry[1](v)
        rebuilt = type(v)(**kwargs)
        if _describe(rebuilt) != _describe(v):
            raise TypeError(f"{where}: this {type(v).__name__} cannot be reproduced from its recorded "
                            f"arguments {sorted(kwargs)}; build it inside __init__ or pass it to restore()")
        return {"$object": type(v).__name__, "kwargs": {k: _encode(x, where) for k, x in kwargs.items()}}
    if inspect.isfunction(v) or inspect.isbuiltin(v) or inspect.ismethod(v) or isinstance(v, functools.partial):
        # a function (compute_reward, augment, ...) is recorded by name only: code is never stored or
        # loaded, so restore() must be given it again (see Unrecorded)
        fn = v.func if isinstance(v, functools.partial) else v
        return {"$callable": f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"}
    raise TypeError(f"{where}: a {type(v).__module__}.{type(v).__qualname__} cannot be recorded in a "
                    f"checkpoint manifest (recorded: JSON values, tuples, numpy arrays, spaces, and the "
                    f"policies, noise processes and replay buffers of marl_note). Build it inside __init__ "
                    f"from plain arguments, pass it again as restore(path, {where.split('(')[-1].split('=')[0]}=...), "
                    f"or save only the weights with save_param()")


def decode_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`encode_config`; CheckpointError for anything it did not write."""
    return {k: _decode(v, k) for k, v in config.items()}


def _decode(v: Any, where: str) -> Any:
    if isinstance(v, list):
        return [_decode(x, where) for x in v]
    if not isinstance(v, dict):
        return v
    tags = [k for k in v if k.startswith("$")]
    if len(tags) != 1:
        raise CheckpointError(f"config {where!r}: unexpected value {str(v)[:80]}")
    tag = tags[0]
    try:
        if tag == "$tuple":
            return tuple(_decode(x, where) for x in v["$tuple"])
        if tag == "$dict":
            return {k: _decode(x, where) for k, x in v["$dict"].items()}
        if tag == "$array":
            return np.asarray(v["$array"], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
        if tag == "$space":
            return space_from_json(v["$space"])
        if tag == "$callable":
            return Unrecorded(str(v["$callable"]))
        if tag == "$object":
            entry = _recordable_classes().get(v["$object"])
            if entry is None:
                raise CheckpointError(f"config {where!r}: unknown object class {v['$object']!r}")
            return entry[0](**{k: _decode(x, where) for k, x in v["kwargs"].items()})
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"config {where!r}: cannot decode {tag} ({type(exc).__name__}: {exc})") from None
    raise CheckpointError(f"config {where!r}: unknown tag {tag!r}")
