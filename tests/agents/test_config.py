"""Configuration written once: ``config=`` plus keyword overrides, the deprecated capitalised names,
and what checkpoints, ``set()`` and the command line make of them."""
import dataclasses
import inspect
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.checkpoints import restore
from marl_note.agents.ddpg import DDPGConfig, DDPGCore
from marl_note.agents.dqn import DQNConfig, DQNCore
from marl_note.agents.maddpg import MADDPGConfig, MADDPGCore
from marl_note.agents.options import RENAMED
from marl_note.agents.ppo import PPOConfig, PPOCore
from marl_note.agents.sac import SACConfig, SACCore
from marl_note.compat.rl import RLConfig, RLCore
from marl_note.contrib.alphazero.core import AlphaZeroConfig, AlphaZeroCore

torch = pytest.importorskip("torch")
A = pytest.importorskip("marl_note.agents.torch")

BOX = gym.spaces.Box(-1, 1, (3,), np.float32)
TWO = gym.spaces.Discrete(2)
ACT_BOX = gym.spaces.Box(-1, 1, (2,), np.float32)
BOARD = gym.spaces.Box(0, 1, (3, 3, 2), np.int8)
RELEASE = Path(__file__).resolve().parents[1] / "fixtures" / "release-0.1.0"
RUNTIME = {"seed", "device", "compile", "numpy_acting"}
CORES = [(DQNCore, DQNConfig), (PPOCore, PPOConfig), (DDPGCore, DDPGConfig), (SACCore, SACConfig),
         (MADDPGCore, MADDPGConfig), (AlphaZeroCore, AlphaZeroConfig), (RLCore, RLConfig)]


def build(name, **kwargs):
    """A small torch agent of algorithm ``name`` with ``kwargs``."""
    if name == "MADDPG":
        return A.MADDPG({"a": BOX, "b": BOX}, {"a": TWO, "b": ACT_BOX}, hidden_sizes=(8,), seed=0, **kwargs)
    if name == "AlphaZero":
        return A.AlphaZero(BOARD, gym.spaces.Discrete(9), hidden_sizes=(8,), num_simulations=2, seed=0, **kwargs)
    act = TWO if name in ("DQN", "PPO", "SAC") else ACT_BOX
    return getattr(A, name)(BOX, act, hidden_sizes=(8,), seed=0, **kwargs)


def deprecations(record):
    return [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("core, config_class", CORES, ids=lambda c: getattr(c, "__name__", ""))
def test_the_constructor_writes_no_hyperparameter_and_lists_every_field(core, config_class):
    """Each default lives in the config: the signature shows every field with the field's own default,
    and the constructor itself declares only the spaces, config= and the runtime options."""
    params = inspect.signature(core.__init__).parameters
    fields = {f.name: f.default for f in dataclasses.fields(config_class)}
    assert {k: params[k].default for k in fields} == fields
    assert params["config"].default is None
    code = inspect.unwrap(core.__init__).__code__  # the parameters the def itself writes
    written = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    assert not set(written) & set(fields), "a hyperparameter is written in the constructor again"
    assert len(written) <= 9


@pytest.mark.parametrize("name, config_class, own", [
    ("DQN", DQNConfig, dict(lr=1e-2, target_update=7)), ("PPO", PPOConfig, dict(lr=1e-2, n_steps=16)),
    ("DDPG", DDPGConfig, dict(actor_lr=1e-2, tau=0.1)), ("SAC", SACConfig, dict(critic_lr=1e-2, tau=0.1)),
    ("MADDPG", MADDPGConfig, dict(actor_lr=1e-3, tau=0.1)), ("AlphaZero", AlphaZeroConfig, dict(lr=1e-2, c_puct=2.0)),
])
def test_config_plus_overrides_builds_the_agent_the_keywords_build(name, config_class, own):
    first, second = list(own)
    base = config_class(hidden_sizes=(8,), **{first: own[first]})
    agent = build(name, config=base, **{second: own[second]})
    assert (getattr(agent.cfg, first), getattr(agent.cfg, second)) == (own[first], own[second])
    assert base == config_class(hidden_sizes=(8,), **{first: own[first]})  # the given config is left as it was
    same = build(name, **own)
    assert agent.cfg == same.cfg and agent.config == same.config and "config" not in agent.config
    mine, theirs = agent.state_dict(), same.state_dict()
    assert mine.keys() == theirs.keys()
    for key in mine:
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)


