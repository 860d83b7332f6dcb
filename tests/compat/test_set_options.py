"""agent.set(...) with the original library's argument names: each one mapped onto the agent, or refused."""
import importlib

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import EpsGreedyQPolicy, GaussianWhiteNoiseProcess, GumbelSoftmaxPolicy, SoftmaxPolicy
from marl_note.envs.goal_envs import PointReachEnv
from marl_note.replay import HERReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from marl_note.types import Transitions

BOX = gym.spaces.Box(-1, 1, (3,), np.float32)
TWO = gym.spaces.Discrete(2)
ACT_BOX = gym.spaces.Box(-1, 1, (2,), np.float32)
BACKENDS = ["torch", "tf"]


def algo(name, backend="torch"):
    pytest.importorskip("torch" if backend == "torch" else "tensorflow")
    return getattr(importlib.import_module(f"marl_note.compat.{backend}"), name)


def batch(n=8, act=None, seed=0):
    rng = np.random.default_rng(seed)
    return Transitions(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       act=rng.integers(0, 2, n) if act is None else act, rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), terminated=np.zeros(n, bool),
                       truncated=np.zeros(n, bool))


def spread_spaces():
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    env = simple_spread_v3.parallel_env()
    return ({a: env.observation_space(a) for a in env.possible_agents},
            {a: env.action_space(a) for a in env.possible_agents})


@pytest.mark.parametrize("backend", BACKENDS)
def test_basic_dqn_example_maps_and_keeps_what_was_learned(backend):
    """README: set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10)."""
    agent = algo("DQN", backend)(BOX, TWO, hidden_sizes=(8,), learning_starts=4, seed=0)
    agent.observe(batch())
    agent.update(batch_size=4)
    before = agent.state_dict()
    replay, obs = agent.replay, np.ones((2, 3), np.float32)
    q = agent.q_values(obs)
    policy = EpsGreedyQPolicy(0.01)
    assert agent.set(policy=policy, batch=64, update_steps=10) is agent
    assert agent.policy is policy and agent.config["policy"] is policy and policy.steps == 0
    assert agent.cfg.target_update_agent_steps == 10 and agent.run_options == {"batch": 64}
    np.testing.assert_array_equal(agent.q_values(obs), q)
    after = agent.state_dict()
    assert {k for k in before if not np.array_equal(before[k], after[k])} == {"policy.steps"}
    assert agent.replay is replay and len(agent.replay) == 8  # no replay option changed: kept
    with pytest.raises(ValueError, match="would discard the 8 transitions"):
        agent.set(pool_size=10000)
    assert agent.replay is replay


def test_dqn_target_period_in_agent_steps():
    agent = algo("DQN")(BOX, TWO, hidden_sizes=(8,), learning_starts=4, update_steps=1, seed=0).set(update_steps=10)
    copies = []
    for i in range(5):
        agent.observe(batch(4, seed=i))
        agent.update(batch_size=4)
        copies.append(all(np.array_equal(v, agent.state_dict()["q_net" + k[len("target_net"):]])
                          for k, v in agent.state_dict().items() if k.startswith("target_net")))
    assert copies == [False, False, True, False, True]  # copied at 12 and 20 agent steps
    agent.set(update_batches=3)
    assert agent.cfg.target_update == 3 and agent.cfg.target_update_agent_steps is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_prioritized_replay_example(backend):
    """README: set(..., trial_count=10, criterion=200, PR=True, initial_TD=7, alpha=0.7)."""
    agent = algo("DQN", backend)(BOX, TWO, hidden_sizes=(8,), seed=0)
    agent.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10, trial_count=10,
              criterion=200, PR=True, initial_TD=7, alpha=0.7)
    assert isinstance(agent.replay, PrioritizedReplayBuffer) and agent.replay.capacity == 10000
    assert (agent.replay.alpha, agent.cfg.initial_TD) == (0.7, 7.0)
    assert agent.run_options == {"batch": 64, "trial_count": 10, "criterion": 200}
    agent.set(PR=False)
    assert type(agent.replay) is ReplayBuffer


