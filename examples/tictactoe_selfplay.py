"""Tic-tac-toe self-play DQN, kept by its strength against search players (the demo: ``make demo``).

One DQN learns both seats. Each training game it plays itself (``self_play``: half of the games,
both seats learning), a frozen snapshot of itself (a new one every ``snapshot_every`` games; the
snapshots it scores worst against are drawn more often: prioritized fictitious self-play) or, in a
minority of the games (``fixed_fraction``: 20%), a fixed player: a win-or-block player (wins when
it can, blocks an immediate loss, otherwise plays at random) or the perfect player
(``train_vs_perfect``), drawn by the same priorities. Every stored move is also stored on the 7
rotated and reflected boards (``DQN(augment=symmetries)``). Exploration: epsilon from 1 to 0.1
over 20k moves, for the learner and its opponents.

At every test the learner plays 100 greedy games per seat against a win-or-block player and the
perfect player; the weights whose worst seat against the worst of them scores best (win 1, draw
0.5; the mean breaks ties) are kept and restored at the end (``KeepStrongest``). Those selection
games use other players and seeds than the final evaluation, which plays 200 fresh games per seat
against a random player, a win-or-block player and the perfect player (the goal: no losses to
it; a draw is the best anyone can do against it).

The run is deterministic for a given ``--seed`` on a given machine and library version.

Run:  python examples/tictactoe_selfplay.py  [--episodes N] [--seed S]
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from pettingzoo.classic import tictactoe_v3

from marl_note.agents import EpsGreedyQPolicy, RandomAgent
from marl_note.agents.torch import DQN
from marl_note.contrib.board_games import PerfectTicTacToePlayer, WinOrBlockPlayer
from marl_note.trainers import DecentralizedTrainer, KeepStrongest, OpponentPool, strength
from marl_note.types import Transitions


def _symmetry_permutations() -> np.ndarray:
    """The 7 rotations and reflections of the 3 x 3 board other than the identity, as ``[7, 9]``
    permutations of the flat cells: the transformed board's cell ``p`` is the original's cell
    ``perm[p]`` (PettingZoo's action ``a`` is the flat cell ``a`` of the observation)."""
    cells = np.arange(9).reshape(3, 3)
    perms = [np.rot90(cells, k).T.ravel() if flip else np.rot90(cells, k).ravel()
             for k in range(4) for flip in (False, True)]
    return np.stack(perms[1:])


PERMUTATIONS = _symmetry_permutations()
INVERSE = np.argsort(PERMUTATIONS, axis=1)  # INVERSE[i][a]: where cell a goes under permutation i


def symmetries(t: Transitions) -> list[Transitions]:
    """The same moves on the 7 rotated and reflected boards (``DQN(augment=symmetries)``): the game
    does not change under them, so every stored move teaches eight."""
    def board(x, perm):
        x = np.asarray(x)
        return x.reshape(len(x), 9, -1)[:, perm].reshape(x.shape)

    def cells(m, perm):
        return None if m is None else np.asarray(m)[:, perm]

    return [dataclasses.replace(t, obs=board(t.obs, perm), next_obs=board(t.next_obs, perm), act=inv[np.asarray(t.act)],
                                mask=cells(t.mask, perm), next_mask=cells(t.next_mask, perm))
            for perm, inv in zip(PERMUTATIONS, INVERSE)]


def train(episodes: int = 8000, seed: int = 0, plot: str | None = "runs/tictactoe_selfplay.png",
          progress: bool = True, self_play: float = 0.5, fixed_fraction: float = 0.2,
          snapshot_every: int = 500, select_games: int = 100, test_freq: int = 500, eps_min: float = 0.1,
          eps_steps: int = 20_000, opponent_explore: bool = True, train_vs_perfect: bool = True, **dqn_options):
    """Train the self-play DQN and restore its strongest weights; returns ``(learner, trainer, stats)``
    (the caller closes the trainer). ``stats["strength"]`` tells which weights were kept."""
    torch.set_num_threads(1)  # these small MLPs train fastest on one thread of a 2-core machine
    trainer = DecentralizedTrainer(tictactoe_v3.env, num_train_envs=16, num_test_envs=16, batch_size=64,
                                   update_freq=100, test_freq=test_freq, episodes_per_train=episodes,
                                   episodes_per_test=20, seed=seed, plot_path=plot)
    options = dict(hidden_sizes=(128, 128), lr=1e-3, gamma=0.99, buffer_size=200_000, learning_starts=1000,
                   target_update=250, replay_ratio=0.5, augment=symmetries,
                   policy=EpsGreedyQPolicy(1.0, eps_min, eps_steps))
    options.update(dqn_options)
    learner = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), seed=seed, **options)
    pool = OpponentPool(learner, trainer.spec, snapshot_every=snapshot_every, sampling="prioritized",
                        self_play_fraction=self_play, fixed_fraction=fixed_fraction, eval_episodes=4, seed=seed,
                        opponent_explore=opponent_explore)
    pool.add(WinOrBlockPlayer("tictactoe", seed=seed + 10), name="win-or-block")
    if train_vs_perfect:
        pool.add(PerfectTicTacToePlayer(seed=seed + 11), name="perfect")
    # selection games: their own players and seeds, not those of the final evaluation
    keep = KeepStrongest(learner, {"win-or-block": WinOrBlockPlayer("tictactoe", seed=seed + 20),
                                   "perfect": PerfectTicTacToePlayer(seed=seed + 21)}, games=select_games)
    stats = trainer.train([learner, learner], learning_mask=[1, 1], matchmaker=pool, callbacks=[pool, keep],
                          plot=plot is not None, progress=progress)
    return learner, trainer, stats


def evaluate(trainer: DecentralizedTrainer, learner, seed: int = 0, games: int = 200) -> dict:
    """``{opponent: {seat: {win, draw, loss, ...}}}`` over ``games`` fresh greedy games per seat."""
    opponents = {"random": RandomAgent(learner.action_space, seed=seed + 1),
                 "win-or-block": WinOrBlockPlayer("tictactoe", seed=seed + 2),
                 "perfect": PerfectTicTacToePlayer(seed=seed + 3)}
    return strength(trainer, learner, opponents, games)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8000, help="training episodes (self-play games)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--games", type=int, default=200, help="evaluation games per seat and opponent")
    parser.add_argument("--plot", default="runs/tictactoe_selfplay.png")
    args = parser.parse_args()
    start = time.perf_counter()
    learner, trainer, stats = train(args.episodes, args.seed, args.plot)
    kept = stats["strength"]
    print(f"trained {stats['num_collected_episodes']} games, {stats['num_collected_steps']} env steps, "
          f"{stats['num_gradient_steps']} gradient steps in {stats['training_time']:.0f} s; kept the weights "
          f"of episode {kept['best_episode']} (selection score: worst {kept['best_score'][0]:.3f}, "
          f"mean {kept['best_score'][1]:.3f})")
    table = evaluate(trainer, learner, args.seed, args.games)
    for name, seats in table.items():
        for seat, r in seats.items():
            print(f"DQN as {seat} vs {name:13s} win {r['win']:6.1%}  draw {r['draw']:6.1%}  loss {r['loss']:6.1%}")
    print(f"total {time.perf_counter() - start:.0f} s")
    if "plot_path" in stats:
        print(f"plot: {stats['plot_path']}")
    trainer.close()


if __name__ == "__main__":
    main()
