"""The algorithm registry: one entry per algorithm name, read without importing a framework.

An :class:`Algorithm` names the algorithm's numpy core and its public classes per backend by dotted
path (``"marl_note.agents.torch.dqn.DQN"``; a class object is accepted too), whether it learns
on-policy, whether it is one joint learner over every seat (MADDPG) or an agent per seat, the
action spaces it takes, and what :func:`marl_note.agents.checks.check_agent` builds it with.
Reading an entry imports nothing: :meth:`Algorithm.cls` imports the one backend asked for,
:meth:`Algorithm.core_cls` the numpy core only.

:func:`register` adds a user's algorithm (or an optional part's: an entry's code may live in any
package, and is only imported when used; AlphaZero's entry is registered by
:mod:`marl_note.contrib.alphazero` when that part is imported), :func:`get` finds one by name,
:func:`names` lists them (the built-in ones first, then the others by name),
:func:`fitting` says which fit an env, and :func:`is_on_policy` is the one definition of
"on-policy" for every reader: the registry entry of the agent's class, or an ``on_policy`` class
attribute its class declares (``on_policy: ClassVar[bool] = True``); an attribute set on an
instance or a buffer it happens to hold counts for nothing.

Example:
    >>> names()[:5]
    ['dqn', 'ppo', 'ddpg', 'sac', 'maddpg']
    >>> entry = get("ppo")
    >>> entry.on_policy, entry.joint, entry.actions, entry.backends
    (True, False, ('Discrete', 'Box'), ('torch', 'tf', 'numpy'))
    >>> entry.core_cls().__name__  # numpy only
    'PPOCore'
    >>> get("dqm")
    Traceback (most recent call last):
    ...
    marl_note.agents.registry.UnknownAlgorithm: no algorithm is registered as 'dqm' (did you mean 'dqn'?); \
registered: dqn, ppo, ddpg, sac, maddpg...
"""
from __future__ import annotations

import difflib
import importlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Algorithm", "RegistryError", "UnknownAlgorithm", "ACTION_SPACES", "BACKENDS", "register", "unregister",
           "get", "names", "entries", "entry_of", "core_of", "is_on_policy", "fitting", "problem"]

#: The Gymnasium action spaces an entry may declare (by class name).
ACTION_SPACES = ("Discrete", "Box", "MultiDiscrete", "MultiBinary")
#: Backend name -> (framework, how to install it).
BACKENDS: Mapping[str, tuple[str, str]] = MappingProxyType({
    "torch": ("PyTorch", "pip install 'marl_note[torch]'"),
    "tf": ("TensorFlow", "pip install 'marl_note[tf]'"),
    "numpy": ("numpy", "pip install marl_note")})  # MLP networks in plain numpy: no framework

_NAME = re.compile(r"[a-z][a-z0-9_\-]*\Z")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")
Code = str | type | Callable[..., Any]  # a dotted path "package.module.Name", or the object itself


class RegistryError(ValueError):
    """A registration that cannot be accepted, or an entry whose code cannot be found.

    Example:
        >>> register("dqn", core="marl_note.agents.dqn.DQNCore", torch="marl_note.agents.torch.dqn.DQN",
        ...          actions=("Discrete",), on_policy=False)
        Traceback (most recent call last):
        ...
        marl_note.agents.registry.RegistryError: algorithm 'dqn' is already registered (core \
marl_note.agents.dqn.DQNCore); pass replace=True to replace it, or choose another name
    """


class UnknownAlgorithm(RegistryError, KeyError):
    """:func:`get` of a name nothing is registered under (a KeyError too).

    Example:
        >>> try:
        ...     get("a2c")
        ... except KeyError as err:
        ...     print(str(err).split(";")[0])
        no algorithm is registered as 'a2c' (did you mean 'sac'?)
    """

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


def _describe(code: Code) -> str:
    if isinstance(code, str):
        return code
    return f"{getattr(code, '__module__', '?')}.{getattr(code, '__qualname__', repr(code))}"


def _check_code(algo: str, what: str, code: Any, optional: bool = False) -> None:
    if code is None and optional:
        return
    if isinstance(code, str):
        if not _DOTTED.match(code):
            raise RegistryError(f"algorithm {algo!r}: {what} must be a dotted path 'package.module.Name' or the "
                                f"object itself, got {code!r}")
    elif not callable(code):
        raise RegistryError(f"algorithm {algo!r}: {what} must be a dotted path 'package.module.Name' or the "
                            f"object itself, got {type(code).__name__} {code!r}")


