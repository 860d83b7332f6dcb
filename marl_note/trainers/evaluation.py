"""Testing one agent against a fixed baseline in every seat.

In self-play on a constant-sum game (tic-tac-toe, chess, poker: the seats' returns always add up
to the same number) a learner tested against itself always scores that constant, so its test
metric says nothing. :func:`evaluate_against` instead seats the agent in each seat in turn, with a
fixed baseline (a random legal-move player unless given) in the other seats, and reports the
agent's own return, seat by seat. :class:`~marl_note.trainers.trainer.DecentralizedTrainer` uses it
for its periodic tests when one learner holds every seat and no ``test_agents`` are given (see
:func:`use_baseline`).

Example:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.agents import RandomAgent
    >>> from marl_note.trainers import DecentralizedTrainer
    >>> trainer = DecentralizedTrainer(tictactoe_v3.env, num_test_envs=2, seed=0)
    >>> player = RandomAgent(trainer.action_space("player_1"), seed=1)
    >>> result = trainer.test_against(player, episodes=20)
    >>> sorted(result["per_seat"]), result["num_collected_episodes"]
    (['player_1', 'player_2'], 20)
    >>> -1.0 <= result["reward"] <= 1.0
    True
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.trainers.seats import can_act

__all__ = ["evaluate_against", "baseline_opponents", "is_constant_sum", "use_baseline", "seat_outcomes"]


def baseline_opponents(spec: Any, opponent: Any = None, seed: int | None = None) -> dict[str, Any]:
    """One opponent per seat: ``opponent`` itself (an agent), a ``{seat: agent}`` dict, or random players."""
    from marl_note.agents.base import RandomAgent  # numpy only

    seats = list(spec.possible_agents)
    if opponent is None or (isinstance(opponent, str) and opponent == "random"):
        return {a: RandomAgent(spec.action_space(a), seed=None if seed is None else seed + 31 * k)
                for k, a in enumerate(seats)}
    if isinstance(opponent, Mapping):
        missing = [a for a in seats if a not in opponent]
        if missing:
            raise ValueError(f"baseline opponents dict has no agent for seats {missing}")
        return {a: opponent[a] for a in seats}
    if not can_act(opponent):
        raise TypeError(f"a baseline opponent needs an act(obs, mask, explore) method; got {type(opponent).__name__}")
    return {a: opponent for a in seats}


def seat_outcomes(rewards: np.ndarray, seat: int) -> dict[str, float]:
    """Mean return of ``seat`` and how often it finished above / level with / below the best other seat."""
    rewards = np.asarray(rewards, dtype=np.float64)
    own = rewards[:, seat]
    if rewards.shape[1] > 1:
        best_other = np.delete(rewards, seat, axis=1).max(axis=1)
    else:
        best_other = np.zeros_like(own)
    return {"mean_return": float(own.mean()) if len(own) else float("nan"),
            "win": float((own > best_other).mean()) if len(own) else float("nan"),
            "draw": float((own == best_other).mean()) if len(own) else float("nan"),
            "loss": float((own < best_other).mean()) if len(own) else float("nan"),
            "episodes": int(len(own))}


def evaluate_against(trainer: Any, agent: Any, opponents: Mapping[str, Any], episodes: int) -> dict[str, Any]:
    """Greedy games of ``agent`` in each seat in turn, ``opponents[seat]`` everywhere else.

    ``episodes`` are shared evenly over the seats (at least one each). Returns ``reward`` (the
    metric: the trainer's ``reward_metric`` of each seat's block of games, averaged over seats,
    when it has one, else the agent's mean return over all games), ``per_seat`` (:func:`seat_outcomes` of each seat),
    ``rewards`` (``[episodes, num_agents]``, every game's returns), ``learner_seat`` (the agent's
    seat in each of those games) and the usual counters.
    """
    names = list(trainer.spec.possible_agents)
    n = len(names)
    share = [episodes // n + (1 if k < episodes % n else 0) for k in range(n)]
    share = [max(1, s) for s in share]
    blocks, per_seat, metrics, steps, lengths = [], {}, [], 0, []
    for k, seat in enumerate(names):
        seats = [agent if j == k else opponents[other] for j, other in enumerate(names)]
        res = trainer.test(seats, episodes=share[k], learning_mask=[j == k for j in range(n)])
        block = res["rewards"]
        blocks.append(block)
        per_seat[seat] = seat_outcomes(block, k)
        if len(block):  # a budget can end a test before a seat's block finished a game
            metrics.append(res["reward"])
            lengths.append(res["mean_num_steps"] * len(block))
        steps += res["num_collected_steps"]
    rewards = np.concatenate(blocks, axis=0)
    learner_seat = np.concatenate([np.full(len(b), k) for k, b in enumerate(blocks)])
    own = rewards[np.arange(len(rewards)), learner_seat]
    if not len(rewards):  # a budget ended the test before any game did: no figure, and no numpy warning
        reward = std = mean_steps = float("nan")
    else:
        reward = float(np.mean(metrics)) if trainer.reward_metric is not None else float(own.mean())
        std, mean_steps = float(own.std()), float(np.sum(lengths) / len(rewards))
    return {"reward": reward, "per_seat": per_seat, "rewards": rewards, "learner_seat": learner_seat,
            "reward_std": std, "mean_num_steps": mean_steps,
            "num_collected_steps": steps, "num_collected_episodes": int(len(rewards))}


def is_constant_sum(returns: np.ndarray, atol: float = 1e-6) -> bool:
    """True if every episode's returns add up to the same number (zero-sum and constant-sum games)."""
    returns = np.asarray(returns, dtype=np.float64)
    if returns.ndim != 2 or returns.shape[1] < 2 or len(returns) == 0:
        return False
    totals = returns.sum(axis=1)
    return bool(np.all(np.abs(totals - totals[0]) <= atol * max(1.0, float(np.abs(returns).max()))))


def use_baseline(baseline: Any, seats: list[Any], test_agents: Any, returns: np.ndarray) -> bool:
    """Whether a run's periodic tests play the learner against the baseline instead of ``test_agents``.

    Only when no ``test_agents`` are given and one object holds every seat of a multi-seat env;
    then with ``baseline="auto"`` only if the game is constant-sum (judged from the training
    episodes so far: a cooperative game, where one shared policy in every seat is the point, keeps
    testing the team), with an explicit baseline always, with ``baseline=None`` never.
    """
    if test_agents is not None or baseline is None or len(seats) < 2:
        return False
    if not all(s is seats[0] for s in seats):
        return False
    if isinstance(baseline, str) and baseline == "auto":
        return is_constant_sum(returns)
    return True
