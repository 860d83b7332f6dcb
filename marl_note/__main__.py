"""``python -m marl_note``: the command line (see :mod:`marl_note.cli`)."""
from marl_note.cli import main

if __name__ == "__main__":  # worker processes (--processes) import this module again without running it
    raise SystemExit(main())
