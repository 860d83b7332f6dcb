"""Checkpoint files: ``manifest.json`` + ``arrays.npz``, in a directory or a zip. No pickle.

Loading a checkpoint never executes code: the manifest is JSON and arrays are read with
``allow_pickle=False``. Writing is atomic: everything goes to a temporary sibling first and is
then renamed into place, so an interrupted save leaves the previous checkpoint intact.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

FORMAT = "marl_note.checkpoint/1"
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"


class CheckpointError(ValueError):
    """A checkpoint that is missing, tampered with, or does not match what loads it."""


# --------------------------------------------------------------------------- spaces <-> JSON

def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A JSON-able description of a Gymnasium space (Box, Discrete, MultiBinary, MultiDiscrete, Dict, Tuple)."""
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "low": space.low.tolist(), "high": space.high.tolist(),
                "shape": list(space.shape), "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    raise TypeError(f"cannot describe space {space!r} in a checkpoint manifest")


def space_from_json(d: Mapping[str, Any]) -> gym.Space:
    kind = d.get("type")
    if kind == "Box":
        low = np.asarray(d["low"], dtype=d["dtype"]).reshape(d["shape"])
        high = np.asarray(d["high"], dtype=d["dtype"]).reshape(d["shape"])
        return gym.spaces.Box(low, high, dtype=np.dtype(d["dtype"]))
    if kind == "Discrete":
        return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(d["n"])
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(d["nvec"]), dtype=np.dtype(d.get("dtype", "int64")))
    if kind == "Dict":
        return gym.spaces.Dict({k: space_from_json(v) for k, v in d["spaces"].items()})
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_json(v) for v in d["spaces"]])
    raise CheckpointError(f"unknown space type {kind!r} in checkpoint manifest")


# --------------------------------------------------------------------------- write / read

def _npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    clean = {}
    for key, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype == object or arr.dtype.kind in "OV":
            raise TypeError(f"checkpoint array {key!r} has dtype {arr.dtype}: only numeric/bool/str arrays "
                            f"can be saved without pickle")
        clean[key] = arr
    buf = io.BytesIO()
    np.savez(buf, **clean)
    return buf.getvalue()


def write_checkpoint(path: str | os.PathLike, manifest: Mapping[str, Any], arrays: Mapping[str, Any]) -> str:
    """Atomically write ``manifest`` and ``arrays`` to ``path`` (a ``.zip`` file or a directory).

    Example:
        >>> import tempfile, os, numpy as np
        >>> d = tempfile.mkdtemp()
        >>> p = write_checkpoint(os.path.join(d, "ckpt.zip"), {"algorithm": "demo"}, {"w": np.ones(3)})
        >>> m, a = read_checkpoint(p)
        >>> m["algorithm"], a["w"].tolist()
        ('demo', [1.0, 1.0, 1.0])
    """
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    manifest = {"format": FORMAT, **manifest, "arrays": sorted(arrays)}
    manifest_bytes = json.dumps(manifest, indent=2, sort_keys=True, default=_json_default).encode()
    npz = _npz_bytes(arrays)
    if path.endswith(".zip"):
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".zip", dir=parent)
        try:
            with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr(MANIFEST, manifest_bytes)
                z.writestr(ARRAYS, npz)
            _fsync_path(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path
    if os.path.exists(path) and not os.path.isdir(path):
        raise CheckpointError(f"{path} exists and is not a checkpoint directory; refusing to overwrite it")
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    try:
        for name, data in ((ARRAYS, npz), (MANIFEST, manifest_bytes)):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if os.path.isdir(path):
            # two renames: a crash between them leaves the old checkpoint at `old`, never lost
            old = tempfile.mkdtemp(prefix=".old-", dir=parent)
            os.rmdir(old)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read ``(manifest, arrays)``; raise :class:`CheckpointError` naming what is wrong."""
    path = os.fspath(path)
    try:
        if os.path.isdir(path):
            with open(os.path.join(path, MANIFEST), "rb") as f:
                manifest_bytes = f.read()
            with open(os.path.join(path, ARRAYS), "rb") as f:
                npz = f.read()
        elif os.path.isfile(path):
            with zipfile.ZipFile(path) as z:
                manifest_bytes, npz = z.read(MANIFEST), z.read(ARRAYS)
        else:
            raise CheckpointError(f"no checkpoint at {path}")
    except (KeyError, FileNotFoundError) as exc:
        raise CheckpointError(f"{path} is not a marl_note checkpoint: missing {exc}") from None
    except zipfile.BadZipFile:
        raise CheckpointError(f"{path} is not a marl_note checkpoint: not a zip file or directory") from None
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError as exc:
        raise CheckpointError(f"{path}: manifest.json is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {manifest.get('format') if isinstance(manifest, dict) else None!r}")
    try:
        with np.load(io.BytesIO(npz), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except ValueError as exc:
        raise CheckpointError(f"{path}: arrays.npz is corrupt or needs pickle ({exc})") from None
    except Exception as exc:  # zipfile/npy format errors of a truncated file
        raise CheckpointError(f"{path}: arrays.npz is corrupt ({type(exc).__name__}: {exc})") from None
    expected = set(manifest.get("arrays", []))
    if expected != set(arrays):
        raise CheckpointError(f"{path}: arrays do not match the manifest: missing "
                              f"{sorted(expected - set(arrays))}, unexpected {sorted(set(arrays) - expected)}")
    return manifest, arrays


def check_state_shapes(expected: Mapping[str, np.ndarray], got: Mapping[str, Any], what: str) -> None:
    """Raise CheckpointError if ``got`` lacks keys of ``expected`` or has arrays of other shapes."""
    missing = sorted(set(expected) - set(got))
    if missing:
        raise CheckpointError(f"{what}: checkpoint is missing arrays {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    for key, ref in expected.items():
        shape = np.shape(got[key])
        if shape != np.shape(ref):
            raise CheckpointError(f"{what}: array {key!r} has shape {shape}, expected {np.shape(ref)}")


def _fsync_path(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, gym.Space):
        return space_to_json(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} into a checkpoint manifest")
