"""The argument parser of ``python -m marl_note`` (argparse; no env, agent or framework is imported here).

The ``--algo`` choices and their help come from the algorithm registry (:mod:`marl_note.cli.plugins`).

Example:
    >>> args = build_parser().parse_args(["train", "--env", "tictactoe_v3", "--algo", "dqn", "--self-play"])
    >>> args.command, args.backend, args.self_play
    ('train', 'torch', True)
    >>> args.episodes is None  # not given: the recipe's value, else TRAIN_DEFAULTS["episodes"]
    True
"""
from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable

from marl_note.cli.plugins import algorithm, algorithm_names

__all__ = ["TRAIN_DEFAULTS", "build_parser"]

# train options a zoo recipe may set: None on the parsed namespace means "not given" (recipe value, else this)
TRAIN_DEFAULTS = {"episodes": 5000, "num_envs": 16, "batch_size": 64, "update_freq": 100, "test_episodes": 50,
                  "seed": 0}

DESCRIPTION = """Train, evaluate and play marl_note agents on PettingZoo and Gymnasium envs.

  python -m marl_note train --env connect_four_v3 --algo dqn --self-play --backend tf --episodes 5000
  python -m marl_note evaluate --env connect_four_v3 --checkpoint runs/connect_four_v3-dqn
  python -m marl_note play --env connect_four_v3 --checkpoint runs/connect_four_v3-dqn --seat player_1
  python -m marl_note train --env CartPole-v1    # no --algo: the zoo's recipe for the env
  python -m marl_note zoo                         # the zoo's recipes

Run `python -m marl_note COMMAND --help` for the options of each command."""

TRAIN_EPILOG = """seats:
  --self-play          one agent in every seat, all learning (needs the seats to share their spaces)
  (default)            one independent learning agent per seat
  --opponent random    one learner in --seat (default: the first seat), a random legal-move player in
                       the other seats; --opponent DIR puts a trained checkpoint there instead
  --algo maddpg        one joint learner with an actor per seat (Parallel envs such as MPE)
  --algo vdn|qmix      value decomposition: one joint learner of every seat's Q-network and a mixer,
                       an actor per seat (Parallel envs with Discrete actions)

envs: PettingZoo classic (tictactoe_v3, connect_four_v3, ...), MPE from the mpe2 package
(simple_spread_v3, ...), butterfly, sisl and atari names (or registry ids: butterfly/pistonball-v6),
and Gymnasium ids (CartPole-v1, Pendulum-v1), as the installed packages list them. Classic games are
turn-based; MPE/butterfly/sisl/atari envs run as Parallel envs.

{algorithms}
Agent options: --agent-arg KEY=VALUE, e.g. --agent-arg 'hidden_sizes=[128, 128]'
--agent-arg lr=5e-4 (values are Python literals: True, None, 3, [64, 64]; a bare word such as 8x8 is text).

wrappers: --wrapper NAME[:KEY=VALUE,...] puts a SuperSuit wrapper around the env (repeatable, in order),
e.g. for pixel envs --wrapper color_reduction_v0:mode=B --wrapper resize_v1:x_size=84,y_size=84
--wrapper frame_stack_v1:stack_size=4. Only SuperSuit's wrappers with plain options are taken (values:
Python literals, or a bare word as text); evaluate and play wrap the env the same way.

zoo recipes: without --algo, train uses the zoo's recipe for --env (python -m marl_note zoo lists them;
--recipe FILE takes your own TOML file): its algorithm, seats, wrappers, agent and trainer options and
budget (--env-steps, --minutes, --episodes: whichever ends first). Flags given explicitly override the
recipe's values (--agent-arg and --env-arg key by key). With --algo no recipe is used. --recipe NAME|FILE
with another --env trains that recipe's settings on --env (its env arguments, stop reward and result
stay with its own env).

output: --out DIR (default runs/ENV-ALGO) gets one checkpoint per distinct agent (agent.save()) in
DIR/last (the weights at the end) and in DIR/best (the weights of the best periodic test), and
marl_note_run.json; it must be new, empty or an earlier run directory (whose files are replaced).
evaluate and play use the best weights unless --which last. The summary plays the trained
agent(s) against a random player in each seat of a board game (--eval-episodes games per seat)."""


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse ``type``: the text as an int of at least ``minimum``, else an error saying it must be ``what``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {value}")
        return value
    return parse


_positive = _int_at_least(1, "positive")
_non_negative = _int_at_least(0, "non-negative")


