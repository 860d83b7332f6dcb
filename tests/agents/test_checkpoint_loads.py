"""A failed load changes nothing: every array is checked first, damaged files give CheckpointError,
and a manifest cannot make the loader build networks its arrays do not match."""
import importlib
import io
import json
import os
import time
import tracemalloc
import zipfile

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.checkpoints import CheckpointError, read_checkpoint
from marl_note.types import Transitions
from tests.checkpoint_helpers import rewrite_checkpoint

torch_agents = pytest.importorskip("marl_note.agents.torch")

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def backend(name):
    if name == "tf":
        pytest.importorskip("tensorflow")
    return importlib.import_module(f"marl_note.agents.{name}")


def trained(mod, seed=1):
    rng = np.random.default_rng(seed)
    agent = mod.DQN(OBS, ACT, hidden_sizes=(8,), learning_starts=8, update_steps=2, seed=seed)
    agent.observe(Transitions(obs=rng.uniform(-1, 1, (16, 4)).astype(np.float32), act=rng.integers(0, 3, 16),
                              rew=rng.normal(size=16).astype(np.float32),
                              next_obs=rng.uniform(-1, 1, (16, 4)).astype(np.float32),
                              terminated=rng.random(16) < 0.2, truncated=np.zeros(16, bool)))
    agent.update(8)
    return agent


def snapshot(obj):
    """Exact bytes of every state array (NaN-safe), to compare states bit for bit."""
    return {k: (np.asarray(v).dtype.str, np.shape(v), np.asarray(v).tobytes()) for k, v in obj.state_dict().items()}


# --------------------------------------------------------------------------- every array checked first

@pytest.mark.parametrize("name", ["torch", "tf"])
def test_restore_param_with_a_bad_array_changes_nothing(tmp_path, name):
    mod = backend(name)
    source, live = trained(mod, seed=1), trained(mod, seed=2)
    keys = sorted(source.param_keys())
    last = keys[-1]  # checked last, so everything before it used to be assigned already
    cases = {
        "text": lambda a: a.update({last: np.full(a[last].shape, "x")}),
        "complex": lambda a: a.update({last: a[last].astype(np.complex64)}),
        "nan": lambda a: a.update({last: np.where(np.arange(a[last].size).reshape(a[last].shape) == 0, np.nan,
                                                  a[last])}),
        "too big": lambda a: a.update({last: np.full(a[last].shape, 1e300)}),
    }
    before = snapshot(live)
    for case, edit in cases.items():
        path = source.save_param(tmp_path / case)
        rewrite_checkpoint(path, edit)
        with pytest.raises(CheckpointError) as info:
            live.restore_param(path)
        assert snapshot(live) == before, case
        assert f"'{last}'" in str(info.value)  # the message names the array
    path = source.save_param(tmp_path / "ints")  # integers into float weights are fine
    rewrite_checkpoint(path, lambda a: a.update({k: np.round(a[k] * 4).astype(np.int64) for k in keys}))
    live.restore_param(path)
    assert np.array_equal(live.state_dict()[keys[0]], np.round(source.state_dict()[keys[0]] * 4))


@pytest.mark.parametrize("name", ["torch", "tf"])
def test_restore_param_refuses_weights_saved_for_other_spaces(tmp_path, name):
    mod = backend(name)
    source = trained(mod, seed=1)
    weights, whole = source.save_param(tmp_path / "weights"), source.save(tmp_path / "whole.zip")
    cases = {  # every one has the source's network shapes, so only the spaces tell them apart
        "uint8 pixels": (gym.spaces.Box(0, 255, (4,), np.uint8), ACT,
                         ["observation_space: dtype uint8, the checkpoint has float32",
                          "observation_space: bounds [0, 255], the checkpoint has [-1.0, 1.0]"]),
        "float64": (gym.spaces.Box(-1, 1, (4,), np.float64), ACT,
                    ["observation_space: dtype float64, the checkpoint has float32"]),
        "bounds": (gym.spaces.Box(np.array([-1, -1, -1, -5]), 1, (4,), np.float32), ACT,
                   ["observation_space: bounds [[-1., -1., -1., -5.], 1.0], the checkpoint has [-1.0, 1.0]"]),
        "start": (OBS, gym.spaces.Discrete(3, start=1), ["action_space: start=1, the checkpoint has start=0"]),
    }
    for case, (obs_space, act_space, lines) in cases.items():
        live = mod.DQN(obs_space, act_space, hidden_sizes=(8,), seed=2)
        before = snapshot(live)
        for path in (weights, whole):
            with pytest.raises(CheckpointError) as info:
                live.restore_param(path)
            assert snapshot(live) == before, case
            message = str(info.value)
            assert "the checkpoint was saved for other spaces than this agent's" in message
            assert all(line in message for line in lines) and message.endswith("pass strict=False to load the "
                                                                               "weights anyway"), message
        live.restore_param(weights, strict=False)  # the caller's choice: the weights fit, so they load
        ours, theirs = live.state_dict(), source.state_dict()
        assert all(np.array_equal(ours[k], theirs[k]) for k in source.param_keys())
    with pytest.raises(TypeError, match="strict must be True or False"):
        live.restore_param(weights, strict="no")
    same = mod.DQN(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3), hidden_sizes=(8,), seed=3)
    same.restore_param(weights)  # equal spaces built anew load as before