def test_an_override_beats_the_config_and_a_keyword_given_next_to_it():
    agent = A.DQN(BOX, TWO, config=DQNConfig(hidden_sizes=(8,), lr=1e-2, gamma=0.5), gamma=0.9)
    assert (agent.cfg.lr, agent.cfg.gamma, agent.config["lr"], agent.config["gamma"]) == (1e-2, 0.9, 1e-2, 0.9)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(lrr=1e-3), TypeError, r"DQN got an unexpected keyword argument 'lrr' \(did you mean 'lr'\?\)"),
    (dict(prioritised=True), TypeError, r"'prioritised' \(did you mean 'prioritized'\?\)"),
    (dict(config=PPOConfig()), TypeError, r"DQN takes config=DQNConfig\(\.\.\.\), got PPOConfig"),
    (dict(config={"lr": 1e-3}), TypeError, r"DQN takes config=DQNConfig\(\.\.\.\), got dict"),
    (dict(PR=True, prioritized=True), TypeError, "give prioritized or its old name PR, not both"),
    (dict(prioritized="yes"), TypeError, "prioritized must be True or False"),
    (dict(lr=-1.0), ValueError, "lr must be a positive finite number"),
])
def test_bad_config_arguments_are_refused_by_name(kwargs, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(error, match=match):
            A.DQN(BOX, TWO, **kwargs)


def test_an_option_group_checks_its_fields_in_every_config_that_extends_it():
    for config_class in (DQNConfig, DDPGConfig, SACConfig, RLConfig):
        with pytest.raises(ValueError, match="buffer_size must be a positive integer"):
            config_class(buffer_size=0)
        with pytest.raises(ValueError, match="initial_td must be a positive finite number"):
            config_class(initial_td=0.0)
    for config_class in (DQNConfig, PPOConfig, DDPGConfig, SACConfig, MADDPGConfig, AlphaZeroConfig):
        with pytest.raises(ValueError, match="activation must be one of"):
            config_class(activation="sigmoid")


@pytest.mark.parametrize("name, old, new, value", [
    ("DQN", "PR", "prioritized", True), ("DQN", "initial_TD", "initial_td", 2.0),
    ("DDPG", "PR", "prioritized", True), ("SAC", "initial_TD", "initial_td", 3.0),
    ("PPO", "PR", "prioritized", True), ("MADDPG", "MARL", "centralized_critic", False),
])
def test_a_capitalised_name_still_works_with_a_deprecation_warning_naming_the_new_one(name, old, new, value):
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}") as record:
        agent = build(name, **{old: value})
    assert getattr(agent.cfg, new) == value and agent.config[new] == value and old not in agent.config
    assert len(deprecations(record)) == 1
    assert record[0].filename == __file__  # the warning points at the caller's line


def test_an_rl_subclass_passing_pr_gets_prioritized_replay_with_a_warning():
    class Linear(A.RL):
        def __init__(self, observation_space, action_space):
            super().__init__(observation_space, action_space, PR=True, initial_TD=2.0, learning_starts=4)
            self.q = torch.nn.Linear(self.obs_dim, self.n_actions)
            self.optimizer = torch.optim.SGD(self.q.parameters(), lr=0.1)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            return self.q(s).pow(2).mean()

        def td_error(self, s, a, next_s, r, d):
            return self.q(s).abs().sum(1)

    with pytest.warns(DeprecationWarning) as record:
        agent = Linear(BOX, TWO)
    assert (agent.cfg.prioritized, agent.cfg.initial_td) == (True, 2.0)
    assert type(agent.replay).__name__ == "PrioritizedReplayBuffer"
    assert [m.split(" (")[0] for m in deprecations(record)] == [
        "Linear: PR is deprecated, use prioritized", "Linear: initial_TD is deprecated, use initial_td"]
    with pytest.raises(TypeError, match=r"unexpected argument\(s\) \['MARL'\]"):
        A.RL.__init__(Linear.__new__(Linear), BOX, TWO, MARL=True)


