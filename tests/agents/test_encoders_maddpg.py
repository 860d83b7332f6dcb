"""MADDPG reads Dict and Tuple observations per seat through each seat's encoder.

MPE simple_spread (a real PettingZoo Parallel env) is wrapped so that every seat observes a Dict
(or a Tuple) of its velocity/position block and the rest; MADDPG trains a few updates through the
trainer, stores the observations flat, and round-trips a checkpoint in both backends. The
centralised critic reads every seat's encoded (flattened) observation and every action.
"""
import functools

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.utils import BaseParallelWrapper

from tests.agents.maddpg_helpers import maddpg_class

simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")


class NestedObs(BaseParallelWrapper):
    """Each seat's Box observation split into ``{"self": first 4, "rest": {"others": ..., "id": Discrete}}``
    (``kind="dict"``) or ``(first 4, rest)`` (``kind="tuple"``)."""

    def __init__(self, env, kind):
        super().__init__(env)
        self.kind = kind

    @functools.cache  # noqa: B019 (one space object per seat, as PettingZoo expects)
    def observation_space(self, agent):
        box = self.env.observation_space(agent)
        head = gym.spaces.Box(box.low[:4], box.high[:4], dtype=box.dtype)
        rest = gym.spaces.Box(box.low[4:], box.high[4:], dtype=box.dtype)
        if self.kind == "tuple":
            return gym.spaces.Tuple((head, rest))
        return gym.spaces.Dict({"self": head, "rest": gym.spaces.Dict({"others": rest, "id": gym.spaces.Discrete(3)})})

    def _wrap(self, agent, o):
        if self.kind == "tuple":
            return (o[:4], o[4:])
        return {"self": o[:4], "rest": {"others": o[4:], "id": self.possible_agents.index(agent)}}

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return {a: self._wrap(a, o) for a, o in obs.items()}, infos

    def step(self, actions):
        obs, *rest = self.env.step(actions)
        return ({a: self._wrap(a, o) for a, o in obs.items()}, *rest)


@pytest.mark.parametrize(("backend", "kind"), [("torch", "dict"), ("torch", "tuple"), ("tf", "dict")])
def test_maddpg_trains_on_nested_observations_of_simple_spread_and_round_trips(backend, kind, tmp_path):
    from marl_note.trainers import DecentralizedTrainer

    MADDPG = maddpg_class(backend)
    trainer = DecentralizedTrainer(lambda: NestedObs(simple_spread_v3.parallel_env(max_cycles=10), kind),
                                   num_train_envs=2, num_test_envs=1, batch_size=16, update_freq=20, test_freq=4,
                                   episodes_per_train=4, episodes_per_test=1, seed=0)
    m = MADDPG.from_trainer(trainer, hidden_sizes=(8,), learning_starts=16, update_steps=2, seed=0)
    width = 18 + (3 if kind == "dict" else 0)  # the Discrete id is one-hot
    state = m.state_dict()
    assert state["agent_0.actor.0.weight"].shape == (8, width)
    assert state["agent_0.critic.0.weight"].shape == (8, 3 * width + 3 * 5)  # every seat's obs and action
    before = {k: v.copy() for k, v in state.items() if k.endswith("actor.0.weight")}
    stats = trainer.train(m.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
    trainer.close()
    assert stats["num_gradient_steps"] > 0 and m.updates == stats["num_gradient_steps"]
    assert m.replay.sample(4).obs["agent_1"].shape == (4, width)  # stored flat
    assert not np.allclose(m.state_dict()["agent_0.actor.0.weight"], before["agent_0.actor.0.weight"])
    space = m.observation_spaces["agent_0"]
    obs = {"self": np.zeros((3, 4), np.float32), "rest": {"others": np.ones((3, 14), np.float32),
                                                          "id": np.array([0, 1, 2])}} \
        if kind == "dict" else (np.zeros((3, 4), np.float32), np.ones((3, 14), np.float32))
    assert space.contains(gym.spaces.utils.unflatten(space, gym.spaces.utils.flatten(space, space.sample())))
    again = MADDPG.restore(m.save(str(tmp_path / "maddpg")))
    assert again.observation_spaces["agent_0"] == space
    np.testing.assert_allclose(again.actor_outputs("agent_0", obs), m.actor_outputs("agent_0", obs), atol=1e-6)


def test_the_command_line_lets_maddpg_fit_a_parallel_env_with_nested_observations():
    from marl_note.cli.agents import fitting_algorithms
    from marl_note.envs import adapt, make_spec

    env = adapt(NestedObs(simple_spread_v3.parallel_env(max_cycles=5), "tuple"))
    try:
        spec = make_spec(env)
    finally:
        env.close()
    assert "maddpg" in fitting_algorithms(spec)


def test_maddpg_refuses_image_observations_naming_the_seat_and_what_to_use():
    pistonball_v6 = pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    from marl_note.cli.agents import fitting_algorithms
    from marl_note.envs import adapt, make_spec

    env = adapt(pistonball_v6.parallel_env(n_pistons=3))
    try:
        spec = make_spec(env)
    finally:
        env.close()
    seats = list(spec.possible_agents)
    assert "maddpg" not in fitting_algorithms(spec) and "ppo" in fitting_algorithms(spec)
    with pytest.raises(ValueError, match=r"agent 'piston_0' observes images .*Use PPO, DDPG or SAC"):
        maddpg_class("torch")({s: spec.observation_space(s) for s in seats},
                              {s: spec.action_space(s) for s in seats})
