"""Checkpoints of agents and runs: one JSON manifest plus numpy arrays, in a directory or a zip. No pickle.

- :mod:`~marl_note.agents.checkpoints.format`: the on-disk format: :class:`CheckpointError`,
  :func:`write_checkpoint` / :func:`read_checkpoint` (atomic, checksummed),
  :func:`check_checkpoint_target`, Gymnasium spaces as JSON.
  The arrays travel as ``.npz`` bytes, every header checked before anything is allocated.
- :mod:`~marl_note.agents.checkpoints.config_codec`: constructor-config capture and its JSON encoding.
- :mod:`~marl_note.agents.checkpoints.state_check`: saved arrays checked against a live agent or
  replay buffer before anything is assigned.
- :mod:`~marl_note.agents.checkpoints.saving`: the :class:`Saving` mixin (``save`` / ``restore`` /
  ``save_param`` / ``restore_param``) every agent inherits.
- :mod:`~marl_note.agents.checkpoints.restoring`: building an agent from a checkpoint, and
  :func:`restore`, which restores any agent for the backend its manifest names (or another).

Run checkpoints (:mod:`marl_note.trainers.run_state`) use the same format.
"""
from marl_note.agents.checkpoints.config_codec import decode_config, encode_config
from marl_note.agents.checkpoints.format import (
    CheckpointError,
    check_checkpoint_target,
    read_checkpoint,
    space_from_json,
    space_to_json,
    write_checkpoint,
)
from marl_note.agents.checkpoints.restoring import REPLAY_PREFIX, backend_of, restore
from marl_note.agents.checkpoints.saving import Saving

__all__ = ["CheckpointError", "read_checkpoint", "write_checkpoint", "check_checkpoint_target", "space_to_json",
           "space_from_json", "encode_config", "decode_config", "Saving", "restore", "backend_of", "REPLAY_PREFIX"]
