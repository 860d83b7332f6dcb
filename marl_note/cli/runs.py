"""The output of ``marl_note train --out DIR`` and reading checkpoints back for ``evaluate`` and ``play``.

A run directory holds one agent checkpoint per distinct agent (written by the agents' own
``save()``: ``agent/`` for self-play, one per seat for independent agents, ``maddpg/`` for
MADDPG) and ``marl_note_run.json``, which names the env, the algorithm, the backend and which
checkpoint plays which seat (``null``: the seat was played by the opponent). Each checkpoint and
the run file are written atomically, the run file last. ``--out`` must be missing, empty or an
earlier run directory; anything else is refused before training starts.

``--checkpoint`` (and ``evaluate --opponent``) take a run directory or a single agent checkpoint
(a directory with ``manifest.json`` or a ``.zip``): a single agent plays every seat whose spaces
match its own. Everything is checked (readable manifests, spaces against the env's seats) before
a backend is imported.

Example:
    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "run")
    >>> check_out_dir(out, ["agent"])  # a new directory is fine
    >>> os.makedirs(out); open(os.path.join(out, "notes.txt"), "w").close()
    >>> check_out_dir(out, ["agent"])
    Traceback (most recent call last):
    ...
    marl_note.cli.common.CLIError: --out ... holds notes.txt and is no marl_note run directory; ...
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marl_note.agents.base import JointLearner
from marl_note.cli.common import CLIError

__all__ = ["RUN_FILE", "Source", "check_out_dir", "check_source_fits", "inspect_checkpoint", "load_source",
           "write_run"]

RUN_FILE = "marl_note_run.json"
RUN_FORMAT = "marl_note.cli-run/1"
_OUR_TEMP = (".marl_note-tmp-", ".marl_note-ckpt-")


def _read_run(path: str) -> dict[str, Any] | None:
    """The run record in directory ``path``, None if it has none, CLIError if it has a foreign one."""
    from marl_note.file_reads import JSON_LIMIT, read_regular

    file = os.path.join(path, RUN_FILE)
    if not os.path.lexists(file):
        return None
    try:
        record = json.loads(read_regular(file, JSON_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # FileRefused and decode errors are ValueErrors
        raise CLIError(f"{file} cannot be read as a marl_note run record ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
        raise CLIError(f"{file} is not a marl_note run record (no format {RUN_FORMAT!r})")
    return record


def check_out_dir(path: str, names: list[str]) -> None:
    """Raise a CLIError unless a run with checkpoints ``names`` may be written to ``path``; nothing is written."""
    from marl_note.agents.checkpoints import CheckpointError, check_checkpoint_target

    if os.path.lexists(path) and not os.path.isdir(path):
        raise CLIError(f"--out {path} exists and is not a directory; choose a new or empty directory")
    if os.path.isdir(path):
        entries = sorted(n for n in os.listdir(path) if not n.startswith(_OUR_TEMP))
        if entries and _read_run(path) is None:
            shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
            raise CLIError(f"--out {path} holds {shown} and is no marl_note run directory; refusing to write into "
                           f"it. Choose a new or empty directory")
    for name in names:
        try:
            check_checkpoint_target(os.path.join(path, name))
        except CheckpointError as exc:
            raise CLIError(f"--out {path}: {exc}") from None


def write_run(path: str, record: Mapping[str, Any], agents: Mapping[str, Any]) -> None:
    """Save every agent under ``path/<name>`` with its own ``save()``, then the run record (atomically, last)."""
    from marl_note.atomic_files import write_atomically

    os.makedirs(path, exist_ok=True)
    for name, agent in agents.items():
        agent.save(os.path.join(path, name))
    data = json.dumps({"format": RUN_FORMAT, **record}, indent=2, sort_keys=True, default=_plain).encode()
    write_atomically(os.path.join(path, RUN_FILE), lambda f: f.write(data + b"\n"))


def _plain(value: Any) -> Any:
    """numpy scalars and arrays in the run record as plain JSON."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


