"""User-written agents shared by the tests of the original RL workflow (torch only)."""
import pytest


def loss_only_rl(obs_dim: int, n_actions: int = 2):
    """An RL subclass as a user writes it: a linear Q over ``obs_dim`` features, SGD, a loss, no ``td_error``.

    Its constructor takes the observation and action spaces; skips the test when torch is missing.
    """
    torch = pytest.importorskip("torch")
    from marl_note.compat.torch import RL

    class LossOnly(RL):
        def __init__(self, o, a):
            super().__init__(o, a)
            self.q = torch.nn.Linear(obs_dim, n_actions)
            self.optimizer = torch.optim.SGD(self.q.parameters(), lr=0.1)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            return self.q(s).sum()

    return LossOnly
