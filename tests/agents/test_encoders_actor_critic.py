"""DDPG and SAC read every observation-space kind through the encoder, images through a conv torso.

Each kind (Box vector, uint8 image, Discrete, MultiDiscrete, MultiBinary, nested Dict/Tuple) trains
a few gradient steps and round-trips a checkpoint (PyTorch for every kind, TensorFlow for images:
the encoder is numpy, shared by both). With a conv torso the actor and each
critic get a torso of their own and a Box critic takes the action after its torso; both backends
draw the same weights and take the same step.
"""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import tf as tf_agents
from marl_note.agents import torch as torch_agents
from marl_note.agents.encoders import conv_output_shape
from marl_note.types import Transitions
from tests.agents.test_conv_torso import IMAGE, LAYERS, image_batch
from tests.agents.test_obs_spaces import SPACES, TINY_CONV, batch_of, roundtrip, transitions

BACKENDS = {"torch": torch_agents, "tf": tf_agents}
ACT = gym.spaces.Box(-1, 1, (2,), np.float32)
KINDS = ["box1", "image_uint8", "discrete", "multidiscrete", "multibinary", "tuple", "nested_dict"]
# TF: images in the test below, nested Dicts in test_obs_spaces (the encoder is the same numpy code)
CASES = [("torch", k) for k in KINDS]
CRITIC = {"DDPG": "critic", "SAC": "qf1"}


def assert_same_state(a, b, tol):
    assert sorted(a) == sorted(b)
    for k in a:
        if k != "rng":
            np.testing.assert_allclose(a[k], b[k], atol=tol, rtol=tol, err_msg=k)


@pytest.mark.parametrize("algo", ["DDPG", "SAC"])
@pytest.mark.parametrize(("backend", "name"), CASES)
def test_actor_critic_trains_on_every_space_kind_and_round_trips_a_checkpoint(algo, backend, name, tmp_path):
    space, image = SPACES[name], name == "image_uint8"
    agent = getattr(BACKENDS[backend], algo)(space, ACT, hidden_sizes=(8,), learning_starts=8, update_steps=2,
                                             seed=0, **(dict(conv_layers=TINY_CONV) if image else {}))
    assert agent.cfg.torso == ("conv" if image else "mlp")  # "auto" picks the conv torso for images
    state, critic = agent.state_dict(), CRITIC[algo]
    assert ("actor.conv.0.weight" in state, f"{critic}.conv.0.weight" in state) == (image, image)
    if image:  # the critic's MLP reads the conv features and then the action
        features = int(np.prod(conv_output_shape(space.shape, TINY_CONV)))
        assert state[f"{critic}.0.weight"].shape == (8, features + 2)
    obs = batch_of(space, 4)
    before = agent.act(obs)
    assert before.shape == (4, 2)
    agent.observe(transitions(space, 16, np.random.default_rng(0).uniform(-1, 1, (16, 2)).astype(np.float32)))
    assert agent.update(batch_size=8)["gradient_steps"] == 2
    assert not np.allclose(agent.act(obs), before)
    if image:
        assert agent.replay.sample(4).obs.dtype == np.uint8  # images stay uint8 in replay
    roundtrip(agent, obs, tmp_path, lambda a, o: a.act(o))


@pytest.mark.parametrize(("algo", "action_space"), [("DDPG", ACT), ("SAC", ACT), ("SAC", gym.spaces.Discrete(3))],
                         ids=["ddpg", "sac-box", "sac-discrete"])
def test_conv_actor_critic_same_seed_same_weights_and_same_train_step_in_both_backends(algo, action_space,
                                                                                       tmp_path):
    kw = dict(hidden_sizes=(8,), conv_layers=LAYERS, learning_starts=16, update_steps=2, seed=3)
    pt, tfa = (getattr(b, algo)(IMAGE, action_space, **kw) for b in (torch_agents, tf_agents))
    assert_same_state(pt.state_dict(), tfa.state_dict(), 0.0)
    obs = image_batch(IMAGE, 16, 0)
    # torch conv agents act in torch, TF ones through the numpy copy of the actor: the same actions
    assert pt.numpy_policy() is None and tfa.numpy_policy() is not None
    np.testing.assert_allclose(tfa.act(obs), pt.act(obs), atol=1e-5)
    rng = np.random.default_rng(1)
    act = rng.integers(0, 3, 16) if algo == "SAC" and action_space.shape == () else rng.uniform(-1, 1, (16, 2))
    t = Transitions(obs=obs, act=act, rew=rng.normal(size=16), next_obs=image_batch(IMAGE, 16, 2),
                    terminated=rng.random(16) < 0.2, truncated=np.zeros(16, bool))
    for agent in (pt, tfa):
        agent.observe(t)
        assert agent.update(batch_size=8)["gradient_steps"] == 2
    assert_same_state(pt.state_dict(), tfa.state_dict(), 1e-4)
    np.testing.assert_allclose(tfa.act(obs), pt.act(obs), atol=1e-4)  # the numpy copy was refreshed
    roundtrip(tfa, obs, tmp_path, lambda a, o: a.act(o))


def test_actor_critic_torso_override_and_bad_torso_options_are_refused_before_work():
    mlp = torch_agents.DDPG(IMAGE, ACT, hidden_sizes=(4,), torso="mlp", seed=0)  # images flattened on request
    assert mlp.cfg.torso == "mlp" and mlp.state_dict()["actor.0.weight"].shape == (4, int(np.prod(IMAGE.shape)))
    with pytest.raises(ValueError, match="a user-supplied torso is for DQN"):
        torch_agents.SAC(IMAGE, ACT, torso="numpy:zeros")
    with pytest.raises(ValueError, match="torso='conv' needs a Box observation of rank 2"):
        torch_agents.DDPG(gym.spaces.Discrete(3), ACT, torso="conv")
    with pytest.raises(ValueError, match="conv_layers were given but the torso is 'mlp'"):
        tf_agents.SAC(SPACES["box1"], ACT, conv_layers=TINY_CONV)
