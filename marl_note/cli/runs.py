"""The output of ``marl_note train --out DIR`` and reading checkpoints back for ``evaluate`` and ``play``.

A run directory holds the agents twice, each time one agent checkpoint per distinct agent
(written by the agents' own ``save()``: ``agent`` for self-play, one per seat for independent
agents, ``maddpg`` for MADDPG): ``last/`` the weights at the end of training, ``best/`` the
weights at the best periodic test (saved at each new best, as SB3's ``EvalCallback`` keeps
``best_model``; missing when no test ran). ``marl_note_run.json`` names the env, the algorithm,
the backend, which checkpoint plays which seat (``null``: the seat was played by the opponent)
and which of ``best``/``last`` were saved. Each checkpoint and the run file are written
atomically, the run file last. ``--out`` must be missing, empty or an earlier run directory;
anything else is refused before training starts, and an earlier run's files there (its
checkpoints, its plot) are removed when the new run starts, so that none of them stays beside
the new run's.

``--checkpoint`` (and ``evaluate --opponent``) take a run directory or a single agent checkpoint
(a directory with ``manifest.json`` or a ``.zip``): a single agent plays every seat whose spaces
match its own. Of a run directory the best weights play (``--which last``: the last ones); a run
written before there were two (its checkpoints beside the run file) plays what it saved.
Everything is checked (readable manifests, spaces against the env's seats) before a backend is
imported.

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

__all__ = ["PLOT_FILE", "RUN_FILE", "SaveBest", "Source", "WHICH", "check_out_dir", "check_source_fits",
           "clear_earlier_run", "inspect_checkpoint", "load_source", "write_run"]

RUN_FILE = "marl_note_run.json"
PLOT_FILE = "metric.png"
WHICH = ("best", "last")  # the run directory's sub-directories: the best test's weights and the last ones
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
    for which in WHICH:
        folder = os.path.join(path, which)
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise CLIError(f"--out {path}: {folder} exists and is not a directory")
        for name in names:
            try:
                check_checkpoint_target(os.path.join(folder, name))
            except CheckpointError as exc:
                raise CLIError(f"--out {path}: {exc}") from None


def clear_earlier_run(path: str) -> list[str]:
    """Remove what an earlier run wrote into run directory ``path`` (its checkpoints, its plot); returns them.

    Only entries the run record names (its checkpoints, in ``best/``, ``last/`` or beside the
    record for a run written before there were two) and the plot are removed; anything else in
    the directory is kept. The record itself stays until the new run replaces it.
    """
    import shutil

    from marl_note.agents.checkpoints import CheckpointError, check_checkpoint_target

    record = _read_run(path) if os.path.isdir(path) else None
    if record is None:
        return []
    seat_map = record.get("seats")
    names = sorted({n for n in seat_map.values() if n is not None}, key=str) if isinstance(seat_map, dict) else []
    removed = []
    for folder in ([path] if "checkpoints" not in record else []) + [os.path.join(path, w) for w in WHICH]:
        if folder != path and not (os.path.isdir(folder) and not os.path.islink(folder)):
            continue
        for name in names:
            sub = _inside_run(folder, name, path)
            try:
                is_checkpoint = os.path.isdir(sub) and check_checkpoint_target(sub) is not None
            except CheckpointError:
                is_checkpoint = False
            if is_checkpoint:
                shutil.rmtree(sub)
                removed.append(sub)
        if folder != path and not os.listdir(folder):
            os.rmdir(folder)
    plot = os.path.join(path, PLOT_FILE)
    if os.path.isfile(plot):
        os.remove(plot)
        removed.append(plot)
    return removed


class SaveBest:
    """The trainer's ``save_best_fn`` of ``train``: each new best test's weights into ``path/best/<name>``.

    ``agents`` (``{checkpoint name: agent}``) is set once the agents are built; ``saved`` is the
    episode count of the last save (None: none yet).

    Example:
        >>> saver = SaveBest("runs/x")
        >>> saver(10)  # no agents yet: nothing is saved
        >>> saver.saved is None
        True
    """

    def __init__(self, path: str):
        self.path = path
        self.saved: int | None = None
        self.agents: dict[str, Any] = {}

    def __call__(self, episodes: int) -> None:
        if not self.agents:
            return
        for name, agent in self.agents.items():
            agent.save(os.path.join(self.path, "best", name))
        self.saved = int(episodes)


def write_run(path: str, record: Mapping[str, Any], agents: Mapping[str, Any], best: bool = False) -> None:
    """Save every agent under ``path/last/<name>`` with its own ``save()``, then the run record (atomically, last).

    ``best``: the best test's weights are in ``path/best`` (:class:`SaveBest`); the record says so.
    """
    from marl_note.atomic_files import write_atomically

    os.makedirs(path, exist_ok=True)
    for name, agent in agents.items():
        agent.save(os.path.join(path, "last", name))
    checkpoints = {"last": "last", "best": "best" if best else None}
    data = json.dumps({"format": RUN_FORMAT, **record, "checkpoints": checkpoints}, indent=2, sort_keys=True,
                      default=_plain).encode()
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
    which: str | None = None  # of a run directory: "best" or "last" (None: a single checkpoint, or an older run)
    note: str | None = None  # why the weights that play are not the ones asked for (no best weights saved)


def inspect_checkpoint(path: str, option: str = "--checkpoint", which: str | None = None) -> Source:
    """Read what ``path`` holds (manifests only, no arrays, no backend), or raise a CLIError saying what is wrong.

    ``which``: of a run directory, the ``"best"`` weights (``None``: those, else the last when the run saved no
    best) or the ``"last"`` ones; a single agent checkpoint has one set of weights and takes no ``which``.
    """
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
            if which is not None:
                raise CLIError(f"--which {which}: {option} {path} is a single agent checkpoint (one set of weights), "
                               f"not a run directory of marl_note train with best and last weights")
            return Source(path, option, manifests={"agent": (path, manifest)})
        seat_map = record.get("seats")
        if not isinstance(seat_map, dict) or not seat_map:
            raise CLIError(f"{os.path.join(path, RUN_FILE)} names no seats")
        folder, chosen, note = _weights_folder(path, record, which, option)
        manifests = {}
        for name in sorted({n for n in seat_map.values() if n is not None}, key=str):
            sub = _inside_run(folder, name, path)
            manifest = check_checkpoint_target(sub) if os.path.isdir(sub) else None
            if manifest is None:
                raise CLIError(f"{option} {path}: the run names the checkpoint {name!r}, but {sub} holds none")
            manifests[name] = (sub, manifest)
    except CheckpointError as exc:
        raise CLIError(f"{option} {path} is not a readable marl_note checkpoint: {exc}") from None
    return Source(path, option, env=record.get("env"), env_kwargs=record.get("env_kwargs") or {},
                  seat_map=seat_map, manifests=manifests, record=record, which=chosen, note=note)


def _weights_folder(path: str, record: Mapping[str, Any], which: str | None,
                    option: str) -> tuple[str, str | None, str | None]:
    """``(folder holding the checkpoints, "best"/"last" or None, note)`` of run directory ``path``."""
    saved = record.get("checkpoints")
    if saved is None:  # written before runs kept two sets of weights: the checkpoints beside the record
        if which is not None:
            raise CLIError(f"--which {which}: {option} {path} was written by an older marl_note train that kept one "
                           f"set of weights (the last); leave --which out to use them")
        return path, None, None
    if not isinstance(saved, dict) or not all(saved.get(w) in (w, None) for w in WHICH) or saved.get("last") is None:
        raise CLIError(f"{os.path.join(path, RUN_FILE)} names its checkpoints {saved!r}; expected "
                       f"{{\"best\": \"best\" or null, \"last\": \"last\"}}")
    if which == "best" and saved.get("best") is None:
        raise CLIError(f"--which best: {option} {path} has no best weights (no test metric picked them: independent "
                       f"agents in a board game test against each other); --which last uses the last ones")
    if which is None and saved.get("best") is None:
        return _inside_run(path, "last"), "last", "the run saved no best weights (no test metric picked them), " \
                                                    "so the last weights play"
    chosen = which or "best"
    return _inside_run(path, chosen), chosen, None


def _inside_run(path: str, name: Any, run: str | None = None) -> str:
    """``path/name`` for a checkpoint name of a run record, or a CLIError when it would leave the run directory.

    A run record is data: the checkpoints it names are plain entries of its own directory (no
    separators, no ``..``, and no link that resolves outside it).
    """
    where = os.path.join(run or path, RUN_FILE)  # run: the run directory, when ``path`` is its best/ or last/
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
