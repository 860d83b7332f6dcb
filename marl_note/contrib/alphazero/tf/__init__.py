"""AlphaZero in TensorFlow/Keras."""
from marl_note.contrib.alphazero.tf.alphazero import AlphaZero

__all__ = ["AlphaZero"]
