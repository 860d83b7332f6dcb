"""``backend="auto"`` (marl_note.agents.backend_choice): numpy for measured-faster MLPs on a CPU, torch
otherwise, never TensorFlow; and ``train --backend auto`` on the command line."""
import json
import os

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import registry
from marl_note.agents.backend_choice import NUMPY_FASTER, BackendChoice, choose_backend

FLAT = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)


def user_torso(shape):  # a framework module factory; never called by the choice
    raise AssertionError("choose_backend built a torso")


@pytest.mark.parametrize("algo", sorted(NUMPY_FASTER))
def test_a_measured_mlp_on_the_cpu_gets_numpy(algo):
    choice = choose_backend(algo, options={"hidden_sizes": (64, 64)}, observation_spaces=[FLAT])
    assert choice.backend == "numpy"
    assert choice.reason == f"MLP {algo} (64-64) on the CPU: bench/ measured the numpy backend faster"


def test_dqn_with_its_default_network_gets_numpy():
    """DQN's default 128-128 is within the measured width (the choice reads the config's default)."""
    assert choose_backend("dqn", observation_spaces=[FLAT]).backend == "numpy"


@pytest.mark.parametrize("options, spaces, reason", [
    (dict(torso="conv"), [FLAT], "a conv torso (the numpy backend builds MLPs only)"),
    ({}, [FLAT, IMAGE], "image observations (read through a conv torso)"),
    (dict(torso=user_torso), [FLAT], "a user-supplied torso (a framework module)"),
    (dict(device="cuda"), [FLAT], "device='cuda': an accelerator trains through torch"),
    (dict(device="auto"), [FLAT], "device='auto': an accelerator trains through torch"),
    (dict(hidden_sizes=(64, 512)), [FLAT],
     f"dqn (64-512): wider than the {NUMPY_FASTER['dqn']} units at which bench/ measured the numpy backend faster"),
], ids=["conv torso", "image observations", "user torso", "cuda", "device auto", "too wide"])
def test_torch_for_what_numpy_cannot_build_or_was_not_measured_faster_at(options, spaces, reason):
    assert choose_backend("dqn", options=options, observation_spaces=spaces) == (
        BackendChoice("torch", reason))


def test_an_mlp_torso_on_images_is_still_numpy():
    """``torso="mlp"`` flattens images: an MLP the numpy backend builds."""
    assert choose_backend("dqn", options=dict(torso="mlp", hidden_sizes=(64,)), observation_spaces=[IMAGE]).backend \
        == "numpy"


def test_algorithms_without_a_numpy_class_or_not_measured_faster_get_torch():
    pytest.importorskip("marl_note.contrib.alphazero")  # registers "alphazero" (torch and tf classes)
    assert choose_backend("alphazero").reason == "alphazero has no numpy class"
    assert choose_backend("alphazero").backend == "torch"
    for algo in ("ddpg", "maddpg"):  # numpy classes, not measured faster
        choice = choose_backend(algo, options={"hidden_sizes": (64, 64)}, observation_spaces=[FLAT])
        assert choice.backend == "torch" and "has not measured the numpy backend faster" in choice.reason


def test_auto_never_picks_tensorflow():
    entry = registry.get("dqn")
    registry.register("tf-only-dqn", core=entry.core, torch=None, tf=entry.tf, actions=entry.actions,
                      on_policy=False)
    try:
        with pytest.raises(ValueError, match="backend 'auto' picks torch or numpy, and tf-only-dqn has neither "
                                             r"\(it has tf\): ask for backend='tf'"):
            choose_backend("tf-only-dqn")
    finally:
        registry.unregister("tf-only-dqn")
    with pytest.raises(registry.UnknownAlgorithm):
        choose_backend("dqm")


def test_train_backend_auto_prints_and_records_the_choice(tmp_path, capsys):
    from marl_note.cli import main

    out = str(tmp_path / "run")
    assert main(["train", "--env", "CartPole-v1", "--algo", "dqn", "--backend", "auto", "--env-steps", "300",
                 "--num-envs", "2", "--agent-arg", "hidden_sizes=[32,32]", "--out", out]) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("training dqn")]
    assert header and header[0].startswith("training dqn (numpy, auto: MLP dqn (32-32) on the CPU: bench/ measured "
                                           "the numpy backend faster) on CartPole-v1"), header
    assert json.load(open(os.path.join(out, "marl_note_run.json")))["backend"] == "numpy"


@pytest.mark.parametrize("name, backend", [("tictactoe_v3", "numpy"), ("CartPole-v1", "numpy")])
def test_a_zoo_recipe_run_with_backend_auto_records_the_backend_chosen(name, backend):
    """tic-tac-toe's recipe is a 128-128 DQN and CartPole's a 256-256 one: numpy measured faster at both
    (the torch cases, conv torsos and wider networks, are checked on choose_backend above)."""
    from marl_note.cli.zoo import recipe
    from marl_note.cli.zoo_run import prepare

    run = prepare(recipe(name), seed=0, backend="auto")
    try:
        assert run.backend == backend
        assert all(type(agent).__module__.startswith(f"marl_note.agents.{backend}.") for agent in run.learners.values())
    finally:
        run.close()