def test_space_differences_name_every_part():
    from marl_note.agents.checkpoints.space_check import space_differences

    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    saved = gym.spaces.Dict({"pos": box, "goal": gym.spaces.Tuple([gym.spaces.Discrete(4),
                                                                  gym.spaces.MultiDiscrete([2, 3])])})
    assert space_differences(saved, saved, "obs") == []
    live = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,), np.float32),
                            "goal": gym.spaces.Tuple([gym.spaces.Discrete(5), gym.spaces.MultiDiscrete([2, 4])])})
    assert space_differences(saved, live, "obs") == [
        "obs['goal'][0]: n=5, the checkpoint has n=4", "obs['goal'][1]: nvec [2, 4], the checkpoint has [2, 3]",
        "obs['pos']: shape (3,), the checkpoint has (2,)"]
    assert space_differences(saved, gym.spaces.Dict({"pos": box}), "obs") == [
        "obs: keys ['pos'], the checkpoint has ['goal', 'pos']"]
    assert space_differences(box, gym.spaces.Discrete(2), "obs") == ["obs: a Discrete space, the checkpoint has a Box"]
    assert space_differences(gym.spaces.MultiBinary(3), gym.spaces.MultiBinary(4), "act") == [
        "act: n=4, the checkpoint has n=3"]
    per_agent = {"a": box, "b": gym.spaces.Discrete(2)}  # one space per agent (MADDPG): the order counts too
    assert space_differences(per_agent, {"b": gym.spaces.Discrete(2), "a": box}, "observation_spaces") == [
        "observation_spaces: agents ['b', 'a'], the checkpoint has ['a', 'b']"]
    assert space_differences(per_agent, {"a": box, "b": gym.spaces.Discrete(3)}, "observation_spaces") == [
        "observation_spaces['b']: n=3, the checkpoint has n=2"]


def test_restore_checks_counters_and_every_array(tmp_path):
    agent = trained(torch_agents)
    cases = {
        "fraction": (lambda a: a.update(updates=np.asarray(2.5)), r"'updates' holds non-integer values"),
        "negative uint": (lambda a: a.update(rng=a["rng"].astype(np.int64) * -1), r"'rng' holds values outside"),
        "text counter": (lambda a: a.update(agent_steps=np.asarray("12")), r"'agent_steps' has dtype <U2"),
        "inf weight": (lambda a: a.update({"q_net.0.bias": np.full(8, np.inf)}), "'q_net.0.bias' holds NaN or inf"),
        "slot shape": (lambda a: a.update({"optimizer.0.exp_avg": np.zeros((2, 2), np.float32)}),
                       r"'optimizer.0.exp_avg' has shape \(2, 2\), expected \(8, 4\)"),
        "slot missing": (lambda a: a.pop("optimizer.3.exp_avg_sq"), "different saved slots"),
    }
    for case, (edit, message) in cases.items():
        path = agent.save(tmp_path / case.replace(" ", "_"))
        rewrite_checkpoint(path, edit)
        with pytest.raises(CheckpointError, match=message):
            torch_agents.DQN.restore(path)
    path = agent.save(tmp_path / "floats")  # integral floats into counters load
    rewrite_checkpoint(path, lambda a: a.update(updates=np.asarray(2.0)))
    assert torch_agents.DQN.restore(path).updates == 2


def test_a_fresh_agent_restores_slots_it_does_not_have_yet(tmp_path):
    agent = trained(torch_agents)
    fresh = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), learning_starts=8, seed=3)
    assert not [k for k in fresh.state_dict() if k.startswith("optimizer.0.")]
    again = torch_agents.DQN.restore(agent.save(tmp_path / "ck"))
    assert snapshot(again) == snapshot(agent)
    untrained = fresh.save(tmp_path / "untrained")  # and a trained agent resumes an untrained checkpoint
    from marl_note.agents.checkpoints.state_check import check_agent_state
    state, _ = check_agent_state(agent, read_checkpoint(untrained)[1], "demo")
    assert not [k for k in state if k.startswith("optimizer.0.")]


# --------------------------------------------------------------------------- damaged files

