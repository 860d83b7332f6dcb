"""What the command line reports about trained agents: each seat's results against given opponents.

Shared by ``train`` and ``evaluate`` (:mod:`marl_note.cli.commands`) and the zoo's runs
(:mod:`marl_note.cli.zoo_run`). Board games are reported as win/draw/loss per seat, other envs as
mean returns.

Example:
    >>> from marl_note.types import EnvSpec
    >>> import gymnasium as gym
    >>> spec = EnvSpec(("a", "b"), {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)},
    ...                {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}, turn_based=True,
    ...                has_action_mask=False)
    >>> is_board_game(spec)
    True
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["is_board_game", "random_players", "seat_results"]


def is_board_game(spec: Any) -> bool:
    """Turn-based with several seats (the classic games): reported as win/draw/loss per seat."""
    return bool(spec.turn_based and spec.num_agents > 1)


def random_players(spec: Any, seed: int | None) -> dict[str, Any]:
    from marl_note.trainers.evaluation import baseline_opponents

    return baseline_opponents(spec, "random", seed=None if seed is None else seed + 55_555)


def seat_results(trainer: Any, ours: Mapping[str, Any], theirs: Mapping[str, Any], episodes: int) -> dict[str, Any]:
    """Greedy games of ``ours`` (``{seat: agent}``) with ``theirs`` in the remaining seats.

    Board games: ``{seat: {mean_return, win, draw, loss, episodes}}`` for each seat of ``ours``,
    each seat playing ``episodes`` games with ``theirs`` in every other seat (one agent in every
    seat: ``trainer.test_against``). Other envs: one test of ``episodes`` episodes,
    ``{seat: {mean_return, episodes}}``.
    """
    from marl_note.trainers.evaluation import seat_outcomes

    spec, names = trainer.spec, list(trainer.possible_agents)
    if not is_board_game(spec):
        res = trainer.test([ours.get(s, theirs.get(s)) for s in names], episodes=episodes)
        return {s: {"mean_return": float(res["rewards"][:, k].mean()), "episodes": int(len(res["rewards"]))}
                for k, s in enumerate(names)}
    agents = list(ours.values())
    if len(ours) == len(names) and all(a is agents[0] for a in agents):
        return trainer.test_against(agents[0], opponent=dict(theirs), episodes=episodes * len(names))["per_seat"]
    out = {}
    for k, seat in enumerate(names):
        if seat in ours:
            res = trainer.test([ours[s] if s == seat else theirs[s] for s in names], episodes=episodes,
                               learning_mask=[s == seat for s in names])
            out[seat] = seat_outcomes(res["rewards"], k)
    return out
