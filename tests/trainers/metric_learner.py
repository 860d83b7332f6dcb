"""A random player that learns nothing but reports update metrics the way a real learner does."""
from __future__ import annotations

import numpy as np

from marl_note.agents import RandomAgent


class MetricLearner(RandomAgent):
    """Acts at random; ``update`` returns a falling loss and eps, plus an array metric (not a
    scalar, so not recorded)."""

    def __init__(self, action_space, observation_space=None, seed=0):
        super().__init__(action_space, observation_space, seed)
        self.updates = 0

    def observe(self, transitions):
        pass

    def update(self, batch_size):
        self.updates += 1
        return {"loss": 1.0 / self.updates, "eps": max(0.05, 1.0 - 0.1 * self.updates), "gradient_steps": 1,
                "td": np.zeros(3)}

    def state_dict(self):
        return {"updates": np.asarray(self.updates, np.int64)}

    def load_state_dict(self, state):
        self.updates = int(state["updates"])


def learner_for(trainer, seat="agent_0", seed=0):
    return MetricLearner(trainer.action_space(seat), trainer.observation_space(seat), seed=seed)


class Count:
    """Counts collection chunks and tests."""

    def __init__(self):
        self.chunks = self.tests = 0

    def on_collect_end(self, trainer, stats, episodes):
        self.chunks += 1

    def on_test_end(self, trainer, result, episodes):
        self.tests += 1
