"""The conv torso: same weights from the same seed in both backends, the same train step, the numpy
acting copy equal to the framework, and real board and Tuple-observation envs through the trainer."""
import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3

from marl_note.agents import tf as tf_agents
from marl_note.agents import torch as torch_agents
from marl_note.agents.networks import conv_forward, conv_weights
from marl_note.agents.numpy_policy import NumpyPolicy
from marl_note.trainers import DecentralizedTrainer
from marl_note.types import Transitions

BOARD = gym.spaces.Box(0, 1, (6, 7, 2), np.int8)  # connect four's board, channels last
IMAGE = gym.spaces.Box(0, 255, (9, 8, 3), np.uint8)
LAYERS = ((4, 3, 1, 1), (6, 3, 2, 0))


def image_batch(space, n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(space.low.min(), int(space.high.max()) + 1, (n, *space.shape)).astype(space.dtype)


def assert_same_state(a, b, tol):
    assert list(a) == list(b)
    for k in a:
        if k != "rng":
            np.testing.assert_allclose(a[k], b[k], atol=tol, rtol=tol, err_msg=k)


def test_numpy_conv_forward_matches_torch_conv2d():
    torch = pytest.importorskip("torch")
    w = conv_weights("net", 3, LAYERS, np.random.default_rng(0))
    x = image_batch(IMAGE, 5, 1).astype(np.float32)
    h = torch.from_numpy(x).permute(0, 3, 1, 2)
    for j, (_, _, s, p) in enumerate(LAYERS):
        h = torch.relu(torch.nn.functional.conv2d(h, torch.from_numpy(w[f"net.conv.{2 * j}.weight"]),
                                                  torch.from_numpy(w[f"net.conv.{2 * j}.bias"]), stride=s, padding=p))
    np.testing.assert_allclose(conv_forward(w, "net", x, LAYERS, "relu"), h.flatten(1).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("space", [BOARD, IMAGE], ids=["board", "uint8-image"])
def test_dqn_conv_same_seed_same_weights_and_same_train_step_in_both_backends(space, dueling):
    kw = dict(hidden_sizes=(8,), torso="conv", conv_layers=LAYERS, dueling=dueling, learning_starts=16,
              update_steps=2, lr=1e-2, seed=3)
    pt, tfa = torch_agents.DQN(space, gym.spaces.Discrete(7), **kw), tf_agents.DQN(space, gym.spaces.Discrete(7), **kw)
    assert any(k.startswith("q_net.conv.0.weight") for k in pt.state_dict())
    assert_same_state(pt.state_dict(), tfa.state_dict(), 0.0)
    obs = image_batch(space, 16, 0)
    x = pt.encoder(obs)
    # torch conv agents act in torch, TF ones through the numpy copy; numpy == torch == tf
    assert pt.numpy_policy() is None and tfa.numpy_policy() is not None
    np.testing.assert_allclose(tfa.q_values(obs), pt.nets.q_values(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tfa.nets.q_values(x), pt.nets.q_values(x), rtol=1e-5, atol=1e-5)
    copy = NumpyPolicy({"q": ("dueling" if dueling else "mlp", "q_net")}, "relu", conv=LAYERS)
    copy.load(pt.nets.numpy_weights(("q_net",)), 0)
    np.testing.assert_allclose(copy.forward("q", x), pt.q_values(obs), rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(1)
    t = Transitions(obs=obs, act=rng.integers(0, 7, 16), rew=rng.normal(size=16), next_obs=image_batch(space, 16, 2),
                    terminated=rng.random(16) < 0.2, truncated=np.zeros(16, bool))
    for agent in (pt, tfa):
        agent.observe(t)
        assert agent.update(batch_size=8)["gradient_steps"] == 2
    assert_same_state(pt.state_dict(), tfa.state_dict(), 1e-4)
    np.testing.assert_allclose(tfa.q_values(obs), tfa.nets.q_values(x), rtol=1e-5, atol=1e-5)  # copy refreshed
    np.testing.assert_allclose(tfa.q_values(obs), pt.q_values(obs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shared", [False, True])
def test_ppo_conv_same_weights_and_same_train_step_in_both_backends(shared):
    kw = dict(hidden_sizes=(8,), torso="conv", conv_layers=LAYERS, shared=shared, n_steps=16, n_epochs=1,
              lr=1e-3, seed=4)
    pt, tfa = torch_agents.PPO(IMAGE, gym.spaces.Discrete(3), **kw), tf_agents.PPO(IMAGE, gym.spaces.Discrete(3), **kw)
    assert_same_state(pt.state_dict(), tfa.state_dict(), 0.0)
    state = pt.state_dict()  # a sharper policy than the 0.01-gain init, so the logits matter
    head = "net.pi.0.weight" if shared else "net.pi.2.weight"
    state[head] = state[head] * 100.0
    pt.load_state_dict(state)
    tfa.load_state_dict(state)
    obs = image_batch(IMAGE, 16, 0)
    x = pt.encoder(obs)
    np.testing.assert_allclose(tfa.numpy_policy().forward("pi", x), pt.nets.policy(x), atol=1e-4)
    np.testing.assert_allclose(tfa.nets.policy(x), pt.nets.policy(x), atol=1e-4)
    act = pt.act(obs, explore=True)
    t = Transitions(obs=obs, act=act, rew=np.linspace(-1, 1, 16), next_obs=image_batch(IMAGE, 16, 1),
                    terminated=np.zeros(16, bool), truncated=np.zeros(16, bool), stream=np.zeros(16, np.int64))
    for agent in (pt, tfa):
        agent.observe(t)
        assert agent.update(batch_size=16)["gradient_steps"] == 1
    assert_same_state(pt.state_dict(), tfa.state_dict(), 1e-4)
    np.testing.assert_allclose(tfa.numpy_policy().forward("pi", x), tfa.nets.policy(x), atol=1e-4)


@pytest.mark.parametrize("backend", [torch_agents, tf_agents], ids=["torch", "tf"])
def test_conv_dqn_trains_on_connect_four_through_the_trainer(backend):
    trainer = DecentralizedTrainer(connect_four_v3.env, num_train_envs=2, num_test_envs=1, update_freq=32,
                                   test_freq=10**6, episodes_per_train=4, episodes_per_test=1, seed=0)
    try:
        agent = backend.DQN(trainer.observation_space("player_0"), trainer.action_space("player_0"),
                            hidden_sizes=(16,), torso="conv", conv_layers=((4, 3, 1, 1),), learning_starts=16,
                            update_steps=1, seed=0)
        trainer.train([agent, agent], learning_mask=[1, 1], plot=False, progress=False)
        assert agent.updates > 0 and agent.replay.sample(2).obs.dtype == np.int8
    finally:
        trainer.close()


@pytest.mark.parametrize("backend", [torch_agents, tf_agents], ids=["torch", "tf"])
def test_dqn_trains_on_blackjack_tuple_observations_through_the_trainer(backend):
    trainer = DecentralizedTrainer("Blackjack-v1", num_train_envs=2, num_test_envs=1, update_freq=16,
                                   test_freq=10**6, episodes_per_train=40, episodes_per_test=1, seed=0)
    try:
        space = trainer.observation_space("agent_0")
        assert isinstance(space, gym.spaces.Tuple)
        agent = backend.DQN(space, trainer.action_space("agent_0"), hidden_sizes=(16,), learning_starts=8,
                            update_steps=1, seed=0)
        trainer.train([agent], learning_mask=[1], plot=False, progress=False)
        assert agent.updates > 0 and agent.replay.sample(2).obs.shape == (2, 32 + 11 + 2)
    finally:
        trainer.close()
