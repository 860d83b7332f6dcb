"""The algorithm registry (issue 29, item 3): the CLI's table today in library form, read without a
framework, open to user algorithms, and the one definition of "on-policy"."""
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from marl_note.agents import registry
from marl_note.agents.dqn import DQNCore
from marl_note.agents.ppo import PPOCore
from marl_note.agents.registry import RegistryError, UnknownAlgorithm
from marl_note.cli import agents as cli_agents
from marl_note.cli import zoo
from marl_note.envs.adapters import adapt, make_spec
from marl_note.types import EnvSpec

BUILTIN = ["dqn", "ppo", "ddpg", "sac", "maddpg", "mappo", "ippo", "vdn", "qmix", "nfsp", "alphazero"]


def spec_of(factory):
    adapter = adapt(factory())
    try:
        return make_spec(adapter)
    finally:
        adapter.close()


def synthetic(obs, act, agents=("a", "b"), turn_based=False, mask=False):
    return EnvSpec(tuple(agents), dict.fromkeys(agents, obs), dict.fromkeys(agents, act), turn_based, mask)


@pytest.fixture(scope="module")
def specs():
    """Real envs as the CLI sees them, and spaces no shipped env has (images, MultiDiscrete, Text)."""
    return {
        "tictactoe_v3": spec_of(tictactoe_v3.env), "connect_four_v3": spec_of(connect_four_v3.env),
        "simple_spread_v3": spec_of(simple_spread_v3.parallel_env),
        "simple_spread_v3 (AEC)": spec_of(simple_spread_v3.env),
        "CartPole-v1": spec_of(lambda: gym.make("CartPole-v1")),
        "Pendulum-v1": spec_of(lambda: gym.make("Pendulum-v1")),
        "images": synthetic(gym.spaces.Box(0, 255, (32, 32, 3), np.uint8), gym.spaces.Box(-1, 1, (2,))),
        "multidiscrete": synthetic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiDiscrete([2, 3])),
        "text observations": synthetic(gym.spaces.Text(5), gym.spaces.Discrete(2)),
        "board-shaped, parallel": synthetic(gym.spaces.Box(0, 1, (3, 3, 2), np.int8), gym.spaces.Discrete(9)),
        "turn-based box": synthetic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), turn_based=True),
    }


