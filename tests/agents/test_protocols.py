"""Every built-in algorithm, in both backends, satisfies the Protocols of marl_note.agents.base that
the trainer, the pool, checkpoints, the finders and the distributed contexts ask it with isinstance
(issue 29, item 2), and the ones it does not claim are not passed by accident."""
import pickle

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import registry
from marl_note.agents.base import (
    Acting,
    Agent,
    Cloneable,
    CountsEnvSteps,
    DistributedTrainable,
    HasObservationSpace,
    HasReplay,
    JointLearner,
    JointSeat,
    Learner,
    LearningAgent,
    PerEnvAgent,
    RandomAgent,
    RemoteActing,
    Saveable,
    Stateful,
    Tunable,
    is_learning_agent,
)

BACKENDS = ["torch", "tf"]
BOX, DISCRETE = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
BOARD = gym.spaces.Box(0, 1, (3, 3, 2), np.int8)  # tic-tac-toe, for AlphaZero
ALL = (Acting, Agent, PerEnvAgent, HasObservationSpace, Learner, Stateful, LearningAgent, CountsEnvSteps, HasReplay,
       JointLearner, JointSeat, Saveable, Cloneable, Tunable, RemoteActing, DistributedTrainable)
SEAT_AGENT = {LearningAgent, Acting, Agent, HasObservationSpace, Learner, Stateful, Saveable, Tunable, RemoteActing,
              DistributedTrainable}
CLAIMS = {
    "dqn": SEAT_AGENT | {CountsEnvSteps, HasReplay},
    "ddpg": SEAT_AGENT | {CountsEnvSteps, HasReplay},
    "sac": SEAT_AGENT | {CountsEnvSteps, HasReplay},
    "ppo": SEAT_AGENT,  # its rollout is not a replay buffer: run checkpoints hold no replay for it
    "alphazero": SEAT_AGENT | {HasReplay},
    "maddpg": {JointLearner, HasObservationSpace, HasReplay, Stateful, Saveable, Tunable, RemoteActing,
               DistributedTrainable},
}
CLAIMS["vdn"] = CLAIMS["qmix"] = CLAIMS["maddpg"]  # joint learners alike
CLAIMS["nfsp"] = CLAIMS["dqn"] | {PerEnvAgent}  # its best response or average policy per env
CLAIMS["mappo"] = CLAIMS["ippo"] = CLAIMS["maddpg"] - {HasReplay}  # on-policy: a rollout, as for PPO


def build(name, backend):
    entry = registry.get(name)
    if backend == "tf":
        pytest.importorskip("tensorflow")
    else:
        pytest.importorskip("torch")
    cls = entry.cls(backend)
    if entry.joint:
        return cls({"a": BOX, "b": BOX}, {"a": DISCRETE, "b": BOX if "Box" in entry.actions else DISCRETE}, seed=0,
                   **entry.tiny)
    if name == "alphazero":
        return cls(BOARD, gym.spaces.Discrete(9), seed=0, **entry.tiny)
    return cls(BOX, BOX if entry.actions == ("Box",) else DISCRETE, seed=0, **entry.tiny)


def test_every_builtin_algorithm_is_claimed_here():
    assert set(registry.names()) == set(CLAIMS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_builtin_agents_satisfy_the_protocols_they_claim(name, backend):
    agent = build(name, backend)
    held = {p for p in ALL if isinstance(agent, p)}
    assert held == CLAIMS[name], (f"{name} ({backend}): missing {sorted(p.__name__ for p in CLAIMS[name] - held)}, "
                                  f"unexpected {sorted(p.__name__ for p in held - CLAIMS[name])}")
    assert is_learning_agent(agent) == (not registry.get(name).joint)
    assert agent.local_kl_stop is False and agent.distributed_networks is agent.nets
    if registry.get(name).joint:
        for seat in agent.seat_agents():
            seat_claims = {Acting, Agent, PerEnvAgent, HasObservationSpace, JointSeat}
            assert {p for p in ALL if isinstance(seat, p)} == seat_claims
            assert seat.joint_learner is agent


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["dqn", "ppo", "ddpg", "sac"])
def test_the_acting_shell_acts_like_the_agent(name, backend):
    agent = build(name, backend)
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 3)).astype(np.float32)
    shell = pickle.loads(pickle.dumps(agent.remote.shell()))
    assert not isinstance(shell, HasReplay) or len(shell.replay) == 0
    shell.remote.load(agent.remote.state(), version=3)
    assert np.allclose(shell.act(obs), agent.act(obs), atol=1e-5)


def test_an_agent_that_cannot_act_in_an_actor_says_why():
    from marl_note.contrib.pool.shell import shell_refusal

    with pytest.raises(TypeError, match=r"MADDPG learns from joint per-step data \(MADDPG\), which the pool"):
        build("maddpg", "torch").remote.shell()
    assert "RandomAgent is not a marl_note agent" in shell_refusal(RandomAgent(DISCRETE))
    assert shell_refusal(build("dqn", "torch")) is None


def test_ppo_with_target_kl_stops_on_its_local_kl():
    agent = build("ppo", "torch")
    assert not agent.local_kl_stop
    assert registry.get("ppo").cls("torch")(BOX, DISCRETE, hidden_sizes=(4,), target_kl=0.01).local_kl_stop


def test_scripted_and_user_agents_are_asked_not_probed():
    random = RandomAgent(DISCRETE)
    assert {p for p in ALL if isinstance(random, p)} == {Acting, Agent}

    class Minimal:  # a user learner with only what a learning seat needs
        def act(self, obs, mask=None, explore=False):
            return np.zeros(len(obs), np.int64)

        def observe(self, transitions):
            pass

        def update(self, batch_size):
            return {"gradient_steps": 0}

    assert is_learning_agent(Minimal()) and not isinstance(Minimal(), LearningAgent)
    assert not is_learning_agent(random)


def test_the_pool_asks_the_one_definition_of_on_policy():
    """Before, the pool's on_policy was isinstance(PPOCore): a second on-policy algorithm ran there as
    off-policy (collected ahead of its updates) while is_on_policy said otherwise."""
    pytest.importorskip("torch")
    from marl_note.agents.torch import DQN, PPO
    from marl_note.contrib.pool.shell import on_policy

    class OnPolicyDQN(DQN):  # a user's algorithm declaring itself on-policy
        on_policy = True

    agent = OnPolicyDQN(BOX, DISCRETE, hidden_sizes=(4,), seed=0)
    assert on_policy(agent) is registry.is_on_policy(agent) is True
    assert on_policy(PPO(BOX, DISCRETE, hidden_sizes=(4,))) and not on_policy(DQN(BOX, DISCRETE, hidden_sizes=(4,)))
    assert on_policy(RandomAgent(DISCRETE)) is False  # declares nothing: off-policy here, never an error
