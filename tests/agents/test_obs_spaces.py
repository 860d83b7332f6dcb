"""Every observation-space kind trains and round-trips a checkpoint, in both backends.

Box of rank 1, 2 and 3, Discrete, MultiDiscrete, MultiBinary, nested Dict and Tuple, and uint8
images (a conv torso) go through DQN; PPO and SAC take a subset. Nested observations are
flattened at the agent's boundary and stored flat; images stay uint8 in replay.
"""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import tf as tf_agents
from marl_note.agents import torch as torch_agents
from marl_note.agents.encoders import ObsEncoder
from marl_note.types import Transitions, stack_obs

BACKENDS = {"torch": torch_agents, "tf": tf_agents}
TINY_CONV = ((3, 3, 1, 1),)
NESTED_DICT = gym.spaces.Dict({
    "pos": gym.spaces.Box(-1, 1, (2,), np.float32),
    "inner": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiBinary(2))),
    "dir": gym.spaces.Discrete(4, start=1)})
SPACES = {
    "box1": gym.spaces.Box(-1, 1, (3,), np.float32),
    "box2": gym.spaces.Box(-1, 1, (2, 3), np.float32),
    "box3": gym.spaces.Box(0, 1, (3, 3, 2), np.int8),  # a small board: the MLP by default
    "discrete": gym.spaces.Discrete(5, start=2),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 2, 4]),
    "multibinary": gym.spaces.MultiBinary(4),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (1,)))),
    "nested_dict": NESTED_DICT,
    "image_uint8": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),  # conv by default
}


def batch_of(space, n, seed=0):
    """``n`` samples of ``space`` stacked as the collector stacks them (tuples/dicts entry-wise)."""
    space.seed(seed)
    return stack_obs([space.sample() for _ in range(n)])


def transitions(space, n, act, seed=0):
    return Transitions(obs=batch_of(space, n, seed), act=act, rew=np.random.default_rng(seed).normal(size=n),
                       next_obs=batch_of(space, n, seed + 1), terminated=np.zeros(n, bool),
                       truncated=np.zeros(n, bool), stream=np.zeros(n, np.int64))


def roundtrip(agent, obs, tmp_path, read):
    path = agent.save(str(tmp_path / "agent"))
    again = type(agent).restore(path)
    np.testing.assert_allclose(read(again, obs), read(agent, obs), atol=1e-6)
    return again


def kw_for(name):
    return dict(torso="conv", conv_layers=TINY_CONV) if name == "image_uint8" else {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", SPACES)
def test_dqn_trains_on_every_space_and_round_trips_a_checkpoint(name, backend, tmp_path):
    space = SPACES[name]
    agent = BACKENDS[backend].DQN(space, gym.spaces.Discrete(3), hidden_sizes=(8,), learning_starts=8,
                                  update_steps=2, seed=0, **kw_for(name))
    obs = batch_of(space, 4)
    assert agent.act(obs).shape == (4,)
    before = agent.q_values(obs)
    agent.observe(transitions(space, 16, np.arange(16) % 3))
    assert agent.update(batch_size=8)["gradient_steps"] == 2
    assert not np.allclose(agent.q_values(obs), before)
    stored = agent.replay.sample(4).obs
    assert stored.dtype == (np.uint8 if name == "image_uint8" else stored.dtype)
    roundtrip(agent, obs, tmp_path, lambda a, o: a.q_values(o))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["tuple", "nested_dict", "multidiscrete", "image_uint8"])
