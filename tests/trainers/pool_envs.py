"""Env factories for the pool tests, in a module an actor process can import without torch."""
import os
import time

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


def _claim(marker):
    """True in the one process (not the learner's) that first creates ``marker``; it writes its pid there."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def failing_cartpole(parent, marker, failure, after):
    """CartPole whose one env in one actor (the first to claim ``marker``) fails on its ``after``-th step:
    ``failure="exit"``: says so on stderr and calls ``os._exit(3)``; ``"hang"``: sleeps forever."""
    env = gym.make("CartPole-v1")
    victim = os.getpid() != parent and _claim(marker)

    class Fail(gym.Wrapper):
        steps = 0

        def step(self, action):
            self.steps += 1
            if victim and self.steps >= after:
                if failure == "exit":
                    os.write(2, b"the env of this actor calls os._exit(3)\n")
                    os._exit(3)
                while True:
                    time.sleep(1)
            return self.env.step(action)

    return Fail(env)
