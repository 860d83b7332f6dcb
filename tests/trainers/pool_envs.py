"""Env factories for the pool tests, in a module an actor process can import without torch."""
import os

import gymnasium as gym


def crashing_cartpole(parent):
    """CartPole that raises on its 30th step, but only in another process than ``parent``."""
    env = gym.make("CartPole-v1")

    class Crash(gym.Wrapper):
        steps = 0

        def step(self, action):
            self.steps += 1
            if self.steps >= 30 and os.getpid() != parent:
                raise RuntimeError("boom in the actor's env")
            return self.env.step(action)

    return Crash(env)