def test_ppo_trains_on_nested_and_image_spaces_and_round_trips(name, backend, tmp_path):
    space = SPACES[name]
    agent = BACKENDS[backend].PPO(space, gym.spaces.Discrete(3), hidden_sizes=(8,), n_steps=8, n_epochs=1, seed=0,
                                  **kw_for(name))
    obs = batch_of(space, 8)
    t = transitions(space, 8, agent.act(obs, explore=True))
    agent.observe(t)
    assert agent.update(batch_size=4)["gradient_steps"] == 2
    roundtrip(agent, obs, tmp_path, lambda a, o: a.log_prob(o, np.zeros(8, np.int64)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["nested_dict"])
def test_sac_trains_on_nested_spaces_and_round_trips(name, backend, tmp_path):
    space = SPACES[name]
    agent = BACKENDS[backend].SAC(space, gym.spaces.Box(-1, 1, (2,), np.float32), hidden_sizes=(8,),
                                  learning_starts=8, update_steps=1, seed=0)
    obs = batch_of(space, 4)
    assert agent.act(obs).shape == (4, 2)
    agent.observe(transitions(space, 16, np.zeros((16, 2), np.float32)))
    assert agent.update(batch_size=8)["gradient_steps"] == 1
    roundtrip(agent, obs, tmp_path, lambda a, o: a.act(o))


def test_nested_observations_are_flattened_like_gymnasium_and_stored_flat():
    enc = ObsEncoder(NESTED_DICT)
    samples = [NESTED_DICT.sample() for _ in range(5)]
    want = np.stack([gym.spaces.flatten(NESTED_DICT, s) for s in samples]).astype(np.float32)
    np.testing.assert_array_equal(enc(stack_obs(samples)), want)
    agent = torch_agents.DQN(NESTED_DICT, gym.spaces.Discrete(2), hidden_sizes=(4,), seed=0)
    assert agent.replay.observation_space.shape == (enc.dim,)


def test_multidiscrete_observations_are_one_hot_per_component():
    enc = ObsEncoder(gym.spaces.MultiDiscrete([3, 2]))
    assert enc.dim == 5
    assert enc(np.array([[2, 0], [0, 1]])).tolist() == [[0, 0, 1, 1, 0], [1, 0, 0, 0, 1]]
    with pytest.raises(ValueError, match="outside the space"):
        enc(np.array([[3, 0]]))


def test_torso_choice_and_bad_options_are_refused_before_work():
    assert ObsEncoder(gym.spaces.Box(0, 255, (4, 4, 3), np.uint8)).torso == "conv"
    assert ObsEncoder(gym.spaces.Box(0, 1, (6, 7, 2), np.int8)).torso == "mlp"  # connect four: MLP unless asked
    assert ObsEncoder(gym.spaces.Box(0, 1, (6, 7, 2), np.int8), "conv").image_shape == (6, 7, 2)
    assert ObsEncoder(gym.spaces.Box(0, 1, (6, 7)), "conv").image_shape == (6, 7, 1)
    assert ObsEncoder(gym.spaces.Box(0, 255, (40, 40, 3), np.uint8), "mlp").torso == "mlp"
    with pytest.raises(ValueError, match="torso='conv' needs a Box observation of rank 2"):
        torch_agents.DQN(gym.spaces.Discrete(3), gym.spaces.Discrete(2), torso="conv")
    with pytest.raises(ValueError, match="torso must be one of"):
        torch_agents.PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), torso="cnn")
    with pytest.raises(ValueError, match="too small for conv_layers"):
        torch_agents.DQN(gym.spaces.Box(0, 1, (3, 3, 1)), gym.spaces.Discrete(2), torso="conv",
                         conv_layers=((4, 5, 1, 0),))


def test_image_observations_are_stored_as_uint8():
    agent = torch_agents.DQN(SPACES["image_uint8"], gym.spaces.Discrete(2), hidden_sizes=(4,), conv_layers=TINY_CONV,
                             buffer_size=32, seed=0)
    agent.observe(transitions(SPACES["image_uint8"], 4, np.zeros(4, np.int64)))
    assert agent.replay.sample(2).obs.dtype == np.uint8
    pixels = 1000 * 2 * 8 * 8 * 3  # obs and next_obs of 1000 transitions
    assert agent.replay.estimate_nbytes(1000, SPACES["image_uint8"], gym.spaces.Discrete(2)) < pixels * 2  # not float32


@pytest.mark.parametrize("backend", BACKENDS)
def test_goal_dict_agent_with_her_round_trips_its_dict_observation_space(backend, tmp_path):
    from marl_note.envs.goal_envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=3)
    agent = BACKENDS[backend].DQN(env.observation_space, env.action_space, hidden_sizes=(4,), seed=0,
                                  her=dict(strategy="future", k=2), compute_reward=env.compute_reward)
    obs, _ = env.reset(seed=0)
    batch = {k: v[None] for k, v in obs.items()}
    again = type(agent).restore(agent.save(str(tmp_path / "agent")), compute_reward=env.compute_reward)
    assert isinstance(again.observation_space, gym.spaces.Dict)
    np.testing.assert_allclose(again.q_values(batch), agent.q_values(batch))


def test_the_command_line_offers_the_agents_that_take_nested_observations():
    from marl_note.cli.agents import fitting_algorithms
    from marl_note.types import EnvSpec

    spec = EnvSpec(("a", "b"), {"a": SPACES["tuple"], "b": SPACES["tuple"]},
                   {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}, turn_based=False, has_action_mask=False)
    fits = fitting_algorithms(spec)
    assert "dqn" in fits and "ppo" in fits and "maddpg" in fits  # MADDPG reads them per seat too
