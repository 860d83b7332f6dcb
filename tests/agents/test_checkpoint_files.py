import json
import os
import zipfile

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.checkpoints.format import (
    CheckpointError,
    check_state_shapes,
    read_checkpoint,
    space_from_json,
    space_to_json,
    write_checkpoint,
)


@pytest.mark.parametrize("fmt", ["dir", "zip"])
def test_round_trip(tmp_path, fmt):
    path = tmp_path / ("ck.zip" if fmt == "zip" else "ck")
    arrays = {"net.w": np.arange(6, dtype=np.float32).reshape(2, 3), "steps": np.asarray(7), "flag": np.array(True)}
    write_checkpoint(path, {"algorithm": "DQN", "config": {"hidden": (64, 64)}}, arrays)
    manifest, got = read_checkpoint(path)
    assert manifest["algorithm"] == "DQN" and manifest["config"]["hidden"] == [64, 64]
    assert set(got) == set(arrays) and np.array_equal(got["net.w"], arrays["net.w"]) and int(got["steps"]) == 7


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-1.0, 2.0, (3, 2), np.float32), gym.spaces.Box(0, 1, (3, 3, 2), np.int8),
    gym.spaces.Discrete(9, start=1), gym.spaces.MultiBinary(4), gym.spaces.MultiDiscrete([2, 3]),
    gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (2,)), "goal": gym.spaces.Discrete(3)}),
])
def test_spaces_survive_json(space):
    assert space_from_json(json.loads(json.dumps(space_to_json(space)))) == space


def test_overwrite_is_atomic_and_keeps_old_on_failure(tmp_path):
    path = tmp_path / "ck"
    write_checkpoint(path, {"v": 1}, {"a": np.zeros(2)})
    with pytest.raises(TypeError, match="dtype object"):
        write_checkpoint(path, {"v": 2}, {"a": np.array([object()], dtype=object)})
    assert read_checkpoint(path)[0]["v"] == 1  # the failed save left the old checkpoint intact
    write_checkpoint(path, {"v": 3}, {"a": np.ones(2)})
    assert read_checkpoint(path)[0]["v"] == 3
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no temporary leftovers


def test_tampered_and_missing_checkpoints_fail_clearly(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        read_checkpoint(tmp_path / "nothing")
    path = tmp_path / "ck"
    write_checkpoint(path, {"v": 1}, {"a": np.zeros(2), "b": np.ones(1)})
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["arrays"].append("c")
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="damaged or was edited"):  # the manifest's own checksum
        read_checkpoint(path)
    for key in ("checksum", "arrays_sha256"):  # a manifest as the first releases wrote it: no checksums
        manifest.pop(key)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="lacks \\['checksum', 'arrays_sha256'\\]"):
        read_checkpoint(path)  # but arrays_file is there: a new-style manifest with fields lost
    manifest.pop("arrays_file")
    os.rename(path / next(n for n in os.listdir(path) if n.startswith("arrays-")), path / "arrays.npz")
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="missing \\['c'\\]"):
        read_checkpoint(path)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        read_checkpoint(path)
    z = tmp_path / "ck.zip"
    write_checkpoint(z, {"v": 1}, {"a": np.zeros(2)})
    z.write_bytes(z.read_bytes()[:50])
    with pytest.raises(CheckpointError):
        read_checkpoint(z)


def test_pickled_arrays_are_refused(tmp_path):
    path = tmp_path / "evil.zip"
    import io
    buf = io.BytesIO()
    np.savez(buf, a=np.array([{"x": 1}], dtype=object))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"format": "marl_note.checkpoint/1", "arrays": ["a"]}))
        zf.writestr("arrays.npz", buf.getvalue())
    with pytest.raises(CheckpointError, match="pickle"):
        read_checkpoint(path)


def test_shape_check_names_the_array():
    with pytest.raises(CheckpointError, match="'w' has shape \\(3,\\), expected \\(2,\\)"):
        check_state_shapes({"w": np.zeros(2)}, {"w": np.zeros(3)}, "DQN")
    with pytest.raises(CheckpointError, match="missing arrays \\['w'\\]"):
        check_state_shapes({"w": np.zeros(2)}, {}, "DQN")
