"""Env names on the command line: PettingZoo (classic, butterfly, sisl, atari), MPE (mpe2), Gymnasium ids and
OpenSpiel games (``openspiel/kuhn_poker``: the two-player zero-sum ones, through Shimmy, turn-based;
``openspiel/hanabi``: the fully cooperative ones, as Parallel envs in which every seat acts at every
step, :func:`marl_note.envs.openspiel.cooperative_parallel_env`; ``--env-arg
observation=information_state`` picks the information-state tensor, other ``--env-arg`` are game parameters).

A PettingZoo or MPE name is the module name (``tictactoe_v3``, ``simple_spread_v3``), optionally
with its family (``classic/tictactoe_v3``), or PettingZoo's registry id (``classic/tictactoe-v3``,
``butterfly/pistonball-v6``; without ``-vN`` the newest installed version); a Gymnasium name is a
registered id (``CartPole-v1``). Classic games are built with their turn-based ``env()``; MPE,
butterfly, sisl and atari envs with their ``parallel_env()`` (every agent acts each step, what
MADDPG learns from). Names are listed from the installed packages without importing any env
module, so an unknown name is answered at once: with the PettingZoo releases that had it, when
it is an older or removed name (:mod:`marl_note.cli.env_history`), and the nearest installed
names. An env whose package needs something not installed (butterfly needs pymunk, atari
multi_agent_ale_py; the zoo's LunarLander-v3 needs Box2D and texas_holdem_v4 rlcard, both in
``marl_note[zoo]``) is reported with the command that installs it, when the name is resolved,
before anything is built.

Example:
    >>> choice = resolve_env("classic/tictactoe_v3")
    >>> choice.name, choice.family, choice.make().possible_agents
    ('tictactoe_v3', 'classic', ['player_1', 'player_2'])
    >>> resolve_env("classic/tictactoe-v3").name  # PettingZoo's registry id
    'tictactoe_v3'
    >>> resolve_env("CartPole-v1").family
    'gymnasium'
    >>> resolve_env("conect_four_v3")
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: unknown env 'conect_four_v3'; did you mean connect_four_v3...
"""
from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from marl_note.cli.common import CLIError

__all__ = ["EnvChoice", "FAMILIES", "OPTIONAL_PACKAGES", "canonical_env_name", "known_envs", "resolve_env"]

# family -> (package holding one module per env, the factory each module provides, what installs it)
FAMILIES: dict[str, tuple[str, str, str]] = {
    "classic": ("pettingzoo.classic", "env", "pip install 'pettingzoo[classic]'"),
    "mpe": ("mpe2", "parallel_env", "pip install mpe2"),
    "butterfly": ("pettingzoo.butterfly", "parallel_env", "pip install 'pettingzoo[butterfly]'"),
    "sisl": ("pettingzoo.sisl", "parallel_env", "pip install 'pettingzoo[sisl]'"),
    "atari": ("pettingzoo.atari", "parallel_env",
              "pip install 'pettingzoo[atari]' and the game ROMs (pip install autorom; AutoROM --accept-license)"),
}
# a module an env imports that marl_note declares as an optional extra -> what installs it
# (Box2D: Gymnasium's box2d envs, LunarLander-v3 ...; rlcard: PettingZoo's card games, texas_holdem_v4 ...)
OPTIONAL_PACKAGES: dict[str, str] = {
    "Box2D": "pip install 'marl_note[zoo]' (or pip install 'gymnasium[box2d]')",
    "rlcard": "pip install 'marl_note[zoo]' (or pip install rlcard)",
}
# OpenSpiel games (marl_note.envs.openspiel): --env openspiel/<game>, listed while pyspiel and shimmy are installed
OPENSPIEL_PREFIX = "openspiel/"
OPENSPIEL_COOPERATIVE = "openspiel-cooperative"  # the family of the fully cooperative games (Parallel envs)
OPENSPIEL_INSTALL = "pip install 'marl_note[openspiel]' (or pip install 'shimmy[openspiel]' open_spiel)"
# what installs a module that some installed env needs and no marl_note extra declares
_OTHER_PACKAGES: dict[str, str] = {
    "multi_agent_ale_py": FAMILIES["atari"][2],
    "chess": "pip install 'pettingzoo[classic]' (or pip install chess)",
    "pymunk": "pip install 'pettingzoo[butterfly]' (or pip install pymunk)",
    "jax": "pip install 'gymnasium[jax]'",
    "mujoco": "pip install 'gymnasium[mujoco]'",
}
_ENV_MODULE = re.compile(r"[a-z][a-z0-9_]*_v\d+")
# PettingZoo's registry id: family/name-vN (pettingzoo.make("aec"|"parallel", ...)), the version optional
_REGISTRY_ID = re.compile(r"(?P<family>[a-z0-9_]+)/(?P<base>[a-z][a-z0-9_]*?)(?:-v(?P<version>\d+))?")


@dataclass(frozen=True)
class EnvChoice:
    """A resolved env name: ``make()`` builds one env; ``factory`` is what the trainer takes.

    Example:
        >>> choice = resolve_env("simple_spread_v3", {"max_cycles": 5})
        >>> choice.family, choice.kwargs
        ('mpe', {'max_cycles': 5})
    """

    name: str
    family: str
    factory: Callable[[], Any] = field(repr=False)
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def make(self) -> Any:
        return self.factory()