def test_the_built_in_entries_name_the_library_classes():
    """The registry is the command line's old table in library form: names, order, numpy cores, backend
    classes, action spaces, joint flag (cli.agents.ALGORITHMS had these; the CLI now reads the registry)."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    import marl_note.agents.tf as tf_agents
    import marl_note.agents.torch as torch_agents
    from marl_note.contrib.alphazero import tf as az_tf
    from marl_note.contrib.alphazero import torch as az_torch
    from marl_note.contrib.alphazero.core import AlphaZeroCore

    assert registry.names() == BUILTIN
    expected = {"dqn": ("DQN", DQNCore, ("Discrete",), False), "ppo": ("PPO", PPOCore, ("Discrete", "Box"), False),
                "ddpg": ("DDPG", None, ("Box",), False), "sac": ("SAC", None, ("Discrete", "Box"), False),
                "maddpg": ("MADDPG", None, ("Discrete", "Box"), True),
                "mappo": ("MAPPO", None, ("Discrete",), True), "ippo": ("IPPO", None, ("Discrete",), True),
                "vdn": ("VDN", None, ("Discrete",), True), "qmix": ("QMIX", None, ("Discrete",), True),
                "nfsp": ("NFSP", None, ("Discrete",), False),
                "alphazero": ("AlphaZero", AlphaZeroCore, ("Discrete",), False)}
    for name, (cls, core, actions, joint) in expected.items():
        entry = registry.get(name)
        torch_mod, tf_mod = (az_torch, az_tf) if name == "alphazero" else (torch_agents, tf_agents)
        assert entry.cls("torch") is getattr(torch_mod, cls) and entry.cls("tf") is getattr(tf_mod, cls), name
        assert core is None or entry.core_cls() is core
        assert entry.core_cls().__name__ == f"{cls}Core"
        assert (entry.actions, entry.joint) == (actions, joint)
        assert dict(entry.tiny)  # check_agent builds each small
    assert dict(registry.BACKENDS) == dict(cli_agents.BACKENDS)


def test_the_command_line_and_the_zoo_offer_exactly_the_registered_algorithms():
    """--algo's choices and help, and the algorithms a recipe may name, are registry.names(): a newly
    registered algorithm is offered, and an unregistered one is gone."""
    from marl_note.cli.parser import build_parser

    def choices():
        train = build_parser()._subparsers._group_actions[0].choices["train"]
        algo = next(a for a in train._actions if a.dest == "algo")
        return list(algo.choices), " ".join(train.epilog.split())  # the help is wrapped to 100 columns

    names, epilog = choices()
    assert names == BUILTIN and "maddpg (Discrete or Box actions, one learner over every seat" in epilog
    try:
        registry.register("zz-mine", core=DQNCore, torch="marl_note.agents.torch.dqn.DQN", actions=("Discrete",),
                          on_policy=False)
        names, epilog = choices()
        assert names == [*BUILTIN, "zz-mine"] and "zz-mine (Discrete actions)" in " ".join(epilog.split())
        recipe = zoo.check_recipe({"version": 1, "env": "CartPole-v1", "algo": "zz-mine", "seeds": [0],
                                   "agent": {"lr": 1e-3}, "trainer": {"test_freq": 1}, "budget": {"episodes": 1},
                                   "result": {"status": "not measured"}})
        assert recipe.algo == "zz-mine" and recipe.seats == "independent"
    finally:
        registry.unregister("zz-mine")
    assert choices()[0] == BUILTIN
    with pytest.raises(zoo.RecipeError,
                       match=r"algo 'zz-mine' is not one of dqn, ppo, ddpg, sac, maddpg, mappo, ippo, vdn, qmix, nfsp, "
                             r"alphazero"):
        zoo.check_recipe({"version": 1, "env": "CartPole-v1", "algo": "zz-mine", "seeds": [0],
                          "trainer": {"test_freq": 1}, "budget": {"episodes": 1}, "result": {"status": "not measured"}})


def test_an_alphazero_recipe_has_its_agent_options_checked():
    """The zoo's own table of numpy cores had no alphazero: a recipe with [agent] options raised KeyError."""
    data = {"version": 1, "env": "tictactoe_v3", "algo": "alphazero", "seeds": [0], "seats": "self-play",
            "agent": {"num_simulations": 8}, "trainer": {"test_freq": 1}, "budget": {"episodes": 1},
            "result": {"status": "not measured"}}
    assert zoo.check_recipe(data).agent == {"num_simulations": 8}
    with pytest.raises(zoo.RecipeError, match=r"\[agent\] 'num_simulation' is no option of alphazero \(did you mean "
                                              r"'num_simulations'\?\)"):
        zoo.check_recipe({**data, "agent": {"num_simulation": 8}})


JOINT_FIT = ["dqn", "ppo", "sac", "maddpg", "mappo", "ippo", "vdn", "qmix", "nfsp"]  # a Discrete Parallel env


def test_fitting_algorithms_on_every_env(specs):
    assert registry.fitting(specs["tictactoe_v3"]) == ["dqn", "ppo", "sac", "nfsp", "alphazero"]
    assert registry.fitting(specs["connect_four_v3"]) == ["dqn", "ppo", "sac", "nfsp", "alphazero"]
    assert registry.fitting(specs["simple_spread_v3"]) == JOINT_FIT
    assert registry.fitting(specs["simple_spread_v3 (AEC)"]) == ["dqn", "ppo", "sac", "nfsp"]
    assert registry.fitting(specs["CartPole-v1"]) == JOINT_FIT
    assert registry.fitting(specs["Pendulum-v1"]) == ["ppo", "ddpg", "sac", "maddpg"]
    assert registry.fitting(specs["images"]) == ["ppo", "ddpg", "sac"]
    assert registry.fitting(specs["multidiscrete"]) == []
    assert registry.fitting(specs["text observations"]) == []
    assert registry.fitting(specs["board-shaped, parallel"]) == JOINT_FIT
    assert registry.fitting(specs["turn-based box"]) == ["ppo", "ddpg", "sac"]
    for env, spec in specs.items():
        assert cli_agents.fitting_algorithms(spec) == registry.fitting(spec), env
    assert registry.problem("alphazero", specs["board-shaped, parallel"]) == \
        "alphazero searches turn-based board games, and this env is not turn-based"
    assert registry.problem("maddpg", specs["images"]) == ("maddpg reads no images (it has no conv torso yet), but "
                                                           "seat 'a' observes Box(0, 255, (32, 32, 3), uint8)")


