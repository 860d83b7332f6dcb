"""marl_note: a PettingZoo/Gymnasium-native multi-agent RL trainer."""
__version__ = "0.1.0"
