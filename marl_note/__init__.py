"""marl_note: a PettingZoo/Gymnasium-native multi-agent RL trainer."""
__version__ = "0.1.0"

from marl_note import _moved

_moved.install()  # release 0.1.0's import paths, answered with a DeprecationWarning (see marl_note._moved)
