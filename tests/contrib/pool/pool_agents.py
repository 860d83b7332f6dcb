"""A user ``RL`` subclass for the pool tests, in a module the actor processes can import."""
import torch
from torch import nn

from marl_note.compat.torch import RL


class TinyDQN(RL):
    """A one-hidden-layer DQN written by hand (no numpy acting copy: actors act with it in torch)."""

    def __init__(self, observation_space, action_space, seed=None):
        super().__init__(observation_space, action_space, buffer_size=2_000, learning_starts=32, seed=seed)
        self.q = nn.Sequential(nn.Flatten(), nn.Linear(self.obs_dim, 16), nn.ReLU(), nn.Linear(16, action_space.n))
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=1e-3)

    def action(self, s):
        return self.q(s)

    def __call__(self, s, a, next_s, r, d):
        with torch.no_grad():
            y = r + self.gamma * (1 - d) * self.q(next_s).max(1).values
        return nn.functional.mse_loss(self.q(s).gather(1, a[:, None]).squeeze(1), y)
