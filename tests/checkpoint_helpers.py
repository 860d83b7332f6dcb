"""Test helpers shared by the agent and run checkpoint tests."""
from marl_note.agents.checkpoints import read_checkpoint, write_checkpoint


def rewrite_checkpoint(path, edit_arrays=None, edit_manifest=None):
    """Change a checkpoint's content through the library's own writer (so its checksums are valid).

    ``edit_arrays(arrays)`` and ``edit_manifest(manifest)`` change the read dicts in place; the
    fields the writer fills in itself (format, array names, checksums, arrays file) are dropped.
    """
    manifest, arrays = read_checkpoint(path)
    if edit_arrays:
        edit_arrays(arrays)
    if edit_manifest:
        edit_manifest(manifest)
    for key in ("format", "arrays", "checksum", "arrays_sha256", "arrays_file"):
        manifest.pop(key, None)
    write_checkpoint(path, manifest, arrays)
