"""Checkpoints are data: a hostile file can neither run code nor make a load hang or take memory.

Each test here failed on a6e0003 (the release before these checks): a manifest naming
``builtins:print`` as the torso had it imported and called, a FIFO manifest hung ``restore``,
a link to ``/dev/zero`` took gigabytes, and a small file whose arrays decompress to hundreds of
megabytes was decompressed whole before anything looked at its headers.
"""
import io
import os
import threading
import tracemalloc
import zipfile

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents import torch as torch_agents
from marl_note.agents.checkpoints import CheckpointError, restore
from tests.agents.user_torsos import torch_torso
from tests.checkpoint_helpers import rewrite_checkpoint

OBS, ACT = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)
BOARD = gym.spaces.Box(0, 1, (6, 7, 2), np.int8)


def small_dqn():
    return torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), seed=0)


# --------------------------------------------------------------------------- 1. no code named by the file runs

@pytest.mark.parametrize("name", ["builtins:print", "sys:exit", "builtins:input", "os:system"])
def test_a_torso_named_in_the_manifest_is_never_imported_or_called(tmp_path, name, monkeypatch):
    path = small_dqn().save(tmp_path / "ck")
    rewrite_checkpoint(path, edit_manifest=lambda m: m["config"].update(torso=name))
    called = []
    import builtins
    import sys
    monkeypatch.setattr(builtins, "print", lambda *a, **k: called.append(("print", a)))
    monkeypatch.setattr(builtins, "input", lambda *a, **k: called.append(("input", a)))
    monkeypatch.setattr(sys, "exit", lambda *a, **k: called.append(("exit", a)))
    monkeypatch.setattr(os, "system", lambda *a, **k: called.append(("system", a)))
    for load in (restore, torch_agents.DQN.restore):
        with pytest.raises(CheckpointError, match=rf"saved with torso='{name}'.*pass it to restore"):
            load(path)
    assert called == []


def test_the_torso_passed_at_restore_must_be_the_recorded_one(tmp_path):
    agent = torch_agents.DQN(BOARD, gym.spaces.Discrete(7), torso=torch_torso, hidden_sizes=(8,), seed=0)
    path = agent.save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"but restore was given torso='builtins:print'"):
        restore(path, torso=print)
    again = restore(path, torso=torch_torso)  # the function itself
    assert again.cfg.torso == "tests.agents.user_torsos:torch_torso"
    assert restore(path, torso="tests.agents.user_torsos:torch_torso").cfg.torso == again.cfg.torso  # or its path


def _augment(obs, act):
    return obs, act


def test_a_recorded_function_must_be_passed_again_and_match(tmp_path):
    path = torch_agents.DQN(OBS, ACT, hidden_sizes=(8,), augment=_augment, seed=0).save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"saved with augment=.*_augment, a function"):
        restore(path)
    with pytest.raises(CheckpointError, match="but restore was given augment="):
        restore(path, augment=len)
    assert restore(path, augment=_augment) is not None


# --------------------------------------------------------------------------- 2. files that are not files

def _finishes(fn, seconds=20.0):
    """Run ``fn`` in a thread; its exception (or None), or 'hung' when it does not return in time."""
    out = ["hung"]

    def run():
        try:
            fn()
            out[0] = None
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out[0] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return out[0]


@pytest.mark.parametrize("form", ["dir", "zip"])
def test_a_fifo_is_refused_without_blocking(tmp_path, form):
    if form == "dir":
        path = small_dqn().save(tmp_path / "ck")
        os.remove(os.path.join(path, "manifest.json"))
        os.mkfifo(os.path.join(path, "manifest.json"))
    else:
        path = str(tmp_path / "ck.zip")
        os.mkfifo(path)
    got = _finishes(lambda: restore(path))
    if got == "hung":  # unblock the reader thread so the test process can end
        with open(os.path.join(path, "manifest.json") if form == "dir" else path, "wb"):
            pass
    assert isinstance(got, CheckpointError) and "FIFO" in str(got), got


def test_a_link_to_dev_zero_is_refused_before_reading(tmp_path):
    path = small_dqn().save(tmp_path / "ck")
    os.remove(os.path.join(path, "manifest.json"))
    os.symlink("/dev/zero", os.path.join(path, "manifest.json"))
    tracemalloc.start()
    try:
        got = _finishes(lambda: restore(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(got, CheckpointError) and "character device" in str(got), got
    assert peak < 10 * 2**20


# --------------------------------------------------------------------------- 2. arrays that decompress to gigabytes

BIG = 200 * 2**20  # bytes of zeros the bomb decompresses to (a few hundred KB on disk)


def _npy_header(shape, dtype="<f4"):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _bomb_npz(arrays, bomb_key, member_compression):
    """The agent's arrays as .npz bytes with ``bomb_key`` replaced by BIG bytes of zeros (streamed, never held)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for key, value in arrays.items():
            if key == bomb_key:
                continue
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(value), allow_pickle=False)
            z.writestr(f"{key}.npy", buf.getvalue())
        info = zipfile.ZipInfo(f"{bomb_key}.npy")
        info.compress_type = member_compression
        with z.open(info, "w", force_zip64=True) as f:
            f.write(_npy_header((BIG // 4,)))
            chunk = bytes(1 << 22)
            for _ in range(BIG // len(chunk)):
                f.write(chunk)
    return out.getvalue()


def _write_bomb(path, form, arrays, manifest_fields):
    """A checkpoint with valid checksums whose weight array ``q_net.0.weight`` decompresses to BIG bytes."""
    import hashlib
    import json

    from marl_note.agents.checkpoints import format as F

    inner = zipfile.ZIP_DEFLATED if form == "dir" else zipfile.ZIP_STORED
    npz = _bomb_npz(arrays, "q_net.0.weight", inner)
    manifest = dict(manifest_fields, arrays=sorted(arrays), arrays_sha256=hashlib.sha256(npz).hexdigest())
    if form == "dir":
        name = f"arrays-{hashlib.sha256(npz).hexdigest()[:16]}.npz"
        manifest["arrays_file"] = name
        os.makedirs(path)
        with open(os.path.join(path, name), "wb") as f:
            f.write(npz)
        with open(os.path.join(path, "manifest.json"), "wb") as f:
            f.write(F._sealed(manifest))
    else:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("manifest.json", F._sealed(manifest))
            z.writestr("arrays.npz", npz)
    assert os.path.getsize(path if form == "zip" else os.path.join(path, manifest.get("arrays_file", ""))) < BIG // 50
    json.dumps(manifest)


@pytest.mark.parametrize("form", ["dir", "zip"])
def test_arrays_that_decompress_to_far_more_than_the_agent_holds_are_refused_unread(tmp_path, form):
    from marl_note.agents.checkpoints import read_checkpoint

    agent = small_dqn()
    manifest, arrays = read_checkpoint(agent.save(tmp_path / "real"))
    fields = {k: v for k, v in manifest.items() if k not in ("arrays", "checksum", "arrays_sha256", "arrays_file")}
    path = str(tmp_path / ("bomb" if form == "dir" else "bomb.zip"))
    _write_bomb(path, form, arrays, fields)
    live = agent.state_dict()
    for load in (lambda: restore(path), lambda: torch_agents.DQN.restore(path), lambda: agent.restore_param(path)):
        tracemalloc.start()
        try:
            with pytest.raises(CheckpointError, match=r"q_net\.0\.weight|arrays\.npz holds"):
                load()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 20 * 2**20, peak
    for key, value in agent.state_dict().items():  # the failed restore_param changed nothing
        np.testing.assert_array_equal(value, live[key])
