"""The zoo: versioned training recipes, one TOML file per env, shipped in ``marl_note/cli/recipes/``.

A recipe names the env (and its factory's arguments), the wrappers around it, the algorithm and
its options, who sits in which seat, the trainer's options, the budget (env steps, minutes and/or
episodes), the seeds, and in ``[result]`` the score it reached: only a measured one, with its date,
machine and seeds, else ``status = "not measured"``. :func:`load_recipe` reads and checks a file
(unknown keys, wrong types, unknown env or algorithm names are refused with a
:class:`RecipeError` naming the file and the key); :func:`recipe` finds a shipped recipe by env
name. Training one is :func:`marl_note.cli.zoo_run.train_recipe` (``python -m marl_note train --env
NAME`` does the same from the command line). Everything here
is numpy only.

Example:
    >>> r = recipe("CartPole-v1")
    >>> r.env, r.algo, r.seats, r.version >= 1
    ('CartPole-v1', 'dqn', 'independent', True)
    >>> "tictactoe_v3" in recipe_names()
    True
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "mine.toml")
    >>> with open(path, "w") as f:
    ...     _ = f.write('version = 1\\nenv = "CartPole-v1"\\nalgo = "dqn"\\nseeds = [0]\\n'
    ...                 '[trainer]\\ntest_freq = 10\\nlr = 0.1\\n[budget]\\nenv_steps = 1000\\n'
    ...                 '[result]\\nstatus = "not measured"\\n')
    >>> load_recipe(path)
    Traceback (most recent call last):
    ...
    marl_note.cli.zoo.RecipeError: .../mine.toml: [trainer] has no key 'lr' (known: batch_size, ...); \
agent options go in [agent]
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marl_note._moved import package_getattr
from marl_note.cli.common import CLIError
from marl_note.cli.plugins import algorithm, algorithm_names
from marl_note.file_reads import JSON_LIMIT, FileRefused, read_regular
from marl_note.validation import MAX_COUNT, MAX_MINUTES, MAX_SEED, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package
    import tomli as tomllib

__all__ = ["RECIPE_DIR", "Recipe", "RecipeError", "check_recipe", "load_recipe", "recipe", "recipe_names", "recipes"]

RECIPE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipes")
SEAT_MODES = ("independent", "self-play", "joint")
WRAPPERS = ("with_agent_id", "pad_seats")  # and "supersuit.<wrapper>", e.g. supersuit.resize_v1
_SET_ELSEWHERE = ("observation_space", "action_space", "observation_spaces", "action_spaces", "seed")

# key: (types, what the value must be); a None type list means "a table of free options"
_TOP = {"version": ((int,), "a positive integer"), "env": ((str,), "an env name"),
        "algo": ((str,), "a registered algorithm's name"), "description": ((str,), "text"),
        "source": ((str,), "text"), "seats": ((str,), "one of " + ", ".join(SEAT_MODES)),
        "score_seats": ((list,), "a list of seat names"), "target": ((int, float), "a number"),
        "seeds": ((list,), "a non-empty list of integers"), "env_kwargs": ((dict,), "a table"),
        "wrappers": ((list,), "an array of tables"), "agent": ((dict,), "a table"),
        "trainer": ((dict,), "a table"), "budget": ((dict,), "a table"), "result": ((dict,), "a table")}
_REQUIRED = ("version", "env", "algo", "seeds", "trainer", "budget", "result")
_TRAINER = {"num_envs": "positive", "batch_size": "positive", "update_freq": "positive", "test_freq": "positive",
            "test_episodes": "positive", "processes": "positive", "stop_reward": "number"}
_BUDGET = {"env_steps": "positive", "episodes": "positive", "minutes": "positive number"}
_RESULT = {"status": (str,), "date": (str,), "machine": (str,), "seeds": (list,), "metric": (str,),
           "mean": (int, float), "std": (int, float), "random": (int, float), "per_seat": (dict,),
           "random_per_seat": (dict,), "env_steps": (int,), "minutes": (int, float), "backend": (str,),
           "command": (str,), "note": (str,), "deterministic_mean": (int, float)}
_RESULT_STATUS = ("measured", "not measured")


__getattr__ = package_getattr(__name__)  # train_recipe, prepare, write_result: see marl_note._moved


class RecipeError(CLIError):
    """A recipe file that cannot be used: the message names the file and the key.

    Example:
        >>> str(RecipeError("x.toml: [budget] needs env_steps, episodes or minutes"))
        'x.toml: [budget] needs env_steps, episodes or minutes'
    """


@dataclass(frozen=True)
class Recipe:
    """A checked recipe; ``dataclasses.replace`` (or :meth:`with_budget`) makes a changed copy.

    ``seats``: ``"independent"`` (one learning agent per seat; the one-agent case), ``"self-play"``
    (one agent in every seat, all learning: self-play in board games, parameter sharing in
    Parallel envs) or ``"joint"`` (MADDPG). ``wrappers``: ``({"name": ..., **kwargs}, ...)``
    applied in order, innermost first. ``score_seats``: the seats whose mean return is the score
    (default: every seat).

    Example:
        >>> r = recipe("Pendulum-v1").with_budget(env_steps=500, minutes=None)
        >>> r.budget["env_steps"], r.algo
        (500, 'sac')
    """

    name: str
    path: str
    version: int
    env: str
    algo: str
    seeds: tuple[int, ...]
    trainer: Mapping[str, Any]
    budget: Mapping[str, Any]
    result: Mapping[str, Any]
    seats: str = "independent"
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: tuple[Mapping[str, Any], ...] = ()
    agent: Mapping[str, Any] = field(default_factory=dict)
    score_seats: tuple[str, ...] | None = None
    target: float | None = None
    description: str = ""
    source: str = ""
    origin: str = ""  # set by on_env: the label of the recipe whose settings these are

    @property
    def label(self) -> str:
        return f"{self.origin} on {self.env}" if self.origin else f"{self.name} v{self.version}"

    def with_budget(self, **budget: Any) -> Recipe:
        """A copy with these budget entries replaced (None removes one)."""
        merged = {**self.budget, **budget}
        merged = {k: v for k, v in merged.items() if v is not None}
        _check_budget(merged, self.path)
        return dataclasses.replace(self, budget=merged)

    def on_env(self, env: str, env_kwargs: Mapping[str, Any] | None = None) -> Recipe:
        """This recipe's settings (algorithm, agent, wrappers, trainer, budget, seeds) on another env.

        What belongs to the recipe's own env does not carry over: its factory arguments (give
        ``env_kwargs``), its ``stop_reward`` and ``target`` (scores of that env), its ``score_seats``
        (seat names of that env) and its ``[result]`` (``status = "not measured"``). The copy is
        labelled ``"<recipe label> on <env>"``.

        Example:
            >>> cartpole = recipe("CartPole-v1")
            >>> r = cartpole.on_env("FrozenLake-v1")
            >>> r.env, r.algo, r.label == f"{cartpole.label} on FrozenLake-v1", r.result["status"]
            ('FrozenLake-v1', 'dqn', True, 'not measured')
        """
        if not isinstance(env, str) or not env:
            raise RecipeError(f"{self.path}: on_env needs an env name, got {env!r}")
        trainer = {k: v for k, v in self.trainer.items() if k != "stop_reward"}
        return dataclasses.replace(self, name=f"{self.name} on {env}", origin=self.origin or self.label, env=env,
                                   env_kwargs=dict(env_kwargs or {}), trainer=trainer, target=None,
                                   score_seats=None, result={"status": "not measured"})

    def agent_kwargs(self) -> dict[str, Any]:
        """The agent's constructor arguments: lists as tuples, an exploration ``policy`` table built."""
        out: dict[str, Any] = {}
        for key, value in self.agent.items():
            if key == "policy" and isinstance(value, Mapping):
                from marl_note.agents.exploration import policies

                options = dict(value)
                out[key] = getattr(policies, options.pop("type"))(**options)
            else:
                out[key] = _tuples(value)
        return out


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def recipe_names() -> list[str]:
    """The env names that have a shipped recipe."""
    return sorted(n[:-5] for n in os.listdir(RECIPE_DIR) if n.endswith(".toml"))