def _resolve(algo: str, what: str, code: Code) -> Any:
    """The object ``code`` names (importing its module), or a RegistryError naming the entry.

    An ImportError of the module itself is the caller's to explain (a missing framework)."""
    if not isinstance(code, str):
        return code
    module, _, name = code.rpartition(".")
    mod = importlib.import_module(module)
    try:
        return getattr(mod, name)
    except AttributeError:
        raise RegistryError(f"algorithm {algo!r}: its {what} {code!r} does not exist (module {module!r} has no "
                            f"{name!r})") from None


def _loaded(code: Code) -> Any:
    """The object ``code`` names if its module is imported already and defines it (else None): nothing is
    imported or built (a module's ``__getattr__`` that builds a class on demand is not called)."""
    if not isinstance(code, str):
        return code
    module, _, name = code.rpartition(".")
    mod = sys.modules.get(module)
    return None if mod is None else vars(mod).get(name)


@dataclass(frozen=True)
class Algorithm:
    """One registered algorithm; every field is checked when the entry is made, nothing is imported.

    - ``name``: lowercase (``"dqn"``), as the command line and recipes spell it.
    - ``core``: the numpy core class (its constructor names the options; imports no framework).
    - ``torch`` / ``tf`` / ``numpy``: the public class per backend (at least one); the same constructor in
      each (``numpy``: MLP networks in plain numpy, :mod:`marl_note.agents.numpy`).
    - ``actions``: the action spaces it takes, by Gymnasium class name (:data:`ACTION_SPACES`).
    - ``on_policy``: learns only from data collected with its current weights (PPO); required.
    - ``joint``: one learner over every seat of a Parallel env, built by ``cls.from_spec(spec, **options)``
      from the env's :class:`~marl_note.types.EnvSpec` (spaces, global state), acting through
      ``seat_agents()`` and fed with ``observe_joint`` (MADDPG); False: an agent per seat, fed with ``observe``.
    - ``images``: whether it takes image observations.
    - ``fits``: ``fits(name, spec, seats) -> str | None``, an extra reason an env does not fit
      (AlphaZero's board rules), checked before the generic ones; None: no extra reason.
    - ``cases``: ``cases() -> [AgentCase, ...]``, the spaces and the task
      :func:`~marl_note.agents.checks.check_agent` builds it on; None: derived from ``actions``.
    - ``tiny``: constructor options for a small, fast instance (what ``check_agent`` builds).

    ``core``, ``torch``, ``tf``, ``numpy``, ``fits`` and ``cases`` are dotted paths (``"pkg.module.Name"``)
    or the objects themselves.

    Example:
        >>> entry = Algorithm("mine", core="mypkg.agents.MineCore", torch="mypkg.agents.torch_mine.Mine",
        ...                   actions=("Box",), on_policy=False)
        >>> entry.backends, entry.joint
        (('torch',), False)
        >>> Algorithm("mine", core="mypkg.agents.MineCore", torch="mypkg.Mine", actions=("Tuple",), on_policy=False)
        Traceback (most recent call last):
        ...
        marl_note.agents.registry.RegistryError: algorithm 'mine': actions must name spaces among Discrete, Box, \
MultiDiscrete, MultiBinary, got ('Tuple',)
    """

    name: str
    core: Code
    torch: Code | None = None
    tf: Code | None = None
    actions: tuple[str, ...] = ()
    on_policy: bool | None = None
    joint: bool = False
    images: bool = True
    fits: Code | None = None
    cases: Code | None = None
    tiny: Mapping[str, Any] = field(default_factory=dict)
    numpy: Code | None = None

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not _NAME.match(name):
            raise RegistryError(f"an algorithm name must be lowercase letters, digits, '_' or '-', starting with a "
                                f"letter (as the command line spells it), got {name!r}")
        _check_code(name, "core", self.core)
        if self.torch is None and self.tf is None and self.numpy is None:
            raise RegistryError(f"algorithm {name!r} names no backend class: give torch=..., tf=... and/or numpy=...")
        _check_code(name, "torch class", self.torch, optional=True)
        _check_code(name, "tf class", self.tf, optional=True)
        _check_code(name, "numpy class", self.numpy, optional=True)
        _check_code(name, "fits", self.fits, optional=True)
        _check_code(name, "cases", self.cases, optional=True)
        actions = self.actions
        if isinstance(actions, str) or not isinstance(actions, (tuple, list)) or not actions \
                or any(a not in ACTION_SPACES for a in actions) or len(set(actions)) != len(actions):
            raise RegistryError(f"algorithm {name!r}: actions must name spaces among {', '.join(ACTION_SPACES)}, "
                                f"got {actions!r}")
        object.__setattr__(self, "actions", tuple(actions))
        for flag in ("on_policy", "joint", "images"):
            if not isinstance(getattr(self, flag), bool):
                raise RegistryError(f"algorithm {name!r}: {flag} must be True or False, got {getattr(self, flag)!r}"
                                    + (" (declare whether it learns only from its current policy's data)"
                                       if flag == "on_policy" else ""))
        if not isinstance(self.tiny, Mapping) or not all(isinstance(k, str) for k in self.tiny):
            raise RegistryError(f"algorithm {name!r}: tiny must be a mapping of constructor options, got {self.tiny!r}")
        object.__setattr__(self, "tiny", MappingProxyType(dict(self.tiny)))

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends this algorithm has a class for, in ``("torch", "tf", "numpy")`` order."""
        return tuple(b for b in BACKENDS if getattr(self, b) is not None)

    def cls(self, backend: str) -> type:
        """The public class for ``backend`` (``"torch"``, ``"tf"`` or ``"numpy"``), importing that backend only.

        Example:
            >>> get("dqn").cls("torch").__module__
            'marl_note.agents.torch.dqn'
        """
        if backend not in BACKENDS:
            raise RegistryError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        code = getattr(self, backend)
        if code is None:
            raise RegistryError(f"algorithm {self.name!r} has no {backend} class; it has {', '.join(self.backends)}")
        try:
            found = _resolve(self.name, f"{backend} class", code)
        except ImportError as exc:
            framework, install = BACKENDS[backend]
            raise ImportError(f"algorithm {self.name!r} with backend {backend} needs {framework}, which cannot be "
                              f"imported ({exc}): {install}") from exc
        if not isinstance(found, type):
            raise RegistryError(f"algorithm {self.name!r}: its {backend} class {_describe(code)} is not a class")
        return found

    def core_cls(self) -> type:
        """The numpy core class (imports no framework).

        Example:
            >>> get("maddpg").core_cls().__name__
            'MADDPGCore'
        """
        found = _resolve(self.name, "core", self.core)
        if not isinstance(found, type):
            raise RegistryError(f"algorithm {self.name!r}: its core {_describe(self.core)} is not a class")
        return found

    def problem(self, spec: Any, seats: list[str] | None = None) -> str | None:
        """Why this algorithm cannot learn ``seats`` (default: every seat) of the env ``spec``
        (an :class:`~marl_note.types.EnvSpec`), or None if it can. Imports no framework.

        Example:
            >>> import gymnasium as gym
            >>> from marl_note.types import EnvSpec
            >>> spec = EnvSpec(("agent_0",), {"agent_0": gym.spaces.Box(-1, 1, (4,))},
            ...                {"agent_0": gym.spaces.Discrete(2)}, turn_based=False, has_action_mask=False)
            >>> get("ddpg").problem(spec)
            "ddpg needs Box actions, but seat 'agent_0' has Discrete(2)"
            >>> get("dqn").problem(spec) is None
            True
        """
        from marl_note.agents.maddpg_seats import image_observation  # numpy only
        from marl_note.agents.spaces import flat_obs_dim

        algo = self.name
        if self.fits is not None:
            extra = _resolve(algo, "fits", self.fits)(algo, spec, seats)
            if extra is not None:
                return str(extra)
        if self.joint and spec.turn_based:
            return (f"{algo} learns from every agent's step at once (joint per-step data), which needs a Parallel "
                    f"env where all agents act together; this env is turn-based")
        for seat in seats or list(spec.possible_agents):
            space = spec.action_space(seat)
            if type(space).__name__ not in self.actions:
                return f"{algo} needs {' or '.join(self.actions)} actions, but seat {seat!r} has {space}"
            try:
                flat_obs_dim(spec.observation_space(seat))
            except TypeError:
                return (f"the built-in networks take Box, Discrete, MultiBinary or MultiDiscrete observations (or "
                        f"Dict/Tuple of those), but seat {seat!r} observes {spec.observation_space(seat)}")
            if not self.images and image_observation(spec.observation_space(seat)):
                return (f"{algo} reads no images (it has no conv torso yet), but seat {seat!r} observes "
                        f"{spec.observation_space(seat)}")
        return None


# --------------------------------------------------------------------------- the built-in algorithms
_TINY = {"hidden_sizes": (8,), "buffer_size": 256, "learning_starts": 16, "update_steps": 1}
_BUILTIN = (
    Algorithm("dqn", "marl_note.agents.dqn.DQNCore", "marl_note.agents.torch.dqn.DQN", "marl_note.agents.tf.dqn.DQN",
              ("Discrete",), on_policy=False, tiny=_TINY, numpy="marl_note.agents.numpy.dqn.DQN"),
    Algorithm("ppo", "marl_note.agents.ppo.PPOCore", "marl_note.agents.torch.ppo.PPO", "marl_note.agents.tf.ppo.PPO",
              ("Discrete", "Box"), on_policy=True, tiny={"hidden_sizes": (8,), "n_steps": 16, "n_epochs": 1},
              numpy="marl_note.agents.numpy.ppo.PPO"),
    Algorithm("ddpg", "marl_note.agents.ddpg.DDPGCore", "marl_note.agents.torch.ddpg.DDPG",
              "marl_note.agents.tf.ddpg.DDPG", ("Box",), on_policy=False, tiny=_TINY,
              numpy="marl_note.agents.numpy.ddpg.DDPG"),
    Algorithm("sac", "marl_note.agents.sac.SACCore", "marl_note.agents.torch.sac.SAC", "marl_note.agents.tf.sac.SAC",
              ("Discrete", "Box"), on_policy=False, tiny=_TINY, numpy="marl_note.agents.numpy.sac.SAC"),
    Algorithm("maddpg", "marl_note.agents.maddpg.MADDPGCore", "marl_note.agents.torch.maddpg.MADDPG",
              "marl_note.agents.tf.maddpg.MADDPG", ("Discrete", "Box"), on_policy=False, joint=True, images=False,
              tiny=_TINY, numpy="marl_note.agents.numpy.maddpg.MADDPG"),
    Algorithm("mappo", "marl_note.agents.mappo.MAPPOCore", "marl_note.agents.torch.mappo.MAPPO",
              "marl_note.agents.tf.mappo.MAPPO", ("Discrete",), on_policy=True, joint=True, images=False,
              tiny={"hidden_sizes": (8,), "n_steps": 16, "n_epochs": 1, "share_actor": False}),
    Algorithm("ippo", "marl_note.agents.mappo.IPPOCore", "marl_note.agents.torch.mappo.IPPO",
              "marl_note.agents.tf.mappo.IPPO", ("Discrete",), on_policy=True, joint=True, images=False,
              tiny={"hidden_sizes": (8,), "n_steps": 16, "n_epochs": 1, "share_actor": False}),
    Algorithm("vdn", "marl_note.agents.qmix.VDNCore", "marl_note.agents.torch.qmix.VDN", "marl_note.agents.tf.qmix.VDN",
              ("Discrete",), on_policy=False, joint=True, images=False, tiny=_TINY),
    Algorithm("qmix", "marl_note.agents.qmix.QMIXCore", "marl_note.agents.torch.qmix.QMIX",
              "marl_note.agents.tf.qmix.QMIX", ("Discrete",), on_policy=False, joint=True, images=False, tiny=_TINY),
    Algorithm("nfsp", "marl_note.agents.nfsp.NFSPCore", "marl_note.agents.torch.nfsp.NFSP",
              "marl_note.agents.tf.nfsp.NFSP", ("Discrete",), on_policy=False, images=False,
              tiny={**_TINY, "reservoir_size": 256, "sl_learning_starts": 16},
              numpy="marl_note.agents.numpy.nfsp.NFSP"),
)
_REGISTRY: dict[str, Algorithm] = {a.name: a for a in _BUILTIN}
_BUILTIN_NAMES = tuple(_REGISTRY)


def register(entry: Algorithm | str, /, *, replace: bool = False, **fields: Any) -> Algorithm:
    """Register an algorithm: an :class:`Algorithm`, or its name and fields as keywords; returns the entry.

    A name already registered is refused unless ``replace=True``; a bad field is refused naming it.
    Nothing is imported: a wrong dotted path surfaces when the class is first asked for.

    Example:
        >>> from marl_note.agents.dqn import DQNCore
        >>> from marl_note.agents.torch import DQN
        >>> class MyDQN(DQN):
        ...     pass
        >>> register("my-dqn", core=DQNCore, torch=MyDQN, actions=("Discrete",), on_policy=False).backends
        ('torch',)
        >>> get("my-dqn").cls("torch") is MyDQN, is_on_policy(MyDQN)
        (True, False)
        >>> unregister("my-dqn").name
        'my-dqn'
        >>> register("my-dqn", core=DQNCore, torch=MyDQN, actions=("Discrete",))
        Traceback (most recent call last):
        ...
        marl_note.agents.registry.RegistryError: algorithm 'my-dqn': on_policy must be True or False, got None \
