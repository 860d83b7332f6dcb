"""Checkpoint files: a JSON manifest and numpy arrays, in a directory or a zip. No pickle.

The arrays are ``.npz`` bytes (:func:`npz_bytes` / :func:`npz_arrays`), parsed here without pickle
and without trusting the file: every ``.npy`` header is read and checked against the data that
follows it (and against what the loading agent can hold) before any array is allocated.

A directory checkpoint holds ``manifest.json`` and ``arrays-<hash>.npz`` (checkpoints written
before content-named arrays hold ``arrays.npz``; both load); a ``.zip`` checkpoint holds
``manifest.json`` and ``arrays.npz``. The manifest records a checksum of itself and of the
arrays, so a damaged file is refused rather than loaded with changed content.

Loading never executes code: the manifest is JSON and arrays are parsed without pickle. Saving
writes and replaces only the checkpoint's own files, atomically (see :func:`write_checkpoint`),
and refuses a path that holds anything else (see :func:`check_checkpoint_target`).
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import sys
import zipfile
from collections.abc import Callable, Mapping
from typing import IO, Any

import gymnasium as gym
import numpy as np

from marl_note.atomic_files import (
    create_temp,
    fsync_dir,
    is_stale_temp,
    keep_mode,
    release_temp,
    remove_quietly,
    remove_stale_temps,
    write_atomically,
)
from marl_note.file_reads import JSON_LIMIT, FileRefused, check_regular, read_regular

FORMAT = "marl_note.checkpoint/1"
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"  # inside a zip, and in directories written before content-named arrays files
_ARRAYS_NAME = re.compile(r"arrays-[0-9a-f]{16}\.npz")
_TEMP_PREFIX = ".marl_note-ckpt-"


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


# --------------------------------------------------------------------------- where a checkpoint may go

def _is_leftover(name: str) -> bool:
    """Files our own interrupted saves may leave in a checkpoint directory (never the user's)."""
    return name.startswith(_TEMP_PREFIX) or _ARRAYS_NAME.fullmatch(name) is not None


def _our_manifest(data: bytes) -> dict[str, Any] | None:
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def check_checkpoint_target(path: str | os.PathLike) -> dict[str, Any] | None:
    """Raise CheckpointError unless a checkpoint may be written at ``path``; nothing is written.

    A ``.zip`` path must be missing or one of our checkpoint zips; any other path must be missing,
    an empty directory or a directory holding one of our checkpoints (recognised by its
    ``manifest.json``; other files beside it are kept). Returns the manifest of the checkpoint that
    a save would replace (None if there is none).

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); open(os.path.join(d, "notes.txt"), "w").close()
        >>> check_checkpoint_target(os.path.join(d, "new")) is None
        True
        >>> check_checkpoint_target(d)
        Traceback (most recent call last):
        ...
        marl_note.agents.checkpoints.format.CheckpointError: ... holds no marl_note checkpoint (it holds notes.txt)...
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.lexists(path):
        return None
    if path.endswith(".zip"):
        manifest = None
        if os.path.isfile(path):
            try:
                with zipfile.ZipFile(path) as z:
                    if z.getinfo(MANIFEST).file_size <= JSON_LIMIT:
                        manifest = _our_manifest(z.read(MANIFEST))
            except Exception:  # not a zip, no manifest, damaged: not recognisably ours
                manifest = None
        if manifest is None:
            raise CheckpointError(f"{path} exists and is not a marl_note checkpoint zip; refusing to overwrite it "
                                  f"(delete it yourself or choose another path)")
        return manifest
    if not os.path.isdir(path):
        raise CheckpointError(f"{path} exists and is not a checkpoint directory; refusing to overwrite it "
                              f"(choose another path)")
    others = sorted(name for name in os.listdir(path) if not _is_leftover(name))
    if not others:
        return None
    if MANIFEST in others:
        try:
            manifest = _our_manifest(read_regular(os.path.join(path, MANIFEST), JSON_LIMIT))
        except (OSError, FileRefused) as exc:
            raise CheckpointError(f"{path}: cannot read its {MANIFEST} ({exc})") from None
        if manifest is not None:
            return manifest
        raise CheckpointError(f"{path} holds a {MANIFEST} that is not a marl_note checkpoint manifest; refusing to "
                              f"write a checkpoint into this directory (choose a new or empty directory)")
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    raise CheckpointError(f"{path} is a non-empty directory that holds no marl_note checkpoint (it holds {shown}); "
                          f"refusing to write into it, since a save replaces the checkpoint files in its directory. "
                          f"Choose a new or empty directory, e.g. {os.path.join(path, 'checkpoint')}, "
                          f"or a path ending in .zip")


# --------------------------------------------------------------------------- write

def write_checkpoint(path: str | os.PathLike, manifest: Mapping[str, Any], arrays: Mapping[str, Any]) -> str:
    """Atomically write ``manifest`` and ``arrays`` to ``path`` (a ``.zip`` file or a directory).

    Only the checkpoint's own files change: a directory gets ``manifest.json`` and
    ``arrays-<hash>.npz`` (any other files in it are kept), and a path that holds something other
    than a checkpoint of ours is refused with a CheckpointError before anything is written (see
    :func:`check_checkpoint_target`). At every point of a save, even a crash, ``path`` holds the old
    or the new checkpoint, whole; a failed save removes its temporary files. New files and
    directories get the usual permissions (the umask applies).

    Example:
        >>> import tempfile, os, numpy as np
        >>> d = tempfile.mkdtemp()
        >>> p = write_checkpoint(os.path.join(d, "ckpt.zip"), {"algorithm": "demo"}, {"w": np.ones(3)})
        >>> m, a = read_checkpoint(p)
        >>> m["algorithm"], a["w"].tolist()
        ('demo', [1.0, 1.0, 1.0])
    """
    path = os.path.abspath(os.fspath(path))
    previous = check_checkpoint_target(path)  # refuses before anything is written
    npz = npz_bytes(arrays)
    digest = hashlib.sha256(npz).hexdigest()
    full = {"format": FORMAT, **manifest, "arrays": sorted(arrays), "arrays_sha256": digest}
    if path.endswith(".zip"):
        full.pop("arrays_file", None)
    else:
        full["arrays_file"] = f"arrays-{digest[:16]}.npz"
    manifest_bytes = _sealed(full)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if path.endswith(".zip"):
        _write_zip(path, manifest_bytes, npz)
    else:
        _write_dir(path, previous, full["arrays_file"], manifest_bytes, npz)
    return path


def _sealed(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as JSON with a ``checksum`` of its own content (what a reader will parse)."""
    body = json.loads(json.dumps({k: v for k, v in manifest.items() if k != "checksum"}, default=_json_default))
    body["checksum"] = _digest(body)
    return json.dumps(body, indent=2, sort_keys=True).encode()


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _stage(directory: str, data: bytes, like: str, suffix: str = "") -> str:
    """``data`` in a new durable temporary file in ``directory`` (with ``like``'s permissions if it exists)."""
    fd, tmp = create_temp(directory, _TEMP_PREFIX, suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        keep_mode(like, tmp)
    except BaseException:
        remove_quietly(tmp)
        release_temp(tmp)
        raise
    return tmp


def _write_zip(path: str, manifest_bytes: bytes, npz: bytes) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, manifest_bytes)
        z.writestr(ARRAYS, npz)
    write_atomically(path, lambda f: f.write(buf.getbuffer()), prefix=_TEMP_PREFIX, suffix=".zip")
    remove_stale_temps(os.path.dirname(path), _TEMP_PREFIX, ".zip")  # of saves killed here before


def _write_dir(path: str, previous: Mapping[str, Any] | None, arrays_name: str, manifest_bytes: bytes,
               npz: bytes) -> None:
    """Arrays under a content name first, then the manifest (the commit), then the old arrays go.

    A crash before the manifest's rename leaves the old manifest, whose arrays file is untouched;
    a crash after it leaves the new pair and at most an unreferenced old arrays file, which the
    next save removes.
    """
    old_arrays = _arrays_file(previous) if previous is not None else None
    created = not os.path.isdir(path)
    if created:
        os.makedirs(path)
    arrays_path, manifest_path = os.path.join(path, arrays_name), os.path.join(path, MANIFEST)
    staged_arrays = staged_manifest = None
    try:
        staged_arrays = _stage(path, npz, like=arrays_path)
        staged_manifest = _stage(path, manifest_bytes, like=manifest_path)
        os.replace(staged_arrays, arrays_path)
        os.replace(staged_manifest, manifest_path)  # the commit
    finally:  # a renamed temporary file no longer exists: that tells what happened, even on an interrupt
        if staged_manifest is None or os.path.lexists(staged_manifest):  # not committed: undo everything
            placed = staged_arrays is not None and not os.path.lexists(staged_arrays)
            for tmp in (staged_arrays, staged_manifest):
                if tmp is not None:
                    remove_quietly(tmp)
            if placed and arrays_name != old_arrays:
                remove_quietly(arrays_path)
            if created:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
        for tmp in (staged_arrays, staged_manifest):
            if tmp is not None:
                release_temp(tmp)
    fsync_dir(path)
    for name in os.listdir(path):  # the replaced arrays file and leftovers of interrupted saves (not of live ones)
        if name.startswith(_TEMP_PREFIX) and not is_stale_temp(os.path.join(path, name)):
            continue
        if name != arrays_name and (_is_leftover(name) or (name == ARRAYS and old_arrays == ARRAYS)):
            try:
                remove_quietly(os.path.join(path, name))
            except OSError:
                pass  # the new checkpoint is in place; an old file we cannot remove is only clutter


def _arrays_file(manifest: Mapping[str, Any]) -> str | None:
    name = manifest.get("arrays_file", ARRAYS)
    return name if isinstance(name, str) and (name == ARRAYS or _ARRAYS_NAME.fullmatch(name)) else None


# --------------------------------------------------------------------------- read

ArrayCheck = Callable[[str, tuple[int, ...], np.dtype], None]
"""Called with each stored array's name, shape and dtype before its data is read; raises CheckpointError to refuse."""

# deflate cannot expand data more than 1032-fold; a zip member claiming more is damaged or hand-made
_DEFLATE_RATIO = 1032


def checkpoint_sizes(path: str | os.PathLike) -> tuple[dict[str, Any], int]:
    """``(manifest, stored bytes of the arrays)`` without reading any array: what :func:`read_checkpoint`
    checks a config against before an agent is built (the bytes are those on disk: in a zip, compressed)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        manifest_path = os.path.join(path, MANIFEST)
        manifest = _parse_manifest(_read_file(manifest_path, path, JSON_LIMIT), manifest_path, in_dir=True)
        arrays_path = os.path.join(path, _arrays_name(manifest, manifest_path))
        try:
            return manifest, check_regular(arrays_path)
        except FileNotFoundError:
            raise CheckpointError(f"{path} is not a marl_note checkpoint: missing "
                                  f"{os.path.basename(arrays_path)!r}") from None
        except (OSError, FileRefused) as exc:
            raise CheckpointError(f"{arrays_path}: {exc}") from None
    with _open_zip(path) as z:
        manifest = _parse_manifest(_zip_member(z, MANIFEST, path, JSON_LIMIT), f"{path}:{MANIFEST}", in_dir=False)
        return manifest, int(z.getinfo(ARRAYS).compress_size)


def read_checkpoint(path: str | os.PathLike, check: ArrayCheck | None = None,
                    max_bytes: int | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read ``(manifest, arrays)``; raise :class:`CheckpointError` naming the file and what is wrong.

    Only regular files are read (a FIFO, a device or a link to one is refused without blocking),
    the manifest is at most :data:`~marl_note.file_reads.JSON_LIMIT` bytes, and a zip member may not
    claim to expand beyond what deflate can produce. ``check`` sees every array's name, shape and
    dtype from its header before the array's data is read or decompressed, and ``max_bytes`` caps
    the arrays file's (uncompressed) size before it is read: a loader that knows what the agent
    holds refuses a hostile file before it costs memory. Damaged files (a flipped byte, a truncated
    file) are detected by checksums and by checking every array header against the data that
    follows it, before anything is allocated.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        manifest_path = os.path.join(path, MANIFEST)
        manifest = _parse_manifest(_read_file(manifest_path, path, JSON_LIMIT), manifest_path, in_dir=True)
        arrays_path = os.path.join(path, _arrays_name(manifest, manifest_path))
        npz = _read_file(arrays_path, path, max_bytes)
        return manifest, _parse_arrays(npz, manifest, arrays_path, check)
    with _open_zip(path) as z:
        manifest = _parse_manifest(_zip_member(z, MANIFEST, path, JSON_LIMIT), f"{path}:{MANIFEST}", in_dir=False)
        npz = _zip_member(z, ARRAYS, path, max_bytes)
    return manifest, _parse_arrays(npz, manifest, f"{path}:{ARRAYS}", check)


def _arrays_name(manifest: Mapping[str, Any], manifest_path: str) -> str:
    name = _arrays_file(manifest)
    if name is None:
        raise CheckpointError(f"{manifest_path}: arrays_file {manifest.get('arrays_file')!r} is not an arrays "
                              f"file name of a marl_note checkpoint")
    return name


def _open_zip(path: str) -> zipfile.ZipFile:
    """The checkpoint zip at ``path`` (a regular file holding our two members), or a CheckpointError."""
    if not os.path.lexists(path):
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        check_regular(path)
        z = zipfile.ZipFile(path)
    except FileRefused as exc:
        raise CheckpointError(f"{exc} as a checkpoint") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({exc})") from None
    except Exception as exc:  # BadZipFile, struct errors: not a readable zip
        raise CheckpointError(f"{path} is not a readable marl_note checkpoint: not a zip file or directory, "
                              f"or a damaged one ({type(exc).__name__}: {exc})") from None
    names = set(z.namelist())
    missing = [n for n in (MANIFEST, ARRAYS) if n not in names]
    if missing:
        z.close()
        raise CheckpointError(f"{path} is not a marl_note checkpoint: missing {missing[0]!r}")
    return z


def _zip_member(z: zipfile.ZipFile, name: str, path: str, limit: int | None) -> bytes:
    """Member ``name`` of the checkpoint zip, its claimed size checked against ``limit`` and deflate's
    ratio before a byte is decompressed (reading never yields more than the claimed size)."""
    info = z.getinfo(name)
    if info.file_size > _DEFLATE_RATIO * info.compress_size + 1024:
        raise CheckpointError(f"{path}:{name} claims {info.file_size:,} bytes from {info.compress_size:,} "
                              f"compressed, more than deflate can produce: a damaged or hand-made file")
    if limit is not None and info.file_size > limit:
        raise CheckpointError(f"{path}:{name} holds {info.file_size:,} bytes, more than the {limit:,} that "
                              f"the agent loading it can hold; refusing to decompress it")
    try:
        return z.read(info)
    except Exception as exc:  # zlib.error, CRC mismatch, struct errors
        raise CheckpointError(f"{path} is not a readable marl_note checkpoint: a damaged zip "
                              f"({type(exc).__name__}: {exc})") from None


def _read_file(path: str, checkpoint: str, limit: int | None) -> bytes:
    try:
        return read_regular(path, limit if limit is not None else sys.maxsize)
    except FileNotFoundError:
        missing = os.path.basename(path)
        raise CheckpointError(f"{checkpoint} is not a marl_note checkpoint: missing {missing!r}") from None
    except FileRefused as exc:
        raise CheckpointError(str(exc)) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it ({exc})") from None


def _parse_manifest(data: bytes, where: str, in_dir: bool) -> dict[str, Any]:
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CheckpointError(f"{where}: not valid JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise CheckpointError(f"{where}: unknown checkpoint format {found!r}")
    # checkpoints written since integrity fields exist carry all of them; one missing means damage
    needed = ("checksum", "arrays_sha256") + (("arrays_file",) if in_dir else ())
    if any(k in manifest for k in needed):
        missing = [k for k in needed if k not in manifest]
        if missing:
            raise CheckpointError(f"{where}: the manifest is damaged (it lacks {missing})")
        if manifest["checksum"] != _digest({k: v for k, v in manifest.items() if k != "checksum"}):
            raise CheckpointError(f"{where}: the manifest is damaged or was edited (its checksum does not match)")
    names = manifest.get("arrays", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{where}: manifest 'arrays' is not a list of names")
    return manifest


def _parse_arrays(npz: bytes, manifest: Mapping[str, Any], where: str,
                  check: ArrayCheck | None = None) -> dict[str, np.ndarray]:
    expected_sha = manifest.get("arrays_sha256")
    if expected_sha is not None and hashlib.sha256(npz).hexdigest() != expected_sha:
        raise CheckpointError(f"{where}: the arrays file is damaged (its checksum does not match the manifest)")
    arrays = npz_arrays(npz, where, check)
    expected = set(manifest.get("arrays", []))
    if expected != set(arrays):
        raise CheckpointError(f"{where}: arrays do not match the manifest: missing "
                              f"{sorted(expected - set(arrays))}, unexpected {sorted(set(arrays) - expected)}")
    return arrays


def check_state_shapes(expected: Mapping[str, np.ndarray], got: Mapping[str, Any], what: str) -> None:
    """Raise CheckpointError if ``got`` lacks keys of ``expected`` or has arrays of other shapes."""
    missing = sorted(set(expected) - set(got))
    if missing:
        raise CheckpointError(f"{what}: checkpoint is missing arrays {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    for key, ref in expected.items():
        shape = np.shape(got[key])
        if shape != np.shape(ref):
            raise CheckpointError(f"{what}: array {key!r} has shape {shape}, expected {np.shape(ref)}")


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


def npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    """``np.savez`` of ``arrays``; refuses object (pickle-needing) arrays with a TypeError naming the key."""
    clean = {}
    for key, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.hasobject or arr.dtype.kind in "OV":
            raise TypeError(f"checkpoint array {key!r} has dtype {arr.dtype}: only numeric/bool/str arrays "
                            f"can be saved without pickle")
        clean[key] = arr
    buf = io.BytesIO()
    np.savez(buf, **clean)  # type: ignore[arg-type]  # numpy's stub types **kwds as its allow_pickle flag
    return buf.getvalue()


def npz_arrays(data: bytes, where: str, check: Callable[[str, tuple[int, ...], np.dtype], None] | None = None
               ) -> dict[str, np.ndarray]:
    """The arrays of ``.npz`` bytes; :class:`CheckpointError` naming ``where`` for anything damaged.

    Each member's ``.npy`` header is read first (a few hundred bytes, even from a compressed
    member) and must account exactly for the member's size; ``check(name, shape, dtype)`` may
    refuse the array then, before its data is read or decompressed.
    """
    out: dict[str, np.ndarray] = {}
    key = None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise CheckpointError(f"{where}: unexpected member {info.filename!r} (not a numpy .npy array)")
                key = info.filename[:-4]
                if key in out:
                    raise CheckpointError(f"{where}: array {key!r} is stored twice")
                with zf.open(info) as member:
                    out[key] = _npy_array(member, info.file_size, key, where, check)
    except CheckpointError:
        raise
    except Exception as exc:  # zipfile, zlib, struct, header parsing: the file is damaged
        what = f"array {key!r}" if key is not None else "the archive"
        raise CheckpointError(f"{where}: {what} is damaged ({type(exc).__name__}: {exc})") from None
    return out


def _npy_array(f: IO[bytes], size: int, key: str, where: str,
               check: Callable[[str, tuple[int, ...], np.dtype], None] | None) -> np.ndarray:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise CheckpointError(f"{where}: array {key!r} uses .npy format {version}, which this reader does not take")
    if dtype.hasobject:
        raise CheckpointError(f"{where}: array {key!r} has dtype {dtype}, which needs pickle; refusing to load it")
    count = math.prod(shape)
    offset = f.tell()
    if count * dtype.itemsize != size - offset:
        raise CheckpointError(f"{where}: array {key!r} is damaged: its header says {dtype} {shape} "
                              f"({count * dtype.itemsize} bytes) but {size - offset} bytes follow")
    if check is not None:
        try:
            check(key, tuple(int(d) for d in shape), dtype)
        except CheckpointError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
    if count == 0:
        return np.zeros(shape, dtype)
    raw = f.read(count * dtype.itemsize)
    if len(raw) != count * dtype.itemsize:
        raise CheckpointError(f"{where}: array {key!r} is truncated: {len(raw)} of {count * dtype.itemsize} bytes")
    flat = np.frombuffer(raw, dtype=dtype, count=count)
    return flat.reshape(shape, order="F" if fortran else "C").copy()