def recipe(env: str) -> Recipe:
    """The shipped recipe for ``env`` (an env name, e.g. ``"CartPole-v1"``), or a RecipeError listing them."""
    names = recipe_names()
    if env not in names:
        close = difflib.get_close_matches(env, names, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise RecipeError(f"no zoo recipe for {env!r}; {hint}recipes: {', '.join(names)}")
    return load_recipe(os.path.join(RECIPE_DIR, f"{env}.toml"))


def recipes() -> list[Recipe]:
    """Every shipped recipe, checked."""
    return [recipe(n) for n in recipe_names()]


def load_recipe(path: str | os.PathLike) -> Recipe:
    """Read and check the recipe file ``path``; a RecipeError names the file and the key that is wrong."""
    path = os.fspath(path)
    try:
        data = tomllib.loads(read_regular(path, JSON_LIMIT).decode("utf-8"))
    except OSError as exc:
        raise RecipeError(f"recipe {path} cannot be read ({exc.strerror or exc})") from None
    except FileRefused as exc:
        raise RecipeError(f"recipe {exc}") from None
    except ValueError as exc:  # a TOMLDecodeError or UnicodeDecodeError, or an integer of over 4300 digits
        raise RecipeError(f"{path} is not valid TOML: {exc}") from None
    return check_recipe(data, path)


def check_recipe(data: Mapping[str, Any], path: str = "<recipe>") -> Recipe:
    """A :class:`Recipe` from the parsed TOML ``data``; ``path`` names it in errors."""
    for key, value in data.items():
        if key not in _TOP:
            raise RecipeError(f"{path}: unknown key {key!r}{_did_you_mean(key, _TOP)}; known: {', '.join(_TOP)}")
        types, what = _TOP[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise RecipeError(f"{path}: {key} must be {what}, got {value!r}")
    for key in _REQUIRED:
        if key not in data:
            raise RecipeError(f"{path}: the key {key!r} is missing (every recipe states {', '.join(_REQUIRED)})")
    if data["version"] < 1:
        raise RecipeError(f"{path}: version must be a positive integer, got {data['version']}")
    algo = data["algo"]
    if algo not in algorithm_names():
        raise RecipeError(f"{path}: algo {algo!r} is not one of {', '.join(algorithm_names())}")
    _check_env(data["env"], path)
    joint = algorithm(algo).joint
    seats = data.get("seats", "joint" if joint else "independent")
    if seats not in SEAT_MODES or (seats == "joint") != joint:
        with_joint = ", ".join(n for n in algorithm_names() if algorithm(n).joint)
        raise RecipeError(f"{path}: seats {seats!r} does not fit algo {algo!r}: use 'joint' with {with_joint}, "
                          f"else 'independent' or 'self-play'")
    seeds = data["seeds"]
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in seeds):
        raise RecipeError(f"{path}: seeds must be a non-empty list of integers from 0 to {MAX_SEED:,}, got "
                          f"{shown(seeds)}")
    score_seats = data.get("score_seats")
    if score_seats is not None and (not score_seats or not all(isinstance(s, str) for s in score_seats)):
        raise RecipeError(f"{path}: score_seats must be a non-empty list of seat names, got {score_seats!r}")
    _check_options(data["trainer"], _TRAINER, "trainer", path, "; agent options go in [agent]")
    if "test_freq" not in data["trainer"]:
        raise RecipeError(f"{path}: [trainer] needs test_freq (training episodes between tests)")
    _check_budget(data["budget"], path)
    _check_agent(algo, data.get("agent", {}), path)
    wrappers = tuple(_check_wrapper(w, k, path) for k, w in enumerate(data.get("wrappers", [])))
    _check_result(data["result"], path)
    name = os.path.basename(path)[:-5] if path.endswith(".toml") else os.path.basename(path)
    return Recipe(name=name, path=path, version=data["version"], env=data["env"], algo=algo, seeds=tuple(seeds),
                  trainer=dict(data["trainer"]), budget=dict(data["budget"]), result=dict(data["result"]),
                  seats=seats, env_kwargs=dict(data.get("env_kwargs", {})), wrappers=wrappers,
                  agent=dict(data.get("agent", {})), score_seats=None if score_seats is None else tuple(score_seats),
                  target=None if data.get("target") is None else float(data["target"]),
                  description=data.get("description", ""), source=data.get("source", ""))


def _did_you_mean(key: str, known: Mapping[str, Any] | list[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_env(env: str, path: str) -> None:
    from marl_note.cli.envs import known_envs

    known = known_envs()
    if env in known:
        return
    # an MPE name while mpe2 is not installed: building it later says what to install
    if "mpe" not in known.values() and re.fullmatch(r"simple[a-z_]*_v\d+", env):
        return
    close = difflib.get_close_matches(env, list(known), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise RecipeError(f"{path}: env {env!r} is no env known here{hint} (a PettingZoo module name such as "
                      f"tictactoe_v3, or a Gymnasium id such as CartPole-v1)")


def _check_options(table: Mapping[str, Any], schema: Mapping[str, str], section: str, path: str,
                   extra: str = "") -> None:
    for key, value in table.items():
        if key not in schema:
            raise RecipeError(f"{path}: [{section}] has no key {key!r}{_did_you_mean(key, schema)} "
                              f"(known: {', '.join(sorted(schema))}){extra}")
        kind = schema[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = (isinstance(value, int) and not isinstance(value, bool) and value >= 1) if kind == "positive" else \
            (number and value > 0) if kind == "positive number" else number
        if not ok:
            what = {"positive": "positive integer"}.get(kind, kind)
            raise RecipeError(f"{path}: [{section}] {key} must be a {what}, got {shown(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            what = "positive number" if kind == "positive number" else "number"
            raise RecipeError(f"{path}: [{section}] {key} must be a finite {what}, got {value!r}")
        limit = MAX_COUNT if kind == "positive" else MAX_MINUTES if kind == "positive number" else None
        if limit is not None and value > limit:
            meaning = " (a year)" if kind == "positive number" else ""
            raise RecipeError(f"{path}: [{section}] {key} must be at most {limit:,}{meaning}, got {shown(value)}")


def _check_budget(budget: Mapping[str, Any], path: str) -> None:
    _check_options(budget, _BUDGET, "budget", path)
    if not budget:
        raise RecipeError(f"{path}: [budget] needs env_steps, episodes or minutes")


def _check_agent(algo: str, agent: Mapping[str, Any], path: str) -> None:
    """Agent option names against the constructor of the algorithm's numpy core (no backend imported)."""
    params = inspect.signature(algorithm(algo).core_cls()).parameters  # the constructor's
    allowed = sorted(p for p in params if p not in ("self", "config", *_SET_ELSEWHERE))  # config: a dataclass
    for key, value in agent.items():
        if key not in allowed:
            raise RecipeError(f"{path}: [agent] {key!r} is no option of {algo}{_did_you_mean(key, allowed)}; "
                              f"it takes {', '.join(allowed)}")
        if key == "policy":
            _check_policy(value, path)
        if key == "torso" and value not in _named_torsos():  # a recipe is data: it never names code to import
            raise RecipeError(f"{path}: [agent] torso must be one of {', '.join(_named_torsos())}, got {value!r}; "
                              f"a recipe names no code (a user torso is passed from Python: DQN(..., torso=MyTorso))")


def _named_torsos() -> tuple[str, ...]:
    from marl_note.agents.encoders import TORSOS

    return TORSOS


def _check_policy(value: Any, path: str) -> None:
    from marl_note.agents.exploration import policies

    kind = value.get("type") if isinstance(value, dict) else None
    names = sorted(n for n in dir(policies) if n.endswith("Policy") and n != "Policy")
    if kind not in names:
        raise RecipeError(f"{path}: [agent.policy] needs type = one of {', '.join(names)}, got {kind!r}")
    params = inspect.signature(getattr(policies, kind).__init__).parameters
    for key in value:
        if key != "type" and key not in params:
            raise RecipeError(f"{path}: [agent.policy] {kind} takes no {key!r}")


def _check_wrapper(spec: Any, index: int, path: str) -> dict[str, Any]:
    name = spec.get("name") if isinstance(spec, dict) else None
    if not isinstance(name, str) or not (name in WRAPPERS or re.fullmatch(r"supersuit\.[a-z_]+_v\d+", name)):
        raise RecipeError(f"{path}: wrappers[{index}] needs name = with_agent_id, pad_seats or supersuit.<wrapper> "
                          f"(e.g. supersuit.resize_v1), got {spec!r}")
    options = set(spec) - {"name"}
    if name == "with_agent_id" and options:
        raise RecipeError(f"{path}: wrappers[{index}] with_agent_id takes no options, got {sorted(options)}")
    if name == "pad_seats" and not options <= {"observations", "actions"}:
        raise RecipeError(f"{path}: wrappers[{index}] pad_seats takes observations and actions, got {sorted(options)}")
    if name.startswith("supersuit."):
        from marl_note.cli.wrappers import check_supersuit_wrapper  # the fixed list --wrapper takes too

        try:
            check_supersuit_wrapper(name.partition(".")[2], sorted(options), f"{path}: wrappers[{index}]")
        except ValueError as exc:
            raise RecipeError(str(exc)) from None
    return dict(spec)


def _check_result(result: Mapping[str, Any], path: str) -> None:
    for key, value in result.items():
        if key not in _RESULT:
            raise RecipeError(f"{path}: [result] has no key {key!r}{_did_you_mean(key, _RESULT)} "
                              f"(known: {', '.join(_RESULT)})")
        if not isinstance(value, _RESULT[key]) or isinstance(value, bool):
            raise RecipeError(f"{path}: [result] {key} has the wrong type: {value!r}")
    status = result.get("status")
    if status not in _RESULT_STATUS:
        raise RecipeError(f"{path}: [result] needs status = \"measured\" or \"not measured\", got {status!r}")
    if status == "measured":
        missing = [k for k in ("date", "machine", "seeds", "metric") if k not in result]
        if missing:
            raise RecipeError(f"{path}: [result] a measured score states its {', '.join(missing)}")
