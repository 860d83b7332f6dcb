"""check_agent (issue 29, item 6): every registered algorithm passes it in both backends, and it catches
agents that break the contract (broken agents defined here, registered for the test and removed after)."""
import numpy as np
import pytest

import marl_note.contrib.alphazero  # noqa: F401  (registers "alphazero": checked with the others)
from marl_note.agents import registry
from marl_note.agents.checks import AgentCase, AgentCheckError, check_agent
from marl_note.agents.ddpg import DDPGCore
from marl_note.agents.dqn import DQNCore
from marl_note.agents.ppo import PPOCore
from marl_note.agents.registry import RegistryError

torch_agents = pytest.importorskip("marl_note.agents.torch")


@pytest.fixture
def autographed(monkeypatch):
    """The names of marl_note's functions that a ``tf.function`` hands to AutoGraph while the test runs.

    marl_note's graph code goes through ``graph_function`` (no AutoGraph: its source rewrite was half of
    a TF agent's first update); a plain ``tf.function`` would show up here."""
    pytest.importorskip("tensorflow")
    from tensorflow.python.eager.polymorphic_function import autograph_util

    seen: list[str] = []
    convert = autograph_util.py_func_from_autograph

    def spy(fn, *args, **kwargs):
        if getattr(fn, "__module__", "").startswith("marl_note"):
            seen.append(f"{fn.__module__}.{fn.__qualname__}")
        return convert(fn, *args, **kwargs)

    monkeypatch.setattr(autograph_util, "py_func_from_autograph", spy)
    return seen


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_algorithm_passes_check_agent_in_both_backends(name, autographed):
    report = check_agent(name)
    assert not autographed, autographed  # the TF graphs are traced without AutoGraph
    entry = registry.get(name)
    assert report.backends == entry.backends and report.backends[:2] == ("torch", "tf")
    assert report.cases == (("tictactoe", "connect_four") if name == "alphazero" else
                            ("joint " + "+".join(entry.actions),) if entry.joint else entry.actions)
    for check in ("is_on_policy", "act", "observe/update", "learning changes the weights", "numpy parity",
                  "same initial state in every backend", "restore torch->tf", "restore tf->torch"):
        assert check in report.checks, check
    if "numpy" in entry.backends:  # the numpy backend's checkpoints cross to both frameworks and back
        for check in ("restore numpy->torch", "restore numpy->tf", "restore torch->numpy", "restore tf->numpy"):
            assert check in report.checks, check


class IgnoresTheMask(torch_agents.DQN):
    def act(self, obs, mask=None, explore=False):
        return super().act(obs, None, explore)


class ForgetsItsGenerator(torch_agents.DQN):
    """Leaves the exploration generator out of its state: a restored agent explores differently."""

    def state_dict(self):
        return {k: v for k, v in super().state_dict().items() if k != "rng"}

    def load_state_dict(self, state):
        super().load_state_dict({**state, "rng": super().state_dict()["rng"]})


class ReportsNoSteps(torch_agents.PPO):
    def update(self, batch_size):
        metrics = super().update(batch_size)
        metrics.pop("gradient_steps")
        return metrics


class ActsWithOneColumnTooFew(torch_agents.DDPG):
    def act(self, obs, mask=None, explore=False):
        return super().act(obs, mask, explore)[:, :1]


class SkewedNumpyCopy(torch_agents.DDPG):
    """Acts 0.01 off whenever it acts through its numpy copy: the copy and the framework disagree."""

    def act(self, obs, mask=None, explore=False):
        shift = 0.01 if self.numpy_policy() is not None else 0.0
        return super().act(obs, mask, explore) + np.float32(shift)


class RestoresWithoutItsWeights(torch_agents.DQN):
    def load_state_dict(self, state):
        super().load_state_dict({k: v for k, v in state.items() if not k.startswith("q_net.")} |
                                {k: v for k, v in super().state_dict().items() if k.startswith("q_net.")})


class NeverLearns(torch_agents.DQN):
    def update(self, batch_size):
        return {"gradient_steps": 1}


BROKEN = {
    "ignores-the-mask": (IgnoresTheMask, DQNCore, ("Discrete",), r"returned action \d+ in row \d+, which its mask "
                                                                 r"forbids"),
    "forgets-its-generator": (ForgetsItsGenerator, DQNCore, ("Discrete",),
                              r"ForgetsItsGenerator.restore\(\) of the torch checkpoint: exploring actions differ"),
    "reports-no-steps": (ReportsNoSteps, PPOCore, ("Discrete",), r"update\(\) must report gradient_steps as a "
                                                                 r"non-negative integer, got None"),
    "one-column-too-few": (ActsWithOneColumnTooFew, DDPGCore, ("Box",), r"returned shape \(8, 1\), expected \(8, 2\)"),
    "skewed-numpy-copy": (SkewedNumpyCopy, DDPGCore, ("Box",), r"acting through the framework \(SkewedNumpyCopy."
                                                               r"restore\(numpy_acting=False\)\) and through the numpy "
                                                               r"copy disagree"),
    "restores-without-weights": (RestoresWithoutItsWeights, DQNCore, ("Discrete",),
                                 r"RestoresWithoutItsWeights.restore\(.*\).*: state_dict\[.q_net"),
    "never-learns": (NeverLearns, DQNCore, ("Discrete",), r"two updates with gradient steps changed no float array"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_check_agent_catches_an_agent_that_breaks_the_contract(name):
    cls, core, actions, message = BROKEN[name]
    base = {DQNCore: "dqn", PPOCore: "ppo", DDPGCore: "ddpg"}[core]
    registry.register(name, core=core, torch=cls, actions=actions, on_policy=core is PPOCore,
                      tiny=registry.get(base).tiny)
    try:
        match = rf"check_agent\('{name}', backend 'torch', case '\w+'\): .*{message}"
        with pytest.raises(AgentCheckError, match=match):
            check_agent(cls)
    finally:
        registry.unregister(name)


def test_the_same_agents_unbroken_pass_on_one_backend():
    """The broken agents' algorithms pass as registered (torch only: a second same-seed build is compared)."""
    report = check_agent("dqn", "torch")
    assert report.backends == ("torch",) and "seeded construction" in report.checks
    assert "restore torch->torch" in report.checks and "restore torch->tf" not in report.checks


def test_check_agent_refuses_what_it_cannot_check():
    class Unregistered(torch_agents.DQN):
        pass

    with pytest.raises(RegistryError, match=r"Unregistered is not a registered algorithm's class \(it derives from "
                                            r"'dqn'\): register it"):
        check_agent(Unregistered)
    with pytest.raises(RegistryError, match=r"algorithm 'dqn' has no jax class; it has torch, tf"):
        check_agent("dqn", "jax")
    with pytest.raises(AgentCheckError, match=r"no gradient step in 6 steps of 8 rows"):
        check_agent("dqn", "torch", options={"learning_starts": 1000}, max_steps=6)


def test_an_entry_may_bring_its_own_cases():
    """A user entry names its cases (spaces and task) by function; check_agent builds those."""
    import gymnasium as gym

    def cases():
        return [AgentCase("wide", gym.spaces.Box(-5, 5, (7,), np.float32), gym.spaces.Discrete(5))]

    registry.register("dqn-wide", core=DQNCore, torch=torch_agents.DQN, actions=("Discrete",), on_policy=False,
                      cases=cases, tiny=registry.get("dqn").tiny)
    try:
        assert check_agent("dqn-wide", "torch").cases == ("wide",)
    finally:
        registry.unregister("dqn-wide")
