"""Saving never deletes the user's files, is atomic at every crash point, and respects the umask."""
import json
import os
import shutil
import stat
import time
import zipfile

import numpy as np
import pytest

from marl_note.agents.checkpoints.format import FORMAT, CheckpointError, read_checkpoint, write_checkpoint
from marl_note.atomic_files import STALE_AFTER_S
from tests.checkpoint_helpers import KILLED_SAVE, paused_save, run_killed


def tree(root):
    """{relative path: bytes} of every file under ``root`` (directories as None)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = fh.read()
    return out


def user_files(root):
    (root / "notes.txt").write_text("my notes")
    (root / "sub").mkdir()
    (root / "sub" / "data.csv").write_text("1,2,3")


def test_foreign_directories_and_files_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    user_files(results)
    before = tree(tmp_path)
    with pytest.raises(CheckpointError, match=r"non-empty directory that holds no marl_note checkpoint "
                                              r"\(it holds notes.txt, sub\)"):
        write_checkpoint(results, {"v": 1}, {"a": np.zeros(2)})
    monkeypatch.chdir(results)
    with pytest.raises(CheckpointError, match="holds no marl_note checkpoint"):
        write_checkpoint(".", {"v": 1}, {"a": np.zeros(2)})  # agent.save(".") used to wipe the working dir
    (tmp_path / "file").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="is not a checkpoint directory"):
        write_checkpoint(tmp_path / "file", {"v": 1}, {"a": np.zeros(2)})
    (tmp_path / "mine.zip").write_bytes(b"PK not really")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "someone else"}))
    before = tree(tmp_path)
    for name in ("mine.zip", "other.zip"):
        with pytest.raises(CheckpointError, match="is not a marl_note checkpoint zip"):
            write_checkpoint(tmp_path / name, {"v": 1}, {"a": np.zeros(2)})
    (tmp_path / "results.zip").mkdir()
    with pytest.raises(CheckpointError, match="is not a marl_note checkpoint zip"):
        write_checkpoint(tmp_path / "results.zip", {"v": 1}, {"a": np.zeros(2)})
    (tmp_path / "results.zip").rmdir()
    (results / "manifest.json").write_text(json.dumps({"name": "a dataset manifest"}))
    with pytest.raises(CheckpointError, match="holds a manifest.json that is not a marl_note checkpoint"):
        write_checkpoint(results, {"v": 1}, {"a": np.zeros(2)})
    (results / "manifest.json").unlink()
    assert tree(tmp_path) == before


@pytest.mark.parametrize("fmt", ["dir", "zip"])
def test_a_save_replaces_only_its_own_files(tmp_path, fmt):
    path = tmp_path / ("ck.zip" if fmt == "zip" else "ck")
    if fmt == "dir":
        path.mkdir()  # an existing empty directory is fine
    write_checkpoint(path, {"v": 1}, {"a": np.zeros(2)})
    user_files(path if fmt == "dir" else tmp_path)
    write_checkpoint(path, {"v": 2}, {"a": np.ones(3)})
    write_checkpoint(path, {"v": 3}, {"a": np.full(4, 2.0)})
    manifest, arrays = read_checkpoint(path)
    assert manifest["v"] == 3 and arrays["a"].tolist() == [2.0] * 4
    where = path if fmt == "dir" else tmp_path
    assert (where / "notes.txt").read_text() == "my notes" and (where / "sub" / "data.csv").read_text() == "1,2,3"
    if fmt == "dir":
        assert sorted(os.listdir(path)) == sorted(["manifest.json", manifest["arrays_file"], "notes.txt", "sub"])
    else:
        assert sorted(os.listdir(tmp_path)) == ["ck.zip", "notes.txt", "sub"]


def write_legacy(path, manifest, arrays):
    """A directory checkpoint exactly as releases before content-named arrays files wrote it."""
    os.makedirs(path)
    full = {"format": FORMAT, **manifest, "arrays": sorted(arrays)}
    with open(os.path.join(path, "manifest.json"), "w") as f:
        f.write(json.dumps(full, indent=2, sort_keys=True))
    np.savez(os.path.join(path, "arrays.npz"), **arrays)


def test_checkpoints_of_the_previous_layout_load_and_are_replaced_cleanly(tmp_path):
    path = tmp_path / "old"
    write_legacy(path, {"v": 1}, {"a": np.arange(3.0)})
    (path / "notes.txt").write_text("mine")
    manifest, arrays = read_checkpoint(path)
    assert manifest["v"] == 1 and arrays["a"].tolist() == [0.0, 1.0, 2.0]
    write_checkpoint(path, {"v": 2}, {"a": np.ones(1)})
    manifest, arrays = read_checkpoint(path)
    assert manifest["v"] == 2 and arrays["a"].tolist() == [1.0]
    assert sorted(os.listdir(path)) == sorted(["manifest.json", manifest["arrays_file"], "notes.txt"])


class Crash(BaseException):
    """A process killed mid-save: nothing after the crash point runs (BaseException, so no except catches it)."""


def crashing(monkeypatch, at, images, watch, after=False):
    """Make the ``at``-th file-system step (os.open / os.fsync / os.replace) crash; before crashing, copy
    ``watch`` to ``images`` as the disk would be seen by the next process (after the step if ``after``)."""
    calls = {"n": 0}
    real = {name: getattr(os, name) for name in ("open", "fsync", "replace")}

    def wrap(name):
        def step(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] != at:
                return real[name](*args, **kwargs)
            if after:
                real[name](*args, **kwargs)
            shutil.copytree(watch, images / f"{name}-{at}-{'after' if after else 'before'}")
            raise Crash(name)
        return step

    for name in real:
        monkeypatch.setattr(os, name, wrap(name))
    return calls


@pytest.mark.parametrize("fmt", ["dir", "zip"])
@pytest.mark.parametrize("after", [False, True])
def test_a_crash_at_any_step_leaves_the_old_or_the_new_checkpoint(tmp_path, monkeypatch, fmt, after):
    work, images = tmp_path / "work", tmp_path / "images"
    work.mkdir()
    images.mkdir()
    path = work / ("ck.zip" if fmt == "zip" else "ck")
    old = {"a": np.zeros(2), "b": np.arange(3)}
    new = {"a": np.ones(5), "c": np.full(2, 7)}
    write_checkpoint(path, {"v": "old"}, old)
    user_files(path if fmt == "dir" else work)
    pristine = tmp_path / "pristine"
    shutil.copytree(work, pristine)
    clean = tree(work)
    at = 1
    while True:
        shutil.rmtree(work)
        shutil.copytree(pristine, work)
        with monkeypatch.context() as m:
            calls = crashing(m, at, images, work, after)
            try:
                write_checkpoint(path, {"v": "new"}, new)
            except Crash:
                pass
            else:
                break
        assert calls["n"] == at
        # the save process itself, stopped at this step by an exception: the old checkpoint and no debris
        # at all, or (stopped after the commit) the new one; the user's files are untouched either way
        version = read_checkpoint(path)[0]["v"]
        now = tree(work)
        assert all(now[k] == v for k, v in clean.items() if "notes" in k or "data" in k)
        if not after:
            assert version == "new" or now == clean, f"step {at}"
            assert not [k for k in now if ".marl_note-" in k], f"step {at}"
        at += 1
    assert at > 3, "the save must have gone through several steps"
    assert read_checkpoint(path)[0]["v"] == "new"
    # every disk image a crash could leave behind holds the old or the new checkpoint, whole, and the
    # user's files; the next save there leaves no debris from the crashed one
    versions = set()
    for image in sorted(images.iterdir()):
        target = image / path.name
        manifest, arrays = read_checkpoint(target)
        versions.add(manifest["v"])
        expect = old if manifest["v"] == "old" else new
        assert sorted(arrays) == sorted(expect) and all(np.array_equal(arrays[k], expect[k]) for k in expect)
        home = target if fmt == "dir" else image
        assert (home / "notes.txt").read_text() == "my notes"
        write_checkpoint(target, {"v": "next"}, old)
        names = sorted(os.listdir(home))
        ours = ["ck.zip"] if fmt == "zip" else ["manifest.json", read_checkpoint(target)[0]["arrays_file"]]
        # (a zip's temporary file lies beside it: the next save removes it too, since its writer
        # is no longer writing it; see test_the_next_save_removes_a_killed_saves_leftovers_only)
        assert names == sorted(ours + ["notes.txt", "sub"]), image.name
    assert versions == {"old", "new"}  # a crash before the commit leaves the old one, after it the new one


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL, and telling a running writer by its pid, are POSIX")
@pytest.mark.parametrize("fmt", ["dir", "zip"])
def test_the_next_save_removes_a_killed_saves_leftovers_only(tmp_path, fmt):
    path = tmp_path / ("ck.zip" if fmt == "zip" else "ck")
    home = tmp_path if fmt == "zip" else path  # where a save's temporary files lie
    write_checkpoint(path, {"v": "old"}, {"a": np.zeros(3)})
    user_files(tmp_path)
    (home / ".marl_note-ckpt-mine.txt").write_text("our prefix, but not a name we give temporary files")
    run_killed(KILLED_SAVE, path, 1 if fmt == "zip" else 2)  # killed just before the commit (the last rename)
    debris = sorted(n for n in os.listdir(home) if n.startswith(".marl_note-ckpt-") and "mine" not in n)
    assert debris and read_checkpoint(path)[0]["v"] == "old"
    with paused_save(tmp_path / "other.zip") as live:  # another process is saving beside it right now
        live_temps = sorted(set(os.listdir(tmp_path)) - set(debris) - {"ck", "ck.zip", "notes.txt", "sub",
                                                                          ".marl_note-ckpt-mine.txt"})
        assert len(live_temps) == 1 and live_temps[0].startswith(".marl_note-ckpt-")
        write_checkpoint(path, {"v": "next"}, {"a": np.ones(3)})
        names = set(os.listdir(tmp_path)) | set(os.listdir(home))
        assert not names & set(debris) and live_temps[0] in names and ".marl_note-ckpt-mine.txt" in names
    assert live.returncode == 0 and read_checkpoint(tmp_path / "other.zip")[0]["v"] == "live"
    assert read_checkpoint(path)[0]["v"] == "next"
    ours = ["manifest.json", read_checkpoint(path)[0].get("arrays_file")] if fmt == "dir" else []
    assert sorted(os.listdir(home)) == sorted(ours + [".marl_note-ckpt-mine.txt"] + (
        ["ck.zip", "notes.txt", "other.zip", "sub"] if fmt == "zip" else []))


def test_leftovers_of_unknown_writers_go_once_they_are_an_hour_old(tmp_path):
    """Where the name tells no writer on this machine (another host, or a name from before names
    recorded the writer), only the age counts; other names with our prefix, and folders, stay."""
    from marl_note.atomic_files import _HOST

    other_host = "0" * 8 if _HOST != "0" * 8 else "1" * 8

    def old_style(h):
        return f".marl_note-ckpt-{h}.zip"

    def foreign(h):
        return f".marl_note-ckpt-{other_host}-1-{h}.zip"

    fresh, old = "0" * 16, "f" * 16
    hour_ago = time.time() - STALE_AFTER_S - 60
    for name, when in [(old_style(fresh), None), (old_style(old), hour_ago), (foreign(fresh), None),
                       (foreign(old), hour_ago), (".marl_note-ckpt-backup.zip", hour_ago)]:
        (tmp_path / name).write_text("x")
        if when is not None:
            os.utime(tmp_path / name, (when, when))
    (tmp_path / old_style("a" * 16)).mkdir()
    os.utime(tmp_path / old_style("a" * 16), (hour_ago, hour_ago))
    before = set(os.listdir(tmp_path))
    write_checkpoint(tmp_path / "ck.zip", {"v": 1}, {"a": np.zeros(2)})
    assert before - set(os.listdir(tmp_path)) == {old_style(old), foreign(old)}


def test_an_interrupted_first_save_leaves_nothing(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = os.replace

    def fail_second(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(*args)

    monkeypatch.setattr(os, "replace", fail_second)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(tmp_path / "ck", {"v": 1}, {"a": np.zeros(2)})
    assert os.listdir(tmp_path) == []


def test_files_and_directories_get_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_checkpoint(tmp_path / "ck", {"v": 1}, {"a": np.zeros(2)})
        write_checkpoint(tmp_path / "ck.zip", {"v": 1}, {"a": np.zeros(2)})
        os.umask(0o027)
        write_checkpoint(tmp_path / "ck2", {"v": 1}, {"a": np.zeros(2)})
    finally:
        os.umask(old)

    def mode(p):
        return stat.S_IMODE(os.stat(p).st_mode)

    assert mode(tmp_path / "ck") == 0o755 and mode(tmp_path / "ck.zip") == 0o644
    assert {mode(p) for p in (tmp_path / "ck").iterdir()} == {0o644}
    assert mode(tmp_path / "ck2") == 0o750 and {mode(p) for p in (tmp_path / "ck2").iterdir()} == {0o640}
    os.chmod(tmp_path / "ck.zip", 0o600)  # a replaced file keeps the permissions its owner gave it
    write_checkpoint(tmp_path / "ck.zip", {"v": 2}, {"a": np.zeros(2)})
    assert mode(tmp_path / "ck.zip") == 0o600


def test_plots_get_the_usual_permissions(tmp_path):
    pytest.importorskip("matplotlib")
    from marl_note.trainers.plot import plot_metric

    old = os.umask(0o022)
    try:
        path = plot_metric([(1, 0.5), (2, 0.7)], str(tmp_path / "reward.png"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 and os.listdir(tmp_path) == ["reward.png"]
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