def test_reading_the_registry_imports_no_framework_and_alphazero_registers_itself():
    """Names, entries, numpy cores, fitting and on-policy answers without torch, TensorFlow or any optional
    part: the core registry does not name AlphaZero; importing marl_note.contrib.alphazero registers it
    (still without a framework), and names() keeps the built-in order whatever is imported when."""
    code = """
import sys
import gymnasium as gym
from marl_note.agents import registry
from marl_note.types import EnvSpec
assert registry.names() == ["dqn", "ppo", "ddpg", "sac", "maddpg", "mappo", "ippo", "vdn", "qmix", "nfsp"], \\
    registry.names()
spec = EnvSpec(("a",), {"a": gym.spaces.Box(-1, 1, (3,))}, {"a": gym.spaces.Discrete(2)}, False, False)
assert [registry.get(n).problem(spec) is None for n in ("dqn", "ddpg")] == [True, False]
cores = [registry.get(n).core_cls() for n in ("dqn", "ppo", "ddpg", "sac", "maddpg")]
assert [registry.is_on_policy(c) for c in cores] == [False, True, False, False, False]
import marl_note.agents.checks, marl_note.envs.checks, marl_note.replay.checks
bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "keras", "ray")
       or m.startswith(("marl_note.agents.torch", "marl_note.agents.tf",
                        "marl_note.trainers", "marl_note.cli", "marl_note.contrib", "marl_note.compat"))]
assert not bad, bad
registry.register("beta", core="marl_note.agents.dqn.DQNCore", torch="x.y.Beta", actions=("Discrete",), on_policy=False)
import marl_note.contrib.alphazero
assert registry.names() == ["dqn", "ppo", "ddpg", "sac", "maddpg", "mappo", "ippo", "vdn", "qmix", "nfsp", "alphazero",
                            "beta"], \\
    registry.names()
assert registry.get("alphazero").core_cls().__name__ == "AlphaZeroCore"
bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "keras", "ray")
       or m.startswith(("marl_note.agents.torch", "marl_note.agents.tf", "marl_note.contrib.alphazero.torch",
                        "marl_note.contrib.alphazero.tf"))]
assert not bad, bad
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_get_names_an_unknown_algorithm_and_what_is_registered():
    with pytest.raises(UnknownAlgorithm, match=r"no algorithm is registered as 'pop' \(did you mean 'ppo'\?\); "
                                               r"registered: dqn, ppo, ddpg, sac, maddpg, mappo, ippo, vdn, qmix, "
                                               r"nfsp, alphazero"):
        registry.get("pop")
    with pytest.raises(KeyError):  # an UnknownAlgorithm is a KeyError too
        registry.get("nothing")


@pytest.mark.parametrize("fields, message", [
    (dict(name="dqn"), r"'dqn' is already registered \(core marl_note.agents.dqn.DQNCore\); pass replace=True"),
    (dict(name="My DQN"), r"lowercase letters, digits, '_' or '-'.*got 'My DQN'"),
    (dict(torch=None), r"'mine' names no backend class: give torch=\.\.\., tf=\.\.\. and/or numpy=\.\.\."),
    (dict(actions=("Discrete", "Graph")), r"actions must name spaces among Discrete, Box, MultiDiscrete, MultiBinary"),
    (dict(actions="Discrete"), r"actions must name spaces among"),
    (dict(actions=()), r"actions must name spaces among"),
    (dict(on_policy=None), r"on_policy must be True or False, got None \(declare whether it learns only"),
    (dict(on_policy="no"), r"on_policy must be True or False, got 'no'"),
    (dict(joint=1), r"joint must be True or False, got 1"),
    (dict(core="DQNCore"), r"core must be a dotted path 'package.module.Name' or the object itself, got 'DQNCore'"),
    (dict(torch=42), r"torch class must be a dotted path .* got int 42"),
    (dict(tiny=[("hidden_sizes", (8,))]), r"tiny must be a mapping of constructor options"),
])
def test_register_refuses_a_duplicate_name_or_a_bad_entry_naming_the_field(fields, message):
    entry = dict(name="mine", core=DQNCore, torch="marl_note.agents.torch.dqn.DQN", actions=("Discrete",),
                 on_policy=False)
    entry.update(fields)
    with pytest.raises(RegistryError, match=message):
        registry.register(entry.pop("name"), **entry)
    assert registry.names() == BUILTIN


def test_a_user_algorithm_is_registered_found_and_replaced_and_its_code_resolved_only_when_asked():
    try:
        entry = registry.register("mine", core="marl_note.agents.dqn.DQNCore", torch="no_such_package.agents.Mine",
                                  tf="marl_note.agents.tf.dqn.NoSuchClass", actions=["Discrete"], on_policy=False)
        assert registry.names()[-1] == "mine" and registry.get("mine") is entry and entry.actions == ("Discrete",)
        assert entry.core_cls() is DQNCore
        with pytest.raises(ImportError, match=r"algorithm 'mine' with backend torch needs PyTorch, which cannot be "
                                              r"imported \(No module named 'no_such_package'\): pip install"):
            entry.cls("torch")
        pytest.importorskip("tensorflow")
        with pytest.raises(RegistryError, match=r"its tf class 'marl_note.agents.tf.dqn.NoSuchClass' does not exist"):
            entry.cls("tf")
        with pytest.raises(RegistryError, match=r"backend must be one of torch, tf, numpy, got 'jax'"):
            entry.cls("jax")
        fixed = registry.register("mine", replace=True, core=DQNCore, tf="marl_note.agents.tf.dqn.DQN",
                                  actions=("Discrete",), on_policy=False)
        assert registry.get("mine") is fixed and fixed.backends == ("tf",)
        with pytest.raises(RegistryError, match=r"'mine' has no torch class; it has tf"):
            fixed.cls("torch")
    finally:
        registry.unregister("mine")
    assert registry.names() == BUILTIN


def test_on_policy_is_declared_once_not_probed_from_attributes():
    """Today the pool asks isinstance(PPOCore) and the adaptive callback hasattr(agent, "rollout"): a second
    on-policy algorithm runs as off-policy in the pool. is_on_policy reads the registry (or a class-body
    declaration) and nothing the instance happens to hold."""
    torch_agents = pytest.importorskip("marl_note.agents.torch")

    class OnPolicyDQN(torch_agents.DQN):  # a second on-policy algorithm (it is not a PPOCore)
        pass

    class HoldsARollout(torch_agents.DQN):  # off-policy, yet has a `rollout` attribute
        rollout = []

    class UserPPO(torch_agents.PPO):  # an unregistered subclass inherits its algorithm's answer
        pass

    class Declared:  # an unregistered agent declaring it in its class body
        on_policy = True

    class WrongDeclaration(torch_agents.DQN):
        on_policy = True  # a subclass below the registered class overrides the registry

    assert [registry.is_on_policy(c) for c in (torch_agents.PPO, PPOCore, torch_agents.DQN, DQNCore)] == \
        [True, True, False, False]
    assert registry.is_on_policy(UserPPO) and not registry.is_on_policy(HoldsARollout)
    assert registry.is_on_policy(Declared()) and registry.is_on_policy(WrongDeclaration)
    try:
        registry.register("on-policy-dqn", core=DQNCore, torch=OnPolicyDQN, actions=("Discrete",), on_policy=True)
        assert registry.is_on_policy(OnPolicyDQN) is True
        assert registry.entry_of(OnPolicyDQN).name == "on-policy-dqn" and registry.entry_of(HoldsARollout).name == "dqn"
    finally:
        registry.unregister("on-policy-dqn")
    with pytest.raises(TypeError, match=r"object declares no on_policy: register its algorithm"):
        registry.is_on_policy(object())
    assert registry.is_on_policy(object(), default=False) is False


def test_a_registered_class_whose_inherited_declaration_contradicts_its_entry_is_refused():
    torch_agents = pytest.importorskip("marl_note.agents.torch")

    class Base:
        on_policy = True

    class Mixed(Base, torch_agents.DQN):  # the registered entry says off-policy; what it inherits says on
        pass

    try:
        registry.register("mixed", core=DQNCore, torch=Mixed, actions=("Discrete",), on_policy=False)
        with pytest.raises(TypeError, match=r"Mixed declares on_policy = True, but its registered algorithm 'mixed' "
                                            r"says on_policy=False: make them agree"):
            registry.is_on_policy(Mixed)
    finally:
        registry.unregister("mixed")
