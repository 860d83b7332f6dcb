"""AlphaZero in PyTorch."""
from marl_note.contrib.alphazero.torch.alphazero import AlphaZero

__all__ = ["AlphaZero"]