def _env_options(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--env", required=required, metavar="NAME",
                   help="env name: a PettingZoo/MPE module name (tictactoe_v3, simple_spread_v3) or registry id "
                        "(butterfly/pistonball-v6), a Gymnasium id, or a two-player zero-sum OpenSpiel game "
                        "(openspiel/kuhn_poker; train and evaluate print its exact exploitability) or a fully "
                        "cooperative one (openspiel/hanabi: a Parallel env, every seat acting each step)"
                        + ("" if required else "; default: the env the checkpoint's run was trained on"))
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE",
                   help="an argument of the env's factory, e.g. max_cycles=25; for OpenSpiel games "
                        "observation=information_state or a game parameter (repeatable)")


def _algorithms_help() -> str:
    """Each registered algorithm with the actions it takes (and whether it is one joint learner)."""
    parts = []
    for name in algorithm_names():
        entry = algorithm(name)
        where = ", one learner over every seat of a Parallel env" if entry.joint else ""
        parts.append(f"{name} ({' or '.join(entry.actions)} actions{where})")
    return textwrap.fill(f"algorithms: {', '.join(parts)}.", 100)


def _threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=_positive, metavar="N",
                   help="intra-op threads of torch/TensorFlow (default 1: the fastest for these small networks, "
                        "and much the fastest on a busy machine)")


def _verbose_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", action="store_true",
                   help="show the frameworks' start-up logs (TensorFlow's C++ and absl lines; hidden by default)")