def test_reading_a_capitalised_field_warns_and_gives_the_new_one():
    cfg = DQNConfig(prioritized=True, initial_td=3.0)
    with pytest.warns(DeprecationWarning, match="initial_TD is deprecated, use initial_td"):
        assert cfg.initial_TD == 3.0
    with pytest.warns(DeprecationWarning, match="PR is deprecated, use prioritized"):
        assert cfg.PR is True


def test_the_alias_table_is_the_one_place_the_old_names_live():
    assert dict(RENAMED) == {"PR": "prioritized", "initial_TD": "initial_td", "MARL": "centralized_critic"}
    for core, config_class in CORES:
        params = inspect.signature(core.__init__).parameters
        assert not set(RENAMED) & (set(params) | set(config_class.field_names())), core.__name__


def test_a_checkpoint_of_an_agent_built_from_a_config_restores_it(tmp_path):
    agent = A.DQN(BOX, TWO, config=DQNConfig(hidden_sizes=(8,), prioritized=True, lr=5e-3), gamma=0.9, seed=1)
    again = A.DQN.restore(agent.save(tmp_path / "dqn"))
    assert again.cfg == agent.cfg and again.config == agent.config
    obs = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_array_equal(again.q_values(obs), agent.q_values(obs))


@pytest.mark.parametrize("name, old", [("dqn_torch", "PR"), ("ppo_torch", "initial_TD"), ("ddpg_torch", "PR"),
                                       ("maddpg_torch", "MARL")])
def test_a_release_checkpoint_recording_the_old_names_restores_without_a_warning(name, old):
    from marl_note.agents.checkpoints import read_checkpoint

    manifest, _ = read_checkpoint(RELEASE / f"{name}.zip")
    assert old in manifest["config"]  # written by 0.1.0 with the capitalised name
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        agent = restore(RELEASE / f"{name}.zip")
    assert deprecations(record) == []
    assert old not in agent.config and RENAMED[old] in agent.config
    if old == "MARL":
        assert agent.cfg.centralized_critic is (manifest["config"]["MARL"] is not False)
    else:
        assert getattr(agent.cfg, RENAMED[old]) == manifest["config"][old]


def test_set_keeps_the_original_capitalised_names_without_a_warning():
    from marl_note.compat.torch import DQN  # the original workflow (set/train) lives in marl_note.compat

    agent = DQN(BOX, TWO, hidden_sizes=(8,), seed=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        agent.set(PR=True, initial_TD=7, alpha=0.7)
    assert deprecations(record) == []
    assert (agent.cfg.prioritized, agent.cfg.initial_td, agent.cfg.alpha) == (True, 7.0, 0.7)
    assert agent.config["prioritized"] is True and "PR" not in agent.config


def test_the_command_line_and_recipes_take_the_lowercase_names_and_no_config():
    from marl_note.cli.agents import check_agent_kwargs
    from marl_note.cli.common import CLIError

    check_agent_kwargs("dqn", {"prioritized": True, "initial_td": 2.0, "lr": 1e-3})
    with pytest.raises(CLIError, match="DQN takes no argument 'config'"):
        check_agent_kwargs("dqn", {"config": {}})


def test_the_old_module_of_maddpg_config_warns():
    import importlib
    import sys

    sys.modules.pop("marl_note.agents.maddpg_config", None)
    with pytest.warns(DeprecationWarning, match="marl_note.agents.maddpg_config moved to marl_note.agents.maddpg"):
        old = importlib.import_module("marl_note.agents.maddpg_config")
    assert old.MADDPGConfig is MADDPGConfig
