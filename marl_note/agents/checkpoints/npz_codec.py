"""The arrays of a checkpoint as ``.npz`` bytes, and back, without pickle and without trusting the file.

:func:`npz_arrays` parses every ``.npy`` header itself and checks that the data that follows has
exactly the size the header claims before any array is allocated, so a damaged or hand-made
file cannot make the reader allocate more memory than the file holds; a caller's check sees each
header (name, shape, dtype) before the data behind it is read or decompressed. Every way a damaged file
can fail (zip, CRC, header, size) is reported as one :class:`CheckpointError` naming the file.

Example:
    >>> import numpy as np
    >>> data = npz_bytes({"w": np.arange(3.0), "n": np.int64(4)})
    >>> got = npz_arrays(data, "example.npz")
    >>> got["w"].tolist(), int(got["n"])
    ([0.0, 1.0, 2.0], 4)
"""
from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable, Mapping
from typing import IO, Any

import numpy as np

__all__ = ["npz_bytes", "npz_arrays"]


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
    from marl_note.agents.checkpoints.format import CheckpointError

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
    from marl_note.agents.checkpoints.format import CheckpointError

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
