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


def late_second_actor_tictactoe(folder, first_steps, extra_wait=0.5, timeout=120.0):
    """Tic-tac-toe whose envs start late in actor 1: actor 0's env writes its step count to
    ``folder/steps``, and actor 1 builds its env only once actor 0 has taken ``first_steps`` steps
    (or after ``timeout`` s), then ``extra_wait`` s more: a slow-starting actor, whatever the load.
    The learner's envs are plain tic-tac-toe."""
    import multiprocessing

    from pettingzoo.classic import tictactoe_v3
    from pettingzoo.utils import BaseWrapper

    env = tictactoe_v3.env()
    name = multiprocessing.current_process().name
    path = os.path.join(folder, "steps")
    if name == "marl_note-actor-1":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    if int(f.read() or 0) >= first_steps:
                        break
            except FileNotFoundError:
                pass
            time.sleep(0.01)
        time.sleep(extra_wait)
        return env
    if name != "marl_note-actor-0":
        return env

    class Counting(BaseWrapper):
        steps = 0

        def step(self, action):
            super().step(action)
            Counting.steps += 1
            with open(path + ".tmp", "w") as f:
                f.write(str(Counting.steps))
            os.replace(path + ".tmp", path)

    return Counting(env)
