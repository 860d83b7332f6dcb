"""AlphaZero: PUCT search with a policy/value network, trained by self-play on classic board games.

The numpy core (:mod:`~marl_note.contrib.alphazero.core`) and the search
(:mod:`~marl_note.contrib.alphazero.mcts`) import no framework; the agents are
``marl_note.contrib.alphazero.torch.AlphaZero`` and ``marl_note.contrib.alphazero.tf.AlphaZero``.
Importing this package registers the algorithm as ``"alphazero"`` (:mod:`~marl_note.contrib.alphazero.entry`).
"""
from marl_note.contrib.alphazero import entry as _entry  # noqa: F401  (registers "alphazero")
from marl_note.contrib.alphazero.core import AlphaZeroConfig, AlphaZeroCore, NetworkPlayer

__all__ = ["AlphaZeroConfig", "AlphaZeroCore", "NetworkPlayer"]