@dataclass(frozen=True)
class Source:
    """A checkpoint given on the command line: a run directory or a single agent checkpoint.

    ``seat_map`` is the run's ``{seat: checkpoint name or None}`` (None for a single checkpoint,
    which plays every seat it fits); ``manifests`` maps each checkpoint name to its path and manifest.
    """

    path: str
    option: str
    env: str | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    seat_map: Mapping[str, str | None] | None = None
    manifests: Mapping[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    record: Mapping[str, Any] = field(default_factory=dict)


def inspect_checkpoint(path: str, option: str = "--checkpoint") -> Source:
    """Read what ``path`` holds (manifests only, no arrays, no backend), or raise a CLIError saying what is wrong."""
    from marl_note.agents.checkpoints import CheckpointError, check_checkpoint_target

    if not os.path.lexists(path):
        raise CLIError(f"{option} {path} does not exist")
    record = _read_run(path) if os.path.isdir(path) else None
    if record is None and os.path.isdir(path) and not os.path.isfile(os.path.join(path, "manifest.json")):
        entries = sorted(os.listdir(path))
        if entries:
            shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
            raise CLIError(f"{option} {path} is not a marl_note checkpoint: it holds {shown}, but neither {RUN_FILE} "
                           f"(a run directory of marl_note train) nor manifest.json (an agent checkpoint)")
    if not os.path.isdir(path):
        try:
            if not path.endswith(".zip"):
                raise CheckpointError("not a .zip")
            check_checkpoint_target(path)  # reads the zip's manifest
        except CheckpointError:
            raise CLIError(f"{option} {path} is not a marl_note checkpoint: expected a run directory of marl_note "
                           f"train, an agent checkpoint directory or an agent checkpoint .zip") from None
    try:
        if record is None:
            manifest = check_checkpoint_target(path)
            if manifest is None:
                raise CLIError(f"{option} {path} is an empty directory, not a checkpoint")
            if manifest.get("kind") != "agent":
                raise CLIError(f"{option} {path} holds {manifest.get('kind')!r} data, not a whole agent "
                               f"(a checkpoint written by agent.save() or marl_note train)")
            return Source(path, option, manifests={"agent": (path, manifest)})
        seat_map = record.get("seats")
        if not isinstance(seat_map, dict) or not seat_map:
            raise CLIError(f"{os.path.join(path, RUN_FILE)} names no seats")
        manifests = {}
        for name in sorted({n for n in seat_map.values() if n is not None}, key=str):
            sub = _inside_run(path, name)
            manifest = check_checkpoint_target(sub) if os.path.isdir(sub) else None
            if manifest is None:
                raise CLIError(f"{option} {path}: the run names the checkpoint {name!r}, but {sub} holds none")
            manifests[name] = (sub, manifest)
    except CheckpointError as exc:
        raise CLIError(f"{option} {path} is not a readable marl_note checkpoint: {exc}") from None
    return Source(path, option, env=record.get("env"), env_kwargs=record.get("env_kwargs") or {},
                  seat_map=seat_map, manifests=manifests, record=record)


def _inside_run(path: str, name: Any) -> str:
    """``path/name`` for a checkpoint name of a run record, or a CLIError when it would leave the run directory.

    A run record is data: the checkpoints it names are plain entries of its own directory (no
    separators, no ``..``, and no link that resolves outside it).
    """
    where = os.path.join(path, RUN_FILE)
    if not isinstance(name, str) or not name or name in (".", "..") or os.sep in name \
            or (os.altsep and os.altsep in name) or "\0" in name:
        raise CLIError(f"{where} names the checkpoint {name!r}, which is not a plain entry of the run directory; "
                       f"refusing a path that leaves {path}")
    sub = os.path.join(path, name)
    root = os.path.realpath(path)
    if os.path.commonpath([root, os.path.realpath(sub)]) != root:
        raise CLIError(f"{where} names the checkpoint {name!r}, which resolves outside the run directory "
                       f"({os.path.realpath(sub)}); refusing it")
    return sub


def _spaces(manifest: Mapping[str, Any]) -> tuple[Any, Any, bool]:
    """``(observation space(s), action space(s), joint)`` recorded in an agent manifest."""
    from marl_note.agents.checkpoints import space_from_json

    def decode(d: Any) -> Any:
        if isinstance(d, Mapping) and "$spaces" in d:
            return {k: space_from_json(v) for k, v in d["$spaces"]}
        return space_from_json(d)

    joint = "observation_spaces" in manifest
    suffix = "_spaces" if joint else "_space"
    return decode(manifest["observation" + suffix]), decode(manifest["action" + suffix]), joint


def _fits(manifest: Mapping[str, Any], spec: Any, seat: str) -> str | None:
    """Why the agent of ``manifest`` cannot play ``seat`` (None: it can)."""
    obs, act, joint = _spaces(manifest)
    if joint:
        if list(obs) != list(spec.possible_agents):
            return (f"it is a {manifest['algorithm']} over agents {list(obs)}, the env's agents are "
                    f"{list(spec.possible_agents)}")
        obs, act = obs[seat], act[seat]
    if obs != spec.observation_space(seat) or act != spec.action_space(seat):
        return (f"its spaces are {obs} / {act}, the seat's are {spec.observation_space(seat)} / "
                f"{spec.action_space(seat)}")
    return None


def _seat_names(source: Source, spec: Any, fill: bool) -> dict[str, str]:
    """``{seat: checkpoint name}`` for every seat ``source`` plays (with ``fill``: any fitting checkpoint too)."""
    out: dict[str, str] = {}
    if source.seat_map is not None:
        unknown = [s for s in source.seat_map if s not in spec.possible_agents]
        if unknown:
            raise CLIError(f"{source.option} {source.path} was trained on seats {list(source.seat_map)}; this env's "
                           f"seats are {list(spec.possible_agents)}")
        out = {s: n for s, n in source.seat_map.items() if n is not None}
    if source.seat_map is None or fill:
        for seat in spec.possible_agents:
            fitting = [n for n, (_, m) in source.manifests.items() if _fits(m, spec, seat) is None]
            if seat not in out and fitting:
                out[seat] = fitting[0]
    return out


def check_source_fits(source: Source, spec: Any, env_name: str, fill: bool = False) -> dict[str, str]:
    """``{seat: checkpoint name}`` of the seats ``source`` plays in the env, or a CLIError saying why it cannot."""
    for name, (_, manifest) in source.manifests.items():
        if "observation_space" not in manifest and "observation_spaces" not in manifest:
            raise CLIError(f"{source.option} {source.path}: checkpoint {name!r} records no spaces")
    names = _seat_names(source, spec, fill)
    for seat, name in names.items():
        problem = _fits(source.manifests[name][1], spec, seat)
        if problem is not None:
            raise CLIError(f"{source.option} {source.path} cannot play seat {seat!r} of {env_name}: {problem}")
    if not names:
        path, manifest = next(iter(source.manifests.values()))
        problem = _fits(manifest, spec, spec.possible_agents[0])
        raise CLIError(f"{source.option} {path} (a {manifest.get('algorithm')}) fits no seat of {env_name}: {problem}")
    return names


def load_source(source: Source, seats: Mapping[str, str], backend: str | None) -> dict[str, Any]:
    """Restore the checkpoints (each once) with the library's ``restore``: ``{seat: agent}``.

    ``backend`` (``"torch"``/``"tf"``) overrides the recorded one; a checkpoint loads in either.
    """
    from marl_note.agents.checkpoints import restore
    from marl_note.cli.agents import import_backend

    loaded: dict[str, Any] = {}
    out = {}
    for seat, name in seats.items():
        if name not in loaded:
            path, manifest = source.manifests[name]
            chosen = backend or manifest["backend"]
            import_backend(chosen)
            loaded[name] = restore(path, backend=chosen)
        agent = loaded[name]
        if isinstance(agent, JointLearner):  # the seat actor of this seat
            agent = agent.seat_agents()[list(loaded[name].agents).index(seat)]
        out[seat] = agent
    return out