(declare whether it learns only from its current policy's data)
    """
    if isinstance(entry, str):
        entry = Algorithm(entry, **fields)
    elif not isinstance(entry, Algorithm):
        raise RegistryError(f"register() takes an Algorithm or a name and keyword fields, got {type(entry).__name__}")
    elif fields:
        raise RegistryError(f"register(Algorithm(...)) takes no further fields, got {sorted(fields)}")
    if not isinstance(replace, bool):
        raise RegistryError(f"replace must be True or False, got {replace!r}")
    old = _REGISTRY.get(entry.name)
    if old is not None and not replace:
        raise RegistryError(f"algorithm {entry.name!r} is already registered (core {_describe(old.core)}); pass "
                            f"replace=True to replace it, or choose another name")
    _REGISTRY[entry.name] = entry
    return entry


def unregister(name: str) -> Algorithm:
    """Remove and return the entry registered as ``name`` (an :class:`UnknownAlgorithm` if there is none).

    Example:
        >>> unregister("nothing")
        Traceback (most recent call last):
        ...
        marl_note.agents.registry.UnknownAlgorithm: no algorithm is registered as 'nothing'; registered: ...
    """
    entry = get(name)
    del _REGISTRY[entry.name]
    return entry


def get(name: str) -> Algorithm:
    """The entry registered as ``name``, or an :class:`UnknownAlgorithm` naming the registered ones.

    Example:
        >>> get("sac").actions
        ('Discrete', 'Box')
    """
    entry = _REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownAlgorithm(f"no algorithm is registered as {name!r}{hint}; registered: {', '.join(names())}")
    return entry


def names() -> list[str]:
    """Every registered name: the core's built-in ones in their fixed order, then every other in
    alphabetical order (the same list whatever order optional parts and plugins were imported in).

    Example:
        >>> names()[:2]
        ['dqn', 'ppo']
    """
    return [n for n in _BUILTIN_NAMES if n in _REGISTRY] + sorted(n for n in _REGISTRY if n not in _BUILTIN_NAMES)


def entries() -> list[Algorithm]:
    """Every registered entry, in :func:`names` order.

    Example:
        >>> [e.name for e in entries() if e.joint]
        ['maddpg', 'mappo', 'ippo', 'vdn', 'qmix']
    """
    return [_REGISTRY[n] for n in names()]


def _classes(entry: Algorithm) -> list[type]:
    """The entry's classes whose modules are imported already (an object can only be of those)."""
    found = (_loaded(code) for code in (entry.core, entry.torch, entry.tf, entry.numpy) if code is not None)
    return [c for c in found if isinstance(c, type)]


def entry_of(agent_or_cls: Any) -> Algorithm | None:
    """The entry of the most derived registered class that ``agent_or_cls`` is (or is an instance of).

    Imports nothing: a class can only derive from classes whose modules are imported already.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.agents.torch import PPO
        >>> entry_of(PPO).name
        'ppo'
        >>> from marl_note.agents import RandomAgent
        >>> entry_of(RandomAgent(gym.spaces.Discrete(2))) is None
        True
    """
    cls = agent_or_cls if isinstance(agent_or_cls, type) else type(agent_or_cls)
    owners: dict[type, Algorithm] = {}
    for entry in reversed(_REGISTRY.values()):  # the first registered wins a class two entries share
        owners.update(dict.fromkeys(_classes(entry), entry))
    for klass in cls.__mro__:
        if klass in owners:
            return owners[klass]
    return None


def core_of(agent_or_cls: Any) -> type | None:
    """The numpy core class of a registered algorithm's own backend class (or of an instance of it), else None.

    None for a subclass of a registered class (its overrides live in the subclass, not the core),
    and for an unregistered class. What the actor pool acts with in numpy. Imports nothing new.

    Example:
        >>> from marl_note.agents.torch import DQN
        >>> core_of(DQN).__name__
        'DQNCore'
        >>> class MyDQN(DQN):
        ...     pass
        >>> core_of(MyDQN) is None, core_of(core_of(DQN)) is None
        (True, True)
    """
    cls = agent_or_cls if isinstance(agent_or_cls, type) else type(agent_or_cls)
    entry = entry_of(cls)
    if entry is None or all(cls is not c for c in _classes(entry)):
        return None
    core = entry.core_cls()
    return core if cls is not core and issubclass(cls, core) else None


def _declared(klass: type) -> bool | None:
    """The ``on_policy`` that ``klass`` declares in its own body (not inherited), or None."""
    value = vars(klass).get("on_policy")
    return value if isinstance(value, bool) else None


def is_on_policy(agent_or_cls: Any, default: bool | None = None) -> bool:
    """Whether an agent (or agent class) learns only from data collected with its current weights.

    The one definition every reader uses (the pool, adaptive batch sizes, ...). Walking the class's
    MRO, the first class that either is a registered algorithm's class or declares ``on_policy`` in
    its own body (``on_policy: ClassVar[bool] = True``) decides: a registered class by its entry
    (and a declaration it inherits must agree with the entry), a declaring class (a user subclass
    overriding it, or an unregistered agent) by its declaration. Nothing is read from the instance.
    For a class neither registered nor declaring, ``default`` is returned, or, when it is None, a
    TypeError says how to declare it: an undeclared learner never passes for off-policy silently.

    Example:
        >>> from marl_note.agents.torch import DQN, PPO
        >>> is_on_policy(PPO), is_on_policy(DQN)
        (True, False)
        >>> class Scripted:
        ...     on_policy = False
        >>> is_on_policy(Scripted())
        False
        >>> is_on_policy(object())
        Traceback (most recent call last):
        ...
        TypeError: object declares no on_policy: register its algorithm (marl_note.agents.registry.register(..., \
on_policy=...)) or declare on_policy: ClassVar[bool] on the class
    """
    cls = agent_or_cls if isinstance(agent_or_cls, type) else type(agent_or_cls)
    entry = entry_of(cls)
    owners = _classes(entry) if entry is not None else []
    for klass in cls.__mro__:
        if entry is not None and klass in owners:
            inherited = next((d for d in map(_declared, klass.__mro__) if d is not None), None)
            if inherited is not None and inherited != entry.on_policy:
                raise TypeError(f"{klass.__qualname__} declares on_policy = {inherited}, but its registered algorithm "
                                f"{entry.name!r} says on_policy={entry.on_policy}: make them agree")
            return bool(entry.on_policy)
        declared = _declared(klass)
        if declared is not None:
            return declared
    if default is None:
        raise TypeError(f"{cls.__qualname__} declares no on_policy: register its algorithm "
                        f"(marl_note.agents.registry.register(..., on_policy=...)) or declare "
                        f"on_policy: ClassVar[bool] on the class")
    return bool(default)


def problem(name: str, spec: Any, seats: list[str] | None = None) -> str | None:
    """:meth:`Algorithm.problem` of the algorithm registered as ``name``.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.types import EnvSpec
        >>> spec = EnvSpec(("a", "b"), dict.fromkeys("ab", gym.spaces.Box(0, 1, (9,))),
        ...                dict.fromkeys("ab", gym.spaces.Discrete(9)), turn_based=True, has_action_mask=True)
        >>> problem("maddpg", spec)
        "maddpg learns from every agent's step at once (joint per-step data), which needs a Parallel env where \
all agents act together; this env is turn-based"
    """
    return get(name).problem(spec, seats)


def fitting(spec: Any, seats: list[str] | None = None) -> list[str]:
    """The registered algorithms that can learn ``seats`` (default: every seat) of the env ``spec``.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.types import EnvSpec
        >>> spec = EnvSpec(("agent_0",), {"agent_0": gym.spaces.Box(-1, 1, (3,))},
        ...                {"agent_0": gym.spaces.Box(-2, 2, (1,))}, turn_based=False, has_action_mask=False)
        >>> fitting(spec)
        ['ppo', 'ddpg', 'sac', 'maddpg']
    """
    return [entry.name for entry in entries() if entry.problem(spec, seats) is None]
