"""The command line: ``python -m marl_note train|evaluate|play|psro|zoo`` (also installed as ``marl-note``).

``main(argv)`` parses the arguments, runs the command and returns its exit status: 0 on success,
2 for a bad argument (printed as one line naming the problem, before any work starts), 130 when
interrupted, 1 when training meets a non-finite reward, observation or update (printed as one line;
``train`` saves the learners' finite weights and the run checkpoint first, as on Ctrl-C). Importing
this package imports neither torch nor TensorFlow: a command imports the one backend it needs, after
its arguments are checked. The modules named in ``MARL_NOTE_PLUGINS``
are imported first (:func:`~marl_note.cli.plugins.load_plugins`): the algorithms they register are
``--algo`` choices. Unless ``--verbose`` is given, a command
runs with the frameworks' start-up logs silenced (TensorFlow's C++ INFO and WARNING lines, absl's
and TensorFlow's Python warnings; :mod:`marl_note.cli.quiet`), so that the first line printed is the
command's own; a ``TF_CPP_MIN_LOG_LEVEL`` set by the user is kept.

Example:
    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     status = main(["train", "--env", "tictactoe_v3", "--algo", "ddpg"])
    >>> status
    2
    >>> print(err.getvalue().strip())
    marl_note train: error: --algo ddpg does not fit tictactoe_v3: ddpg needs Box actions, ... sac, nfsp, alphazero
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from marl_note.cli.common import CLIError
from marl_note.cli.parser import build_parser
from marl_note.cli.plugins import load_plugins
from marl_note.cli.quiet import quiet_frameworks
from marl_note.types import NonFiniteError

__all__ = ["CLIError", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command of the command line; returns the exit status."""
    try:
        load_plugins()
    except CLIError as exc:
        print(f"marl_note: error: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    from marl_note.cli import commands
    from marl_note.cli.psro_command import psro
    from marl_note.cli.zoo_command import zoo

    run = {"train": commands.train, "evaluate": commands.evaluate, "play": commands.play, "zoo": zoo,
           "psro": psro}[args.command]
    try:
        with quiet_frameworks(not getattr(args, "verbose", False)):
            return run(args)
    except CLIError as exc:
        print(f"marl_note {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nmarl_note {args.command}: interrupted", file=sys.stderr)
        return 130
    except NonFiniteError as exc:  # a diverged update or a NaN from the env; ``train`` saved the learners first
        print(f"marl_note {args.command}: error: {exc}", file=sys.stderr)
        return 1
