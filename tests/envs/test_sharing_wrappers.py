"""Parameter-sharing wrappers on real PettingZoo envs: agent ids for any observation space, padding."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from marl_note.envs import adapt, make_spec, pad_seats, with_agent_id


def test_images_get_a_constant_plane_per_agent():
    from pettingzoo.sisl import pursuit_v5
    env = with_agent_id(lambda: pursuit_v5.parallel_env(max_cycles=5))()
    obs, _ = env.reset(seed=0)
    agents = env.possible_agents
    assert env.observation_space(agents[0]).shape == (7, 7, 4)
    planes = [float(obs[a][0, 0, -1]) for a in agents]
    assert len(set(planes)) == len(agents)  # each seat its own constant
    assert all(np.all(obs[a][..., -1] == obs[a][0, 0, -1]) for a in agents)
    assert all(env.observation_space(a).contains(obs[a]) for a in agents)


def test_board_games_get_the_id_on_the_observation_and_keep_their_masks():
    from pettingzoo.classic import connect_four_v3
    make = with_agent_id(connect_four_v3.env)
    spec = make_spec(adapt(make()))
    assert spec.has_action_mask
    assert spec.observation_space("player_0").shape == (6, 7, 3)  # 2 planes + the id plane
    env = make()
    env.reset(seed=0)
    first = env.observe("player_0")
    assert set(first) == {"observation", "action_mask"} and np.all(first["observation"][..., -1] == 1)


def test_discrete_observations_become_a_dict_with_the_id_and_dicts_get_an_entry():
    from pettingzoo.classic import rps_v2
    make = with_agent_id(rps_v2.parallel_env)
    env = make()
    obs, _ = env.reset(seed=0)
    space = env.observation_space("player_1")
    assert isinstance(space, gym.spaces.Dict) and set(space.spaces) == {"obs", "agent_id"}
    assert obs["player_1"]["agent_id"].tolist() == [0.0, 1.0] and space.contains(obs["player_1"])
    with pytest.raises(ValueError, match="applied twice"):
        with_agent_id(make)()


def test_padding_gives_unlike_mpe_seats_one_space():
    pytest.importorskip("supersuit")
    from mpe2 import simple_tag_v3
    raw = simple_tag_v3.parallel_env()
    assert {raw.observation_space(a).shape for a in raw.possible_agents} == {(16,), (14,)}
    env = with_agent_id(pad_seats(lambda: simple_tag_v3.parallel_env(max_cycles=5)))()
    assert {env.observation_space(a).shape for a in env.possible_agents} == {(20,)}
    assert len({str(env.action_space(a)) for a in env.possible_agents}) == 1
    obs, _ = env.reset(seed=0)
    assert obs["agent_0"][14:16].tolist() == [0.0, 0.0] and obs["agent_0"][-1] == 1.0  # padding, then its id
    from pettingzoo.classic import connect_four_v3
    with pytest.raises(ValueError, match="Box and Discrete spaces only"):
        pad_seats(connect_four_v3.env)()


def test_one_shared_ppo_trains_over_every_simple_tag_seat_after_padding():
    pytest.importorskip("supersuit")
    pytest.importorskip("torch")
    from mpe2 import simple_tag_v3

    from marl_note.agents.torch import PPO
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer(with_agent_id(pad_seats(lambda: simple_tag_v3.parallel_env(max_cycles=25))),
                                   num_train_envs=2, num_test_envs=1, batch_size=32, update_freq=50, test_freq=4,
                                   episodes_per_train=4, episodes_per_test=1, seed=0)
    a0 = trainer.possible_agents[0]
    ppo = PPO(trainer.observation_space(a0), trainer.action_space(a0), hidden_sizes=(16,), n_steps=64, n_epochs=1,
              seed=0)
    stats = trainer.train([ppo] * 4, learning_mask=[1, 1, 1, 1], plot=False, progress=False)
    trainer.close()
    assert stats["num_collected_agent_steps"] == 4 * stats["num_collected_steps"] > 0
    assert stats["num_gradient_steps"] > 0
