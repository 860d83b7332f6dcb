"""The zoo on the command line: ``train --env NAME`` without ``--algo`` takes the recipe's values; ``zoo`` lists them.

:func:`apply_recipe` fills the options of ``train`` that were not given from the recipe (the
parser leaves them None), then the remaining ones from the parser's documented defaults, so an
explicit flag always wins. ``--agent-arg`` and ``--env-arg`` are merged key by key over the
recipe's ``[agent]`` and ``[env_kwargs]``.

Example:
    >>> from marl_note.cli.parser import build_parser
    >>> args = build_parser().parse_args(["train", "--env", "tictactoe_v3", "--episodes", "10"])
    >>> apply_recipe(args).label, args.algo, args.self_play, args.episodes, args.num_envs
    ('tictactoe_v3 v1', 'dqn', True, 10, 16)
    >>> args = build_parser().parse_args(["train", "--env", "tictactoe_v3", "--algo", "ppo"])
    >>> apply_recipe(args) is None, args.episodes  # --algo given: no recipe, the usual defaults
    (True, 5000)
    >>> args = build_parser().parse_args(["train", "--recipe", "tictactoe_v3", "--env", "connect_four_v3"])
    >>> apply_recipe(args).label, args.env, args.algo  # a recipe's settings on another env
    ('tictactoe_v3 v1 on connect_four_v3', 'connect_four_v3', 'dqn')
"""
from __future__ import annotations

import json
import os
from typing import Any

from marl_note.cli.common import CLIError
from marl_note.cli.parser import TRAIN_DEFAULTS
from marl_note.cli.plugins import algorithm_names
from marl_note.cli.zoo import Recipe, load_recipe, recipe, recipes
from marl_note.cli.zoo_run import EPISODE_CAP

__all__ = ["apply_recipe", "budget_text", "zoo"]

_FROM_TRAINER = ("num_envs", "batch_size", "update_freq", "test_freq", "test_episodes", "stop_reward", "processes")


def apply_recipe(args: Any) -> Recipe | None:
    """Fill ``train``'s options in ``args`` (in place) from the recipe it names; returns that recipe or None."""
    chosen = None
    if args.recipe is not None:
        chosen = _find_recipe(args.recipe)
        if args.env is not None and args.env != chosen.env:  # the recipe's settings on another env
            chosen = chosen.on_env(args.env)
    elif args.env is None:
        raise CLIError("--env is required (or --recipe FILE; python -m marl_note zoo lists the zoo's recipes)")
    elif args.algo is None:
        try:
            chosen = recipe(args.env)
        except CLIError as exc:
            raise CLIError(f"{exc}. Give --algo ({', '.join(algorithm_names())}) to train without a "
                           f"recipe") from None
    if chosen is not None:
        args.env = chosen.env
        args.algo = args.algo or chosen.algo
        if chosen.seats == "self-play" and args.opponent is None:
            args.self_play = True
        args.env_arg = [f"{k}={json.dumps(v)}" for k, v in chosen.env_kwargs.items()] + list(args.env_arg or [])
        for key in _FROM_TRAINER:
            if getattr(args, key) is None:
                setattr(args, key, chosen.trainer.get(key))
        budget = chosen.budget
        args.env_steps = budget.get("env_steps") if args.env_steps is None else args.env_steps
        args.minutes = budget.get("minutes") if args.minutes is None else args.minutes
        if args.episodes is None:
            args.episodes = budget.get("episodes", EPISODE_CAP)
        if args.seed is None:
            args.seed = chosen.seeds[0]
    for key, value in TRAIN_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return chosen


def _find_recipe(name_or_file: str) -> Recipe:
    """``--recipe``: a TOML file, else the name of a shipped recipe."""
    if name_or_file.endswith(".toml") or os.sep in name_or_file or os.path.exists(name_or_file):
        return load_recipe(name_or_file)
    return recipe(name_or_file)


def budget_text(args: Any) -> str:
    """``"5000 episodes"``, ``"100000 env steps or 15 minutes"``: the limits of this run."""
    parts = [] if args.episodes >= EPISODE_CAP else [f"{args.episodes} episodes"]
    if args.env_steps is not None:
        parts.append(f"{args.env_steps} env steps")
    if args.minutes is not None:
        parts.append(f"{args.minutes:g} minutes")
    return " or ".join(parts)


def _result_text(r: Recipe) -> str:
    res = r.result
    if res.get("status") != "measured":
        return "not measured"
    score = f"{res['mean']:.3g}" if "mean" in res else ""
    spread = f" +- {res['std']:.2g}" if "std" in res else ""
    rnd = f" (random {res['random']:.3g})" if "random" in res else ""
    if "per_seat" in res:  # board games: each seat's win rate against a random player
        score = " / ".join(f"{v.get('win', float('nan')):.0%}" for v in res["per_seat"].values()) + " won"
        spread = rnd = ""
    return f"{score}{spread}{rnd}, seeds {res['seeds']}, {res['date']}" + (" (see its note)" if "note" in res else "")


def zoo(args: Any) -> int:
    """``zoo``: list the recipes, or print one recipe file."""
    if getattr(args, "name", None):
        with open(recipe(args.name).path, encoding="utf-8") as f:
            print(f.read(), end="")
        return 0
    rows = [(r.name, f"v{r.version}", r.algo, r.seats, " / ".join(f"{v} {k.replace('_', ' ')}"
                                                                   for k, v in r.budget.items()), _result_text(r))
            for r in recipes()]
    header = ("env", "version", "algo", "seats", "budget", "result")
    widths = [max(len(str(row[k])) for row in [header, *rows]) for k in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    print("\ntrain one: python -m marl_note train --env NAME (flags override the recipe); "
          "show one: python -m marl_note zoo NAME")
    return 0
