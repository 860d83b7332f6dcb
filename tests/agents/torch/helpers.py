"""Tiny deterministic envs and a plain batched Gymnasium loop for agent tests."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from marl_note.types import Transitions


class Corridor(gym.Env):
    """Walk right from cell 0 to cell ``length - 1``: -0.05 a step, +1 on arrival; left is illegal at 0.

    Observation: one-hot position (int8). Actions: 0 = left, 1 = right. Truncated after ``limit``
    steps. The optimal return is ``1 - 0.05 * (length - 2)``; a policy that never arrives gets
    ``-0.05 * limit``.
    """

    def __init__(self, length: int = 6, limit: int = 20):
        self.length, self.limit = length, limit
        self.observation_space = gym.spaces.Box(0, 1, (length,), np.int8)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        o = np.zeros(self.length, np.int8)
        o[self.pos] = 1
        return o

    def mask(self):
        return np.array([self.pos > 0, True])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {"action_mask": self.mask()}

    def step(self, action):
        assert self.mask()[action], "illegal action"
        self.pos += 1 if action == 1 else -1
        self.t += 1
        arrived = self.pos == self.length - 1
        return self._obs(), (1.0 if arrived else -0.05), arrived, self.t >= self.limit and not arrived, \
            {"action_mask": self.mask()}


def train(agent, make_env, agent_steps: int, n_envs: int = 8, update_every: int = 32, batch_size: int = 64,
          seed: int = 0):
    """Plain batched loop: act for all envs, observe one chunk per step, update every few steps."""
    envs = [make_env() for _ in range(n_envs)]
    first = [e.reset(seed=seed + i) for i, e in enumerate(envs)]
    obs = np.stack([o for o, _ in first])
    mask = np.stack([info.get("action_mask", np.ones(1, bool)) for _, info in first])
    masked = "action_mask" in first[0][1]
    steps = since = 0
    while steps < agent_steps:
        act = agent.act(obs, mask if masked else None, explore=True)
        out = [e.step(a) for e, a in zip(envs, act)]
        next_obs = np.stack([o[0] for o in out])
        next_mask = np.stack([o[4].get("action_mask", np.ones(1, bool)) for o in out])
        rew = np.array([o[1] for o in out], np.float32)
        term = np.array([o[2] for o in out])
        trunc = np.array([o[3] for o in out])
        agent.observe(Transitions(obs=obs, act=act, rew=rew, next_obs=next_obs, terminated=term, truncated=trunc,
                                  mask=mask if masked else None, next_mask=next_mask if masked else None,
                                  stream=np.arange(n_envs)))
        for i in np.flatnonzero(term | trunc):
            o, info = envs[i].reset()
            next_obs[i] = o
            next_mask[i] = info.get("action_mask", np.ones(1, bool))
        obs, mask = next_obs, next_mask
        steps += n_envs
        since += n_envs
        if since >= update_every:
            since = 0
            agent.update(batch_size)


def greedy_return(agent, env) -> float:
    obs, info = env.reset(seed=123)
    total, done = 0.0, False
    while not done:
        m = info.get("action_mask")
        a = agent.act(obs[None], None if m is None else m[None])[0]
        obs, r, term, trunc, info = env.step(a)
        total += r
        done = term or trunc
    return total
