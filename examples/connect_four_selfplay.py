"""Connect four self-play with an opponent pool of frozen snapshots and Elo ratings.

The learner (a PyTorch DQN) plays both seats against frozen snapshots of itself (a new one joins
the pool every ``--snapshot-every`` games; the pool draws the snapshots it scores worst against
more often) and, in ``--fixed-fraction`` of its games, against two fixed opponents: a random
legal-move player and a random player that completes four in a row whenever it can. Those keep
the learner beating erratic play while its snapshots get strong (pure self-play forgets how to),
and the second one punishes every threat the learner leaves open, in random-looking positions.
Every stored move is also stored mirrored left-right (``DQN(augment=mirror)``): the board is
symmetric, so this doubles what each game teaches.
Every test rates the learner against the pool (Elo) and measures its strength against search
players (``KeepStrongest``): greedy games in both seats against a win-or-block player and
alpha-beta of depth 2, scored win 1, draw 0.5; the weights whose worst seat against the worst of
them scores best are saved (atomically) and restored at the end. Those selection games use other
seeds than the final measurement: ``--final-games`` fresh games per seat against a random player,
the win-or-block player and alpha-beta depth 2.

``--algo ppo`` trains PPO self-play instead (its conv or MLP actor-critic, an entropy bonus, the
same pool and selection). ``--opponents search`` replaces the random player among the fixed
opponents by two search players, win-or-block and alpha-beta of depth 1, beside the takes-wins
player (the selection and final games use other seeds of those players, so a win rate against
win-or-block then measures a player it trained against). ``--minutes`` bounds the training time.

Run:  python examples/connect_four_selfplay.py [--episodes N] [--seed S] [--algo ppo --torso conv]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

import numpy as np
import torch
from pettingzoo.classic import connect_four_v3

from marl_note.agents import RandomAgent
from marl_note.agents.torch import DQN, PPO
from marl_note.contrib.board_games import AlphaBetaPlayer, WinOrBlockPlayer
from marl_note.trainers import DecentralizedTrainer, KeepStrongest, OpponentPool, strength
from marl_note.types import Transitions

# the 69 lines of four cells on the 6 x 7 board, as flat cell indices
LINES = np.array([[(r + k * dr) * 7 + c + k * dc for k in range(4)]
                  for r in range(6) for c in range(7) for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1))
                  if 0 <= r + 3 * dr < 6 and 0 <= c + 3 * dc < 7])


def mirror(t: Transitions) -> Transitions:
    """The same moves on the left-right mirrored board (columns reversed): connect four is symmetric,
    so every stored transition teaches its mirror image too (``DQN(augment=mirror)``)."""
    def flip(m):
        return None if m is None else np.asarray(m)[:, ::-1].copy()

    return dataclasses.replace(t, obs=np.asarray(t.obs)[:, :, ::-1].copy(),
                               next_obs=np.asarray(t.next_obs)[:, :, ::-1].copy(),
                               act=6 - np.asarray(t.act), mask=flip(t.mask), next_mask=flip(t.next_mask))


class TakesWins:
    """A random legal-move player that completes four in a row when it can (a fixed pool opponent)."""

    def __init__(self, action_space, seed: int | None = None):
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, mask: np.ndarray, explore: bool = False) -> np.ndarray:
        actions = []
        for board, legal in zip(np.asarray(obs), np.asarray(mask, bool)):  # board[..., 0] = own pieces
            own, filled = board[..., 0].astype(bool), board.any(axis=-1)
            wins = []
            for col in np.flatnonzero(legal):
                after = own.copy()
                after[np.flatnonzero(~filled[:, col]).max(), col] = True  # the piece falls to the lowest free row
                if after.reshape(-1)[LINES].all(axis=1).any():
                    wins.append(col)
            actions.append(self.rng.choice(wins or np.flatnonzero(legal)))
        return np.asarray(actions, np.int64)


def make_learner(algo: str, obs_space, act_space, seed: int, torso: str, replay_ratio: float):
    """The learner of ``--algo``: the DQN this recipe was tuned with, or PPO with an entropy bonus."""
    if algo == "ppo":
        return PPO(obs_space, act_space, seed=seed, hidden_sizes=(256, 256), torso=torso, ent_coef=0.01,
                   n_steps=4096, n_epochs=4, lr=3e-4)
    if algo != "dqn":
        raise ValueError(f"algo must be 'dqn' or 'ppo', got {algo!r}")
    # gamma 0.9 rewards quick wins; lr 1e-4 with a slow target copy keeps Q below the +-1 rewards
    # (lr 1e-3 / target_update 100 let Q at the empty board climb past 1 and play got worse)
    return DQN(obs_space, act_space, seed=seed, hidden_sizes=(256, 256), torso=torso, lr=1e-4, gamma=0.9,
               buffer_size=200_000, learning_starts=2000, target_update=1000, num_steps=3,
               augment=mirror, replay_ratio=replay_ratio)


def train(episodes: int = 15000, seed: int = 0, snapshot_every: int = 2000, fixed_fraction: float = 0.7,
          plot: str | None = None, progress: bool = True, final_games: int = 200, replay_ratio: float = 0.5,
          select_games: int = 50, torso: str = "mlp", algo: str = "dqn", opponents: str = "weak",
          self_play_fraction: float = 0.0, minutes: float | None = None) -> dict:
    """Train, restore the best weights, and measure them; returns the figures the script prints and
    the kept ``learner``."""
    if opponents not in ("weak", "search"):
        raise ValueError(f"opponents must be 'weak' or 'search', got {opponents!r}")
    torch.set_num_threads(1)  # these small networks train fastest on one thread of a 2-core machine
    start = time.perf_counter()
    batch = 256 if algo == "ppo" else 128
    trainer = DecentralizedTrainer(connect_four_v3.env, num_train_envs=16, num_test_envs=16, batch_size=batch,
                                   update_freq=batch, test_freq=1000, episodes_per_train=episodes,
                                   episodes_per_test=50, seed=seed, plot_path=plot,
                                   reward_metric=lambda r: float(r[:, 0].mean()),
                                   stop_fn=None if minutes is None else
                                   lambda mean, episode: time.perf_counter() - start > 60 * minutes)
    obs_space, act_space = trainer.observation_space("player_0"), trainer.action_space("player_0")
    learner = make_learner(algo, obs_space, act_space, seed, torso, replay_ratio)
    random_player = RandomAgent(act_space, seed=seed)
    pool = OpponentPool(learner, trainer.spec, snapshot_every=snapshot_every, eval_episodes=16,
                        sampling="prioritized", fixed_fraction=fixed_fraction, self_play_fraction=self_play_fraction,
                        seed=seed)
    if opponents == "weak":
        pool.add(random_player, name="random")
    pool.add(TakesWins(act_space, seed=seed + 1), name="takes_wins")
    if opponents == "search":
        pool.add(WinOrBlockPlayer(seed=seed + 5), name="win-or-block")
        pool.add(AlphaBetaPlayer(1, seed=seed + 6), name="alpha-beta d1")
    with tempfile.TemporaryDirectory() as tmp:
        # selection games: their own players and seeds, not those of the final measurement
        best = KeepStrongest(learner, {"win-or-block": WinOrBlockPlayer(seed=seed + 20),
                                       "alpha-beta d2": AlphaBetaPlayer(2, seed=seed + 21)},
                             games=select_games, path=os.path.join(tmp, "best"))
        stats = trainer.train([learner, learner], learning_mask=[1, 1], matchmaker=pool, callbacks=[pool, best],
                              test_agents=[learner, random_player], plot=plot is not None, progress=progress)
        learner.restore_param(best.path)  # KeepStrongest restored them already; this reads its file back
    table = strength(trainer, learner, {"random": RandomAgent(act_space, seed=seed + 1),
                                        "win-or-block": WinOrBlockPlayer(seed=seed + 2),
                                        "alpha-beta d2": AlphaBetaPlayer(2, seed=seed + 3)}, final_games)
    trainer.close()
    first = min((n for n in stats["elo"] if n.startswith("snapshot_0")), default=None)
    return {"games": stats["num_collected_episodes"], "env_steps": stats["num_collected_steps"],
            "gradient_steps": stats["num_gradient_steps"], "seconds": time.perf_counter() - start,
            "elo": stats["elo"], "first_snapshot": first, "best_score": best.best_score,
            "best_episode": best.best_episode, "test_history": best.history, "final": table, "learner": learner}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=15000)
    parser.add_argument("--snapshot-every", type=int, default=2000)
    parser.add_argument("--fixed-fraction", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--final-games", type=int, default=200, help="final games per seat and opponent")
    parser.add_argument("--torso", choices=("mlp", "conv"), default="mlp",
                        help="the Q-network's torso: an MLP on the flat board, or 3x3 convolutions over it")
    parser.add_argument("--algo", choices=("dqn", "ppo"), default="dqn")
    parser.add_argument("--opponents", choices=("weak", "search"), default="weak",
                        help="fixed opponents: random + takes-wins, or takes-wins + win-or-block + alpha-beta d1")
    parser.add_argument("--self-play-fraction", type=float, default=0.0,
                        help="share of games with the learner in both seats")
    parser.add_argument("--minutes", type=float, default=None, help="training wall-time budget")
    parser.add_argument("--plot", default="runs/connect_four_selfplay.png")
    args = parser.parse_args()
    out = train(args.episodes, args.seed, args.snapshot_every, args.fixed_fraction, args.plot,
                final_games=args.final_games, torso=args.torso, algo=args.algo, opponents=args.opponents,
                self_play_fraction=args.self_play_fraction, minutes=args.minutes)
    worst, mean = out["best_score"]
    print(f"{out['games']} games, {out['env_steps']} env steps, {out['gradient_steps']} gradient steps, "
          f"{out['seconds']:.0f} s (kept the weights of episode {out['best_episode']}: selection score "
          f"worst {worst:.3f}, mean {mean:.3f})")
    print("Elo:", {k: round(v) for k, v in sorted(out["elo"].items(), key=lambda kv: -kv[1])})
    if out["first_snapshot"]:
        print(f"final learner Elo {out['elo']['learner']:.0f} vs first snapshot "
              f"{out['elo'][out['first_snapshot']]:.0f}")
    for name, seats in out["final"].items():
        for seat, r in seats.items():
            print(f"kept learner as {seat} vs {name:13s} win {r['win']:6.1%}  draw {r['draw']:6.1%}  "
                  f"loss {r['loss']:6.1%}")


if __name__ == "__main__":
    main()
