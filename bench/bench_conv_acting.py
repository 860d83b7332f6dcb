"""Acting time of a conv DQN on connect four's board (6x7x2, batch 16): numpy copy vs the framework.

    PYTHONPATH=. python bench/bench_conv_acting.py [--repeats 2000] [--layers default|tiny]

Prints microseconds per ``act`` call for the numpy acting copy and for ``numpy_acting=False`` in
each backend (the default conv layers: 32 and 64 3x3 "same" channels, then a 128-128 MLP).
"""
import argparse
import time

import gymnasium as gym
import numpy as np


def per_call(agent, obs, repeats):
    agent.act(obs)  # warm up (traces, first numpy copy)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(repeats):
            agent.act(obs)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--layers", choices=["default", "tiny"], default="default")
    args = parser.parse_args()
    from marl_note.agents import tf as tf_agents
    from marl_note.agents import torch as torch_agents

    space = gym.spaces.Box(0, 1, (6, 7, 2), np.int8)
    obs = np.random.default_rng(0).integers(0, 2, (16, 6, 7, 2)).astype(np.int8)
    layers = None if args.layers == "default" else ((8, 3, 1, 1),)
    for name, mod in (("torch", torch_agents), ("tf", tf_agents)):
        for numpy_acting in (True, False):
            agent = mod.DQN(space, gym.spaces.Discrete(7), torso="conv", conv_layers=layers, seed=0,
                            numpy_acting=numpy_acting)
            how = "numpy copy" if numpy_acting else "framework"
            print(f"{name:5s} {how:10s} {per_call(agent, obs, args.repeats):8.1f} us per act (batch 16)")


if __name__ == "__main__":
    main()