@functools.lru_cache(maxsize=1)
def known_envs() -> dict[str, str]:
    """Every env name this command line knows, ``{name: family}``, read from the installed packages."""
    names: dict[str, str] = {}
    for family, (package, _, _) in FAMILIES.items():
        try:
            spec = importlib.util.find_spec(package)
        except ImportError:  # the parent package itself is missing
            spec = None
        for path in (spec.submodule_search_locations or []) if spec is not None else []:
            for module in pkgutil.iter_modules([path]):
                if _ENV_MODULE.fullmatch(module.name) and not module.ispkg:
                    names.setdefault(module.name, family)
    import gymnasium as gym

    for env_id in gym.envs.registry:
        names.setdefault(env_id, "gymnasium")
    if _openspiel_missing() is None:
        from marl_note.envs.openspiel import cooperative_games, two_player_zero_sum_games

        for game in two_player_zero_sum_games():
            names.setdefault(OPENSPIEL_PREFIX + game, "openspiel")
        for game in cooperative_games():
            names.setdefault(OPENSPIEL_PREFIX + game, OPENSPIEL_COOPERATIVE)
    return names


def _openspiel_missing() -> str | None:
    """The module an OpenSpiel env needs that is not installed (pyspiel or shimmy), or None."""
    for module in ("pyspiel", "shimmy"):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def _resolve_openspiel(name: str, kwargs: dict[str, Any]) -> EnvChoice:
    """``openspiel/<game>``: the game loaded and checked now, the tensor asked for; a two-player zero-sum
    game plays turn-based (family ``openspiel``), a fully cooperative one as a Parallel env (family
    ``openspiel-cooperative``), any other game is refused."""
    missing = _openspiel_missing()
    if missing is not None:
        raise CLIError(f"env {name} needs the package {missing!r}, which is not installed: {OPENSPIEL_INSTALL}")
    from marl_note.envs.openspiel import (
        cooperative_games,
        cooperative_parallel_env,
        load_cooperative_game,
        load_game,
        openspiel_env,
    )

    game = name[len(OPENSPIEL_PREFIX):]
    cooperative = game.partition("(")[0].strip() in cooperative_games()
    options = {k: kwargs[k] for k in ("observation", "render_mode") if k in kwargs}
    params = {k: v for k, v in kwargs.items() if k not in options}
    if cooperative and "render_mode" in options:
        raise CLIError(f"env {name}: --env-arg render_mode is not taken by a cooperative OpenSpiel game "
                       f"(cooperative_parallel_env does not render)")
    try:
        (load_cooperative_game if cooperative else load_game)(game, options.get("observation", "observation"),
                                                              **params)
    except (ValueError, TypeError) as exc:
        also = "" if cooperative else (f"; the fully cooperative games play too (as Parallel envs): "
                                       f"{', '.join(OPENSPIEL_PREFIX + g for g in cooperative_games())}")
        raise CLIError(f"env {name}: {exc}{also}") from None
    if cooperative:
        return EnvChoice(name, OPENSPIEL_COOPERATIVE, functools.partial(cooperative_parallel_env, game, **kwargs),
                         kwargs)
    return EnvChoice(name, "openspiel", functools.partial(openspiel_env, game, **kwargs), kwargs)


def _close_matches(name: str, names: list[str]) -> list[str]:
    lowered = {n.lower(): n for n in names}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=5, cutoff=0.6)
    return [lowered[n] for n in found]


def _unknown(name: str, short: str, known: Mapping[str, str]) -> CLIError:
    """The error for an unknown name: which PettingZoo releases had it (an older or removed name) and the nearest
    installed names."""
    from marl_note.cli.env_history import MOVED, releases

    families = ", ".join(f"{f} ({n})" for f, n in _family_counts(known).items())
    forms = (f"Known: {families}; a PettingZoo name is its module name (tictactoe_v3, classic/tictactoe_v3) or its "
             f"registry id (classic/tictactoe-v3), a Gymnasium name its id (CartPole-v1).")
    missing_mpe = ("" if "mpe" in known.values()
                   else " MPE envs (simple_spread_v3, ...) need the mpe2 package: pip install mpe2.")
    history = releases(short)
    if history is None:
        matches = _close_matches(name, list(known))
        hint = f"did you mean {', '.join(matches)}? " if matches else ""
        return CLIError(f"unknown env {name!r}; {hint}{forms}{missing_mpe}")
    family, first, last = history
    had = f"PettingZoo {first}" if first == last else f"PettingZoo {first} to {last}"
    installed = _installed_version("pettingzoo")
    where = f"the installed PettingZoo {installed} has no {short}" if installed else "PettingZoo is not installed"
    install = f" (pip install 'pettingzoo=={last}' has it)"
    if family in MOVED:
        after, package = MOVED[family]
        install = (f"; {family} envs left PettingZoo after {after} for the {package} package, which has their newer "
                   f"versions (pip install 'pettingzoo=={last}' has this one)")
    nearest = _nearest(short, known)
    near = f"; nearest installed names: {', '.join(nearest)}" if nearest else ""
    return CLIError(f"unknown env {name!r}: {short} ({family}) was in {had}, {where}{install}{near}. "
                    f"{forms}{missing_mpe}")


