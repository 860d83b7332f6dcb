"""Playing strength of the self-play recipes against search players (not part of the test suite).

Trains (or loads) the current recipes' learners and reports win / draw / loss in each seat:

- connect four: the DQN of ``examples/connect_four_selfplay.py`` trained for ``--episodes`` games
  (its kept weights), against a random legal-move player, ``WinOrBlockPlayer`` and
  ``AlphaBetaPlayer(depth=2)`` (and deeper with ``--depths 2,4``);
- tic-tac-toe: the DQN of ``examples/tictactoe_selfplay.py`` (``make demo``) trained for
  ``--ttt-episodes`` games, against a random player, ``WinOrBlockPlayer`` and
  ``PerfectTicTacToePlayer`` (the goal: zero losses to the perfect player);
- connect four AlphaZero (only with ``--game alphazero``): ``examples/connect_four_alphazero.py``
  trained for ``--az-minutes`` of wall time, against ``AlphaBetaPlayer`` of depth 2 and 4 (the
  target: >= 0.80 as first player against depth 4 after 30 minutes on 2 cores); then its policy
  network alone (``agent.network_player()``, no search) against random, win-or-block and both depths.

``--games`` greedy games per seat against each opponent (default 200). ``--save-dir DIR`` keeps
the trained learners (``DIR/connect_four``, ``DIR/tictactoe``); ``--load-dir DIR`` measures those
instead of training. The issue's targets (#14): connect four >= 0.90 as first player and >= 0.70
as second against win-or-block, >= 0.60 against alpha-beta depth 2; tic-tac-toe no loss to the
perfect player.

Run:  python bench/bench_strength.py [--game both] [--episodes 15000] [--ttt-episodes 8000] [--seed 0]
      python bench/bench_strength.py --game alphazero [--az-minutes 30] [--games 100]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # numpy acting on small batches: BLAS threads only contend

from pettingzoo.classic import connect_four_v3, tictactoe_v3

from marl_note.agents import RandomAgent
from marl_note.agents.checkpoints import restore
from marl_note.contrib.board_games import AlphaBetaPlayer, PerfectTicTacToePlayer, WinOrBlockPlayer
from marl_note.trainers import DecentralizedTrainer

HERE = os.path.dirname(os.path.abspath(__file__))


def load_example(name: str):
    path = os.path.join(HERE, os.pardir, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def strength(make_env, learner, opponents: dict, games: int, seed: int) -> dict[str, dict[str, dict[str, float]]]:
    """``{opponent: {seat: {win, draw, loss, ...}}}`` over ``games`` greedy games per seat."""
    trainer = DecentralizedTrainer(make_env, num_test_envs=16, seed=seed)
    try:
        out = {}
        for name, opponent in opponents.items():
            start = time.perf_counter()
            out[name] = trainer.test_against(learner, opponent=opponent, episodes=2 * games)["per_seat"]
            out[name]["seconds"] = time.perf_counter() - start
        return out
    finally:
        trainer.close()


def report(title: str, table: dict) -> None:
    print(title)
    for name, seats in table.items():
        cells = "; ".join(f"as {seat}: win {r['win']:.1%} draw {r['draw']:.1%} loss {r['loss']:.1%}"
                          for seat, r in seats.items() if seat != "seconds")
        print(f"  vs {name:14s} {cells}  ({seats['seconds']:.0f} s)", flush=True)


def connect_four(args) -> None:
    example = load_example("connect_four_selfplay")
    path = os.path.join(args.load_dir or args.save_dir or "", "connect_four")
    if args.load_dir:
        learner, how = restore(path, augment=example.mirror), f"loaded from {path}"
    else:
        out = example.train(args.episodes, args.seed, progress=False, final_games=2)
        learner = out["learner"]
        how = (f"trained {out['games']} games, {out['gradient_steps']} gradient steps, {out['seconds']:.0f} s, "
               f"kept the weights of episode {out['best_episode']} by strength vs win-or-block and alpha-beta d2 "
               f"(worst {out['best_score'][0]:.2f})")
        if args.save_dir:
            learner.save(path)
    space = learner.action_space
    opponents = {"random": RandomAgent(space, seed=args.seed + 1), "win-or-block": WinOrBlockPlayer(seed=args.seed + 2)}
    for depth in (int(d) for d in args.depths.split(",")):
        opponents[f"alpha-beta d{depth}"] = AlphaBetaPlayer(depth, seed=args.seed + 3 + depth)
    report(f"connect four DQN ({how}), {args.games} games per seat:",
           strength(connect_four_v3.env, learner, opponents, args.games, args.seed))


def tictactoe(args) -> None:
    path = os.path.join(args.load_dir or args.save_dir or "", "tictactoe")
    example = load_example("tictactoe_selfplay")
    if args.load_dir:
        learner, how = restore(path, augment=example.symmetries), f"loaded from {path}"
    else:
        learner, trainer, stats = example.train(args.ttt_episodes, args.seed, plot=None, progress=False)
        trainer.close()
        how = (f"trained {stats['num_collected_episodes']} games, {stats['num_gradient_steps']} gradient steps, "
               f"{stats['training_time']:.0f} s, kept the weights of episode {stats['strength']['best_episode']}")
        if args.save_dir:
            learner.save(path)
    opponents = {"random": RandomAgent(learner.action_space, seed=args.seed + 1),
                 "win-or-block": WinOrBlockPlayer("tictactoe", seed=args.seed + 2),
                 "perfect": PerfectTicTacToePlayer(seed=args.seed + 3)}
    report(f"tic-tac-toe DQN ({how}), {args.games} games per seat:",
           strength(tictactoe_v3.env, learner, opponents, args.games, args.seed))


def alphazero(args) -> None:
    path = os.path.join(args.load_dir or args.save_dir or "", "connect_four_alphazero")
    if args.load_dir:
        agent, how = restore(path), f"loaded from {path}"
    else:
        out = load_example("connect_four_alphazero").train(args.az_minutes, seed=args.seed, progress=False)
        agent = out["agent"]
        how = (f"trained {out['games']} games, {out['gradient_steps']} gradient steps, {out['seconds']:.0f} s, "
               f"final weights")
        if args.save_dir:
            agent.save(path)
    opponents = {f"alpha-beta d{d}": AlphaBetaPlayer(d, seed=args.seed + 3 + d) for d in (2, 4)}
    report(f"connect four AlphaZero ({how}), {args.games} games per seat:",
           strength(connect_four_v3.env, agent, opponents, args.games, args.seed))
    # the same network without its search, against the opponents of the DQN/PPO learners' targets too
    opponents = {"random": RandomAgent(agent.action_space, seed=args.seed + 1),
                 "win-or-block": WinOrBlockPlayer(seed=args.seed + 2), **opponents}
    report(f"its policy network alone (no search, the legal move of highest prior), {args.games} games per seat:",
           strength(connect_four_v3.env, agent.network_player(), opponents, args.games, args.seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", choices=("both", "connect_four", "tictactoe", "alphazero"), default="both")
    parser.add_argument("--episodes", type=int, default=15000, help="connect four training games")
    parser.add_argument("--ttt-episodes", type=int, default=8000, help="tic-tac-toe training games")
    parser.add_argument("--games", type=int, default=200, help="evaluation games per seat and opponent")
    parser.add_argument("--depths", default="2", help="alpha-beta depths to play, comma-separated")
    parser.add_argument("--az-minutes", type=float, default=30.0, help="AlphaZero training wall time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-dir", default=None, help="save the trained learners here")
    parser.add_argument("--load-dir", default=None, help="measure learners saved with --save-dir instead of training")
    args = parser.parse_args()
    if args.load_dir and args.save_dir:
        parser.error("--load-dir and --save-dir exclude each other")
    if min(args.episodes, args.ttt_episodes, args.games) < 1:
        parser.error("--episodes, --ttt-episodes and --games must be >= 1")
    import torch

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__} (1 thread); seed {args.seed}", flush=True)
    if args.game in ("both", "tictactoe"):
        tictactoe(args)
    if args.game in ("both", "connect_four"):
        connect_four(args)
    if args.game == "alphazero":
        alphazero(args)


if __name__ == "__main__":
    main()