def build_parser() -> argparse.ArgumentParser:
    """The parser for the ``train``, ``evaluate`` and ``play`` commands."""
    parser = argparse.ArgumentParser(prog="python -m marl_note", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser("train", help="train agents and save them", description="Train agents with "
                           "DecentralizedTrainer, save them under --out and print a summary.",
                           epilog=TRAIN_EPILOG.format(algorithms=_algorithms_help()),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _env_options(train, required=False)
    train.add_argument("--algo", choices=algorithm_names(),
                       help="the algorithm (a registered one; MARL_NOTE_PLUGINS=module,... imports modules that "
                            "register more); without it the zoo's recipe for --env is used")
    train.add_argument("--recipe", metavar="NAME|FILE",
                       help="train with this recipe: a zoo recipe's name or a TOML file (python -m marl_note zoo "
                            "NAME shows one); with another --env, its settings on that env")
    train.add_argument("--list-recipes", action="store_true", help="list the zoo's recipes and exit")
    train.add_argument("--env-steps", type=_positive, metavar="N", help="stop after N env steps (default: none)")
    train.add_argument("--minutes", type=float, metavar="M", help="stop after M minutes of training (default: none)")
    train.add_argument("--backend", default="torch", choices=["torch", "tf", "numpy", "auto"],
                       help="default: torch (numpy: MLP networks without a framework, all but AlphaZero; auto: numpy "
                            "where bench/ measured it faster on a CPU, else torch; the run header says which and why)")
    train.add_argument("--self-play", action="store_true", help="one agent in every seat, all learning")
    train.add_argument("--opponent", metavar="random|DIR",
                       help="a fixed player in the seats other than --seat: 'random' or a checkpoint")
    train.add_argument("--seat", help="the learner's seat when training against --opponent (default: the first)")
    train.add_argument("--episodes", type=_positive, help="training episodes (default 5000)")
    train.add_argument("--out", metavar="DIR", help="output directory (default runs/ENV-ALGO)")
    train.add_argument("--seed", type=int, help="seed of envs and agents (default 0)")
    train.add_argument("--num-envs", type=_positive, help="train and test envs (default 16)")
    train.add_argument("--processes", type=_positive, help="host the envs in N worker processes")
    train.add_argument("--batch-size", type=_positive, help="default 64")
    train.add_argument("--update-freq", type=_positive, help="env steps between updates (default 100)")
    train.add_argument("--test-freq", type=_positive, help="training episodes between tests (default episodes/10)")
    train.add_argument("--test-episodes", type=_positive, help="episodes per periodic test (default 50)")
    train.add_argument("--stop-reward", type=float, metavar="X", help="stop once a test metric reaches X")
    train.add_argument("--wrapper", action="append", metavar="NAME[:KEY=VALUE,...]",
                       help="a SuperSuit wrapper around the env (repeatable, applied in order after a recipe's), "
                            "e.g. resize_v1:x_size=84,y_size=84")
    train.add_argument("--agent-arg", action="append", metavar="KEY=VALUE",
                       help="a constructor argument of the agents (repeatable), e.g. lr=5e-4")
    train.add_argument("--eval-episodes", type=_non_negative, default=100,
                       help="games per seat against a random player in the summary (default 100; 0: none)")
    train.add_argument("--plot", action="store_true", help="write the test metric plot to DIR/metric.png")
    train.add_argument("--quiet", action="store_true", help="no progress output while training")
    _threads_option(train)
    _verbose_option(train)

    evaluate = sub.add_parser("evaluate", help="play greedy games and report per-seat results",
                              description="Load trained agents (either backend) and play greedy games: per-seat "
                                          "win/draw/loss for board games, mean returns otherwise.")
    _env_options(evaluate, required=False)
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR",
                          help="a run directory of train --out, or one agent checkpoint (directory or .zip)")
    evaluate.add_argument("--episodes", type=_positive, default=100,
                          help="games per seat (board games) or episodes (default 100)")
    evaluate.add_argument("--which", choices=["best", "last"],
                          help="of a run directory: the weights of its best test (default, when it has them) or "
                               "the last ones")
    evaluate.add_argument("--opponent", default="random", metavar="random|DIR",
                          help="who plays the other seats: 'random' (default) or a checkpoint")
    evaluate.add_argument("--backend", choices=["torch", "tf", "numpy"],
                          help="load into this backend (default: recorded)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the envs and the random player (default 0)")
    evaluate.add_argument("--num-envs", type=_positive, default=16, help="test envs (default 16)")
    _threads_option(evaluate)
    _verbose_option(evaluate)

    play = sub.add_parser("play", help="play a trained agent in the terminal (tic-tac-toe, connect four)",
                          description="Play a board game against a trained agent: the board is printed as text "
                                      "and moves are read from stdin (numbers on the board); q or end of input "
                                      "ends the game.")
    _env_options(play, required=False)
    play.add_argument("--checkpoint", required=True, metavar="DIR", help="a run directory or one agent checkpoint")
    play.add_argument("--which", choices=["best", "last"],
                      help="of a run directory: the weights of its best test (default, when it has them) or the last "
                           "ones")
    play.add_argument("--seat", help="your seat (default: the first seat, which moves first)")
    play.add_argument("--games", type=_positive, default=1, help="games to play (default 1)")
    play.add_argument("--backend", choices=["torch", "tf", "numpy"],
                      help="load into this backend (default: recorded)")
    play.add_argument("--seed", type=int, help="seed of the env")
    _threads_option(play)
    _verbose_option(play)

    psro = sub.add_parser("psro", help="train a PSRO pool of best responses (two-player zero-sum games)",
                          description="PSRO: each iteration trains a fresh --algo agent against the meta-strategy "
                                      "mixture of the pool, adds it, solves the meta-game again and, for an "
                                      "OpenSpiel game, prints the mixture's exact exploitability. The pool is "
                                      "saved under --out after every iteration (evaluate --checkpoint DIR reads it).")
    psro.add_argument("--env", required=True, metavar="NAME",
                      help="openspiel/GAME (kuhn_poker, leduc_poker, ...: exact payoffs and exploitability) or a "
                           "two-player PettingZoo game (payoffs from games)")
    psro.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="a game parameter (repeatable)")
    psro.add_argument("--observation", default="observation", choices=["observation", "information_state"],
                      help="OpenSpiel games: the observation tensor (default) or the information-state tensor")
    psro.add_argument("--algo", required=True, choices=algorithm_names(), help="the best-response learner")
    psro.add_argument("--backend", default="torch", choices=["torch", "tf", "numpy"], help="default: torch")
    psro.add_argument("--iterations", type=_positive, default=10, help="PSRO iterations (default 10)")
    psro.add_argument("--episodes", type=_positive, default=2000,
                      help="training episodes of each best response (default 2000)")
    psro.add_argument("--minutes", type=float, metavar="M",
                      help="stop after the iteration that passes M minutes of CPU time (default: none)")
    psro.add_argument("--meta-solver", default="nash", choices=["nash", "prd", "uniform"],
                      help="nash: linear programming (default); prd: projected replicator dynamics; uniform: "
                           "fictitious play")
    psro.add_argument("--payoff-episodes", type=_positive, default=100,
                      help="games per pair and seat order where payoffs are not exact (default 100)")
    psro.add_argument("--agent-arg", action="append", metavar="KEY=VALUE",
                      help="a constructor argument of the best responses (repeatable), e.g. lr=5e-4")
    psro.add_argument("--out", metavar="DIR", help="output directory (default runs/ENV-psro-ALGO)")
    psro.add_argument("--seed", type=int, default=0, help="seed of envs and agents (default 0)")
    psro.add_argument("--num-envs", type=_positive, default=8, help="train envs (default 8)")
    psro.add_argument("--batch-size", type=_positive, default=64, help="default 64")
    psro.add_argument("--update-freq", type=_positive, default=64, help="env steps between updates (default 64)")
    _threads_option(psro)
    _verbose_option(psro)

    zoo = sub.add_parser("zoo", help="list the zoo's training recipes, or show one",
                         description="The zoo's recipes (train --env NAME without --algo uses them): env, "
                                     "algorithm, budget and the score each reached where it was measured.")
    zoo.add_argument("name", nargs="?", metavar="NAME", help="show this recipe's file")
    return parser