def flip(path, rng):
    files = [os.path.join(path, n) for n in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    target = files[rng.integers(len(files))]
    data = bytearray(open(target, "rb").read())
    data[rng.integers(len(data))] ^= int(rng.integers(1, 256))
    with open(target, "wb") as f:
        f.write(bytes(data))


@pytest.mark.parametrize("fmt", ["ck", "ck.zip"])
def test_flipped_bytes_give_checkpoint_errors_or_identical_content(tmp_path, fmt):
    agent = trained(torch_agents)
    pristine = agent.save(tmp_path / "pristine" / fmt, include_replay=True)
    manifest0, arrays0 = read_checkpoint(pristine)
    rng = np.random.default_rng(0)
    outcomes = {"refused": 0, "same": 0}
    for trial in range(20):
        path = str(tmp_path / f"t{trial}" / fmt)
        os.makedirs(os.path.dirname(path))
        if os.path.isdir(pristine):
            import shutil
            shutil.copytree(pristine, path)
        else:
            with open(pristine, "rb") as src, open(path, "wb") as dst:
                dst.write(src.read())
        flip(path, rng)
        try:
            manifest, arrays = read_checkpoint(path)
        except CheckpointError as exc:
            assert os.path.basename(path) in str(exc)  # the message names the file
            outcomes["refused"] += 1
        else:
            assert manifest == manifest0 and sorted(arrays) == sorted(arrays0)
            assert all(arrays[k].tobytes() == arrays0[k].tobytes() for k in arrays0)
            outcomes["same"] += 1
        live = trained(torch_agents, seed=5)
        before = snapshot(live)
        try:
            live.restore_param(path)
        except CheckpointError:
            assert snapshot(live) == before
        else:
            ours = live.state_dict()
            assert all(np.array_equal(ours[k], arrays0[k]) for k in live.param_keys())
    assert outcomes["refused"] > 0


@pytest.mark.parametrize("fmt", ["ck", "ck.zip"])
def test_truncated_files_give_checkpoint_errors(tmp_path, fmt):
    path = trained(torch_agents).save(tmp_path / fmt)
    files = [os.path.join(path, n) for n in os.listdir(path)] if os.path.isdir(path) else [path]
    for target in files:
        data = open(target, "rb").read()
        for cut in (0, 1, len(data) // 3, len(data) - 1):
            with open(target, "wb") as f:
                f.write(data[:cut])
            with pytest.raises(CheckpointError):
                read_checkpoint(path)
        with open(target, "wb") as f:
            f.write(data)


def test_an_array_header_cannot_ask_for_more_memory_than_the_file_holds(tmp_path):
    buf = io.BytesIO()  # an .npy header claiming 80 GB, followed by 32 bytes
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**10,)})
    npy = buf.getvalue() + np.zeros(4).tobytes()
    npz = io.BytesIO()
    with zipfile.ZipFile(npz, "w") as z:
        z.writestr("a.npy", npy)
    path = tmp_path / "old"  # a checkpoint without checksums, as the first releases wrote it
    os.makedirs(path)
    (path / "manifest.json").write_text(json.dumps({"format": "marl_note.checkpoint/1", "arrays": ["a"]}))
    (path / "arrays.npz").write_bytes(npz.getvalue())
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"array 'a' is damaged: its header says float64 \(10000000000,\)"):
            read_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20


# --------------------------------------------------------------------------- sizes implied by the manifest

@pytest.mark.parametrize("edit", [
    lambda m: m["config"].update(hidden_sizes={"$tuple": [100000, 100000]}),
    lambda m: m["config"].update(hidden_sizes={"$tuple": [10**9]}),
    lambda m: m.update(observation_space={"type": "Discrete", "n": 10**9, "start": 0}),
], ids=["two wide layers", "one huge layer", "huge one-hot input"])
def test_a_manifest_cannot_make_restore_build_huge_networks(tmp_path, edit):
    path = trained(torch_agents).save(tmp_path / "ck")
    rewrite_checkpoint(path, edit_manifest=edit)
    tracemalloc.start()
    start = time.process_time()  # CPU seconds (building the layers would take minutes), whatever the load
    try:
        with pytest.raises(CheckpointError, match="implies at least .* weights, but the checkpoint stores"):
            torch_agents.DQN.restore(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - start < 5 and peak < 50 * 2**20


def test_the_size_bound_never_refuses_real_checkpoints(tmp_path):
    box, disc = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(5)
    for hidden in [(), (8,), (64, 64), (300, 200, 100)]:
        for agent in (torch_agents.DQN(OBS, disc, hidden_sizes=hidden, seed=0),
                      torch_agents.PPO(OBS, box, hidden_sizes=hidden, n_steps=8, seed=0),
                      torch_agents.DDPG(OBS, box, hidden_sizes=hidden, seed=0),
                      torch_agents.MADDPG({"a": OBS, "b": disc}, {"a": disc, "b": box}, hidden_sizes=hidden, seed=0)):
            stored = sum(np.size(v) for v in agent.state_dict().values())
            config = agent.config | {name: getattr(agent, name) for name in type(agent).saving_spaces}
            assert 0 < type(agent)._min_state_size(config) <= stored, (type(agent).__name__, hidden)
    ppo = torch_agents.PPO(OBS, gym.spaces.Box(-1, 1, (2,)), hidden_sizes=(1200, 900), n_steps=8, seed=0)
    assert type(torch_agents.PPO.restore(ppo.save(tmp_path / "ppo"))) is torch_agents.PPO  # > 1M weights
