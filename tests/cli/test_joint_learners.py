"""The command line builds a joint learner through its class's ``from_spec``: each reads what it needs of the
env's spec (MAPPO's critic and QMIX's mixer the global state, MADDPG the spaces alone), and a class
registered as joint without ``from_spec`` is refused by name before anything is built."""
import gymnasium as gym
import pytest

from marl_note.agents import registry
from marl_note.agents.dqn import DQNCore
from marl_note.cli.agents import build_learners, plan_seats
from marl_note.cli.common import CLIError
from marl_note.types import EnvSpec

pytest.importorskip("torch")

SPACE = gym.spaces.Box(-1, 1, (4,))
SPEC = EnvSpec(("a", "b"), dict.fromkeys("ab", SPACE), dict.fromkeys("ab", gym.spaces.Discrete(3)),
               turn_based=False, has_action_mask=False, state_space=gym.spaces.Box(-5, 5, (6,)))
TINY = {"hidden_sizes": (8,)}


@pytest.mark.parametrize("algo, reads", [("mappo", "state_space"), ("qmix", "state_shape"), ("vdn", "state_shape"),
                                         ("maddpg", None)])
def test_each_joint_learner_takes_the_envs_state_from_the_spec(algo, reads):
    learners = build_learners("torch", algo, SPEC, plan_seats(SPEC, algo), TINY, seed=0)
    learner = learners[algo]
    assert list(learner.agents) == ["a", "b"] and len(learner.seat_agents()) == 2
    if reads == "state_space":
        assert learner.state_space == SPEC.state_space and learner.state_dim == 6
    elif reads == "state_shape":
        assert learner.cfg.state_shape == (6,) and learner.state_dim == 6
    no_state = EnvSpec(SPEC.possible_agents, SPEC.observation_spaces, SPEC.action_spaces, turn_based=False,
                       has_action_mask=False)
    if reads is not None:  # without a state: the joint observation (QMIX) or a local critic's input (MAPPO)
        again = build_learners("torch", algo, no_state, plan_seats(no_state, algo), TINY, seed=0)[algo]
        assert again.state_dim == (8 if reads == "state_shape" else 0)


def test_a_class_registered_as_joint_without_from_spec_is_refused_by_name():
    from marl_note.agents.torch import DQN
    registry.register("joint-without-from-spec", core=DQNCore, torch=DQN, actions=("Discrete",), on_policy=False,
                      joint=True)
    try:
        with pytest.raises(CLIError, match=r"--algo joint-without-from-spec is registered as joint, but DQN has no "
                                           r"from_spec\(spec, \.\.\.\)"):
            build_learners("torch", "joint-without-from-spec", SPEC, plan_seats(SPEC, "joint-without-from-spec"),
                           TINY, seed=0)
    finally:
        registry.unregister("joint-without-from-spec")
