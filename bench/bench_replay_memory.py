"""Replay memory of a real run: image frames stored twice (obs and next_obs per row) or once.

Pistonball's frames (457x120x3 uint8) give the estimate at the default 100,000 slots (no env
needed). The run itself uses frames that install with the base dependencies: CartPole-v1 rendered
to 400x600x3 uint8 pixels (``gymnasium.wrappers.AddRenderObservation``), 4 envs, random actions.
The collector hands the learner per-env transitions, interleaved, which it writes into a plain
:class:`~marl_note.replay.ReplayBuffer` and a :class:`~marl_note.replay.CompactReplayBuffer` of the
same ``buffer_size``. Prints the estimate of the issue's default (100,000 slots), the bytes each
buffer allocated (all touched once full), how many transitions each holds, and checks that every
transition the compact buffer holds equals the plain one's.

Run:  python bench/bench_replay_memory.py [--steps N] [--buffer-size B]   (defaults: 100 env steps, B = 300)
"""
from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

from marl_note.agents import RandomAgent
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.replay import CompactReplayBuffer, ReplayBuffer
from marl_note.replay.memory import format_bytes
from marl_note.trainers import Collector


class TwoBuffers(RandomAgent):
    """A random shared agent that stores what it sees in both layouts."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, size: int):
        super().__init__(act_space, seed=0)
        self.plain = ReplayBuffer(size, obs_space, act_space, seed=0)
        self.compact = CompactReplayBuffer(size, obs_space, act_space, seed=0)
        self.seen = 0

    def observe(self, t) -> None:
        self.seen += len(t)
        self.plain.add(t)
        self.compact.add(t)

    def update(self, batch_size: int) -> dict:
        return {"gradient_steps": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--buffer-size", type=int, default=300)
    args = parser.parse_args()
    piston = gym.spaces.Box(0, 255, (457, 120, 3), np.uint8)
    plain_est = ReplayBuffer.estimate_nbytes(100_000, piston, gym.spaces.Box(-1, 1, (1,)))
    compact_est = CompactReplayBuffer.estimate_nbytes(100_000, piston, gym.spaces.Box(-1, 1, (1,)))
    print(f"estimate, 100,000 slots of pistonball frames {piston.shape} uint8: plain {format_bytes(plain_est)}, "
          f"compact {format_bytes(compact_est)}")
    env_fn = lambda: gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"))  # noqa: E731
    spec = make_spec(adapt(env_fn()))
    obs_space = spec.observation_space(spec.possible_agents[0])
    act_space = spec.action_space(spec.possible_agents[0])
    agent = TwoBuffers(obs_space, act_space, args.buffer_size)
    n = spec.num_agents
    col = Collector(SyncVectorEnv([env_fn] * 4), spec, [agent] * n, [True] * n, [True] * n)
    col.reset(seed=0)
    col.collect(n_steps=args.steps)
    col.flush()
    for b in (agent.plain, agent.compact):
        b.sample(1)  # touch
        b.column("obs")
    for name, b in (("plain", agent.plain), ("compact", agent.compact)):
        print(f"{name:8s} buffer_size={args.buffer_size} over {obs_space.shape} frames: "
              f"allocates {format_bytes(b.nbytes_estimate)}, "
              f"holds {len(b)} of {agent.seen} transitions")
    plain = agent.plain.get(np.arange(len(agent.plain)))
    key = lambda t, k: (t.obs[k].tobytes(), t.act[k].tobytes(), t.next_obs[k].tobytes(),  # noqa: E731
                        bool(t.terminated[k]), bool(t.truncated[k]))
    rows = {key(plain, k) for k in range(len(plain))}
    got = agent.compact.get(agent.compact.stored_indices())
    missing = sum(key(got, k) not in rows for k in range(len(got)))
    print(f"compact transitions not in the plain buffer: {missing} of {len(got)} "
          f"(0 when the plain buffer still holds them all)")


if __name__ == "__main__":
    main()