def test_her_takes_compute_reward_from_the_env_now_or_at_train():
    from marl_note.compat.train_bindings import bind_env

    env = PointReachEnv()
    agent = algo("DDPG")(env.observation_space, env.action_space, hidden_sizes=(8,), seed=0)
    agent.set(noise=GaussianWhiteNoiseProcess(sigma=0.2, size=2), pool_size=10000, batch=256, HER=True)
    assert type(agent.replay) is ReplayBuffer and agent.__dict__["_her_pending"] == {"strategy": "future", "k": 4}
    bind_env(agent, PointReachEnv)
    assert isinstance(agent.replay, HERReplayBuffer) and agent.replay.capacity == 10000
    assert agent.noise.process.current_sigma == 0.2 and "_her_pending" not in agent.__dict__
    other = algo("SAC")(env.observation_space, env.action_space, hidden_sizes=(8,), seed=0)
    other.env = env
    other.set(HER=True)
    assert isinstance(other.replay, HERReplayBuffer)
    with pytest.raises(ValueError, match="prioritized"):
        other.set(PR=True)
    other.set(HER=False, PR=True)
    assert isinstance(other.replay, PrioritizedReplayBuffer)
    waiting = algo("DDPG")(env.observation_space, env.action_space, hidden_sizes=(8,), learning_starts=4, seed=0)
    obs = {k: np.zeros((4, 2), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    waiting.observe(Transitions(obs=obs, act=np.zeros((4, 2)), rew=np.zeros(4), next_obs=obs,
                                terminated=np.zeros(4, bool), truncated=np.zeros(4, bool)))
    with pytest.raises(ValueError, match="would discard the 4 transitions"):
        waiting.set(HER=True, pool_size=50)  # refused as a whole: HER does not stay waiting either
    assert "_her_pending" not in waiting.__dict__ and waiting.replay.capacity == 100_000


@pytest.mark.parametrize("backend", BACKENDS)
def test_ppo_example(backend):
    """README: set(policy=SoftmaxPolicy(), pool_size=10000, batch=64, update_steps=1000, PPO=True)."""
    agent = algo("PPO", backend)(BOX, TWO, hidden_sizes=(8,), seed=0)
    agent.set(policy=SoftmaxPolicy(), pool_size=10000, batch=64, update_steps=1000, PPO=True)
    assert agent.cfg.n_steps == 1000 and agent.run_options == {"batch": 64}
    agent.set(pool_size=500)
    assert agent.cfg.n_steps == 500
    agent.set(PR=True, lambda_=0.3, initial_ratio=2.0, alpha=0.5, initial_TD=3.0)
    assert (agent.cfg.PR, agent.cfg.lambda_, agent.cfg.initial_ratio, agent.cfg.alpha) == (True, 0.3, 2.0, 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_maddpg_example(backend):
    """README: set(policy=SoftmaxPolicy(), pool_size=3000, batch=32, trial_count=10, MARL=True)."""
    obs, act = spread_spaces()
    m = algo("MADDPG", backend)(obs, act, hidden_sizes=(8,), learning_starts=4, seed=0)
    seats = m.seat_agents()
    m.set(policy=SoftmaxPolicy(), pool_size=3000, batch=32, trial_count=10, MARL=True)
    assert m.replay.capacity == 3000 and m.centralized_critic and m.run_options == {"batch": 32, "trial_count": 10}
    assert all(s.joint_learner is m for s in m.seat_agents()) and all(s.joint_learner is m for s in seats)
    m.set(policy=GumbelSoftmaxPolicy(0.5))
    assert m.cfg.temperature == 0.5
    width = m.state_dict()["agent_0.critic.0.weight"].shape[1]
    m.set(MARL=False)  # not trained yet: the critics are rebuilt for their own agent only
    assert not m.centralized_critic and m.state_dict()["agent_0.critic.0.weight"].shape[1] < width


def test_maddpg_refuses_to_drop_trained_critics():
    from tests.agents.maddpg_helpers import joint_batch

    obs, act = spread_spaces()
    m = algo("MADDPG")(obs, act, hidden_sizes=(8,), learning_starts=4, seed=0)
    m.observe_joint(joint_batch(8, np.random.default_rng(0), obs, act))
    m.update(batch_size=4)
    with pytest.raises(ValueError, match="network shapes"):
        m.set(MARL=False)
    assert m.centralized_critic


def test_box_agents_map_noise_and_replay_options():
    ddpg = algo("DDPG")(BOX, ACT_BOX, hidden_sizes=(8,), seed=0)
    noise = GaussianWhiteNoiseProcess(sigma=0.3, size=2)
    ddpg.set(noise=noise, pool_size=99, num_updates=2, num_steps=3, PR=True)
    assert ddpg.noise.process is noise and ddpg.replay.capacity == 99 and ddpg.cfg.update_steps == 2
    assert ddpg.cfg.num_steps == 3 and ddpg.prioritized
    sac = algo("SAC")(BOX, ACT_BOX, hidden_sizes=(8,), seed=0).set(pool_size=77, num_updates=1)
    assert sac.replay.capacity == 77 and sac.cfg.update_steps == 1


def test_set_options_survive_save_and_restore(tmp_path):
    DQN = algo("DQN")
    agent = DQN(BOX, TWO, hidden_sizes=(8,), seed=0).set(policy=EpsGreedyQPolicy(0.01), pool_size=123, update_steps=7)
    again = DQN.restore(agent.save(str(tmp_path / "dqn")))
    assert again.replay.capacity == 123 and again.policy.eps == 0.01 and again.cfg.target_update_agent_steps == 7


REFUSED = [
    ("DQN", dict(noise=GaussianWhiteNoiseProcess()), "explores with policy="),
    ("DQN", dict(PPO=True), "use marl_note.compat.torch.PPO"),
    ("DQN", dict(MARL=True), "centralised critic of marl_note.compat.torch.MADDPG"),
    ("DQN", dict(TRL=True), "subclass marl_note.compat.torch.RL"),
    ("DQN", dict(IRL=True), "return \\(output, aux\\)"),
    ("DQN", dict(lambda_=0.5), "PPO with PR=True"),
    ("DQN", dict(initial_ratio=1.0), "PPO with PR=True"),
    ("DQN", dict(alpha=0.5), "pass PR=True"),
    ("DQN", dict(initial_TD=5.0), "pass PR=True"),
    ("DQN", dict(HER=True), "needs a goal env"),
    ("DQN", dict(update_steps=5, update_batches=5), "target period once"),
    ("DDPG", dict(policy=EpsGreedyQPolicy()), "explores with noise="),
    ("DDPG", dict(update_batches=5), "follow by tau"),
    ("DDPG", dict(update_steps=5), "follow by tau"),
    ("SAC", dict(policy=SoftmaxPolicy()), "stochastic policy"),
    ("SAC", dict(noise=GaussianWhiteNoiseProcess(size=2)), "stochastic policy"),
    ("SAC", dict(update_steps=5), "follow by tau"),
    ("PPO", dict(policy=EpsGreedyQPolicy()), "on-policy ratio"),
    ("PPO", dict(noise=GaussianWhiteNoiseProcess()), "not with added noise"),
    ("PPO", dict(num_updates=4), "n_epochs"),
    ("PPO", dict(update_batches=4), "n_epochs"),
    ("PPO", dict(num_steps=3), "gae_lambda"),
    ("PPO", dict(HER=True), "on-policy"),
    ("PPO", dict(PPO=False), "this agent is PPO"),
    ("PPO", dict(lambda_=0.5), "pass PR=True"),
    ("PPO", dict(pool_size=10, update_steps=20), "does not fit"),
    ("PPO", dict(TRL=True), "subclass"),
    ("MADDPG", dict(PR=True), "samples uniformly"),
    ("MADDPG", dict(alpha=0.5), "samples uniformly"),
    ("MADDPG", dict(num_steps=3), "one-step rows"),
    ("MADDPG", dict(HER=True), "single-agent goal env"),
    ("MADDPG", dict(update_batches=3), "tau"),
    ("MADDPG", dict(update_steps=3), "tau"),
    ("MADDPG", dict(policy=EpsGreedyQPolicy()), "softmax"),
    ("MADDPG", dict(policy=GumbelSoftmaxPolicy(1.0, 0.1)), "constant temperature"),
    ("MADDPG", dict(noise=GaussianWhiteNoiseProcess()), "Discrete actions: explore with policy="),
    ("MADDPG", dict(IRL=True), "auxiliary output"),
    ("DQN", dict(PR="yes"), "True or False"),
    ("DQN", dict(pool_size=0), "positive integer"),
    ("DQN", dict(batch=2.5), "positive integer"),
    ("DQN", dict(criterion=float("nan"), trial_count=3), "finite number"),
    ("DQN", dict(criterion=200), "needs trial_count"),
]


@pytest.fixture(scope="module")
def agents():
    obs, act = spread_spaces()
    return {"DQN": algo("DQN")(BOX, TWO, hidden_sizes=(4,), seed=0),
            "DDPG": algo("DDPG")(BOX, ACT_BOX, hidden_sizes=(4,), seed=0),
            "SAC": algo("SAC")(BOX, ACT_BOX, hidden_sizes=(4,), seed=0),
            "PPO": algo("PPO")(BOX, TWO, hidden_sizes=(4,), seed=0),
            "MADDPG": algo("MADDPG")(obs, act, hidden_sizes=(4,), seed=0)}


@pytest.mark.parametrize("name,kwargs,match", REFUSED, ids=[f"{n}-{'-'.join(k)}" for n, k, _ in REFUSED])
def test_refused_arguments_say_what_to_use(agents, name, kwargs, match):
    agent = agents[name]
    config, options = agent.config, dict(agent.run_options)
    with pytest.raises((ValueError, TypeError), match=match):
        agent.set(**kwargs)
    assert agent.config == config and agent.run_options == options  # refused before anything changed


def test_unknown_argument_is_a_type_error(agents):
    with pytest.raises(TypeError, match="MA"):
        agents["DQN"].set(MA=True)