def _nearest(short: str, known: Mapping[str, str]) -> list[str]:
    """Installed names nearest to ``short``: the same env in another version first, then close spellings."""
    from marl_note.cli.env_history import releases

    base = short.rpartition("_v")[0]
    same = sorted((n for n in known if n.rpartition("_v")[0] == base and _ENV_MODULE.fullmatch(n)),
                  key=_version, reverse=True)
    history = releases(short)
    family = [n for n, f in known.items() if history is not None and f == history[0]]
    out: list[str] = []
    for n in same + _close_matches(short, list(known)) + family:  # then the installed envs of its family
        if n not in out:
            out.append(n)
    return out[:5]


def _version(name: str) -> int:
    return int(name.rpartition("_v")[2])


def _installed_version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def canonical_env_name(name: str) -> str:
    """The name ``name`` resolves to (a module name or Gymnasium id), without importing the env.

    Example:
        >>> canonical_env_name("butterfly/pistonball-v6"), canonical_env_name("CartPole-v1")
        ('pistonball_v6', 'CartPole-v1')
    """
    return _module_name(name, known_envs())[0]


def _module_name(name: str, known: Mapping[str, str]) -> tuple[str, str]:
    """``(module name, family given or "")`` of a name as typed: a Gymnasium id or module name as is,
    ``family/name_vN`` and PettingZoo's registry id ``family/name-vN`` (no version: the newest installed)."""
    if name in known or name.count("/") != 1:
        return name, ""
    family, short = name.split("/")
    if family not in FAMILIES:
        return name, ""
    if _ENV_MODULE.fullmatch(short):
        return short, family
    match = _REGISTRY_ID.fullmatch(name)
    if match is None:
        return short, family
    if match["version"] is not None:
        return f"{match['base']}_v{int(match['version'])}", family
    versions = [n for n, f in known.items() if f == family and n.rpartition("_v")[0] == match["base"]]
    return (max(versions, key=_version) if versions else match["base"]), family


def _family_counts(known: Mapping[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in known.values():
        counts[family] = counts.get(family, 0) + 1
    return counts


def resolve_env(name: str, kwargs: Mapping[str, Any] | None = None) -> EnvChoice:
    """The env called ``name`` (its module imported, its factory found), or a CLIError saying why not.

    ``kwargs`` go to the env's factory (``max_cycles=25`` for MPE, ``render_mode`` for Gymnasium, ...).
    """
    kwargs = dict(kwargs or {})
    if name.startswith(OPENSPIEL_PREFIX):
        return _resolve_openspiel(name, kwargs)
    known = known_envs()
    short, family_given = _module_name(name, known)
    family = known.get(short)
    if family is not None and family_given and family != family_given:
        raise CLIError(f"unknown env {name!r}: {short} is a {family} env, not {family_given} ({family}/{short})")
    if family is None:
        raise _unknown(name, short, known)
    if family == "gymnasium":
        import gymnasium as gym

        _check_gym_dependencies(short, kwargs)
        return EnvChoice(short, family, functools.partial(gym.make, short, **kwargs), kwargs)
    package, factory_name, install = FAMILIES[family]
    try:
        module = importlib.import_module(f"{package}.{short}")
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        top = missing.partition(".")[0]
        install = OPTIONAL_PACKAGES.get(top) or _OTHER_PACKAGES.get(top, install)
        raise CLIError(f"env {short} ({family}) needs the package {missing!r}, which is not installed: "
                       f"{install}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise CLIError(f"env module {package}.{short} has no {factory_name}() to build it")
    return EnvChoice(short, family, functools.partial(factory, **kwargs) if kwargs else factory, kwargs)


def _check_gym_dependencies(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Build the Gymnasium env once, so that a missing dependency (box2d, mujoco) is reported now."""
    import gymnasium as gym

    try:
        gym.make(env_id, **kwargs).close()
    except (gym.error.DependencyNotInstalled, ImportError) as exc:
        missing = _missing_module(exc)
        hint = OPTIONAL_PACKAGES.get(missing or "") or _OTHER_PACKAGES.get(missing or "")
        if hint is not None:
            raise CLIError(f"env {env_id} needs the package {missing!r}, which is not installed: {hint}") from None
        if isinstance(exc, ImportError):
            raise CLIError(f"env {env_id} cannot be built ({exc})") from None
        raise CLIError(f"env {env_id} needs a package that is not installed: {exc}") from None


def _missing_module(exc: BaseException) -> str | None:
    """The top-level module whose import failed behind ``exc`` (Gymnasium raises its own error from the ImportError)."""
    cause: BaseException | None = exc
    while cause is not None:
        name = getattr(cause, "name", None) if isinstance(cause, ImportError) else None
        if name:
            return str(name).partition(".")[0]
        cause = cause.__cause__ or cause.__context__
    return None
