"""Errors of the checkpoint core; all derive from :class:`barrierflow.errors.BarrierflowError`."""

from __future__ import annotations

import enum

from barrierflow.errors import BarrierflowError, CheckpointError


class SinkCommitFailedError(BarrierflowError):
    """A sink could not commit or abort an epoch's transaction after its checkpoint ended."""


class SinkPreCommitError(CheckpointError):
    """A sink's pre-commit failed inside the asynchronous phase (fails the checkpoint with
    ``PRECOMMIT_FAILED``; the job goes on)."""


class CheckpointLifecycleError(CheckpointError):
    """A checkpoint was asked to move between two states the lifecycle does not connect.

    Attributes:
        checkpoint_id: the checkpoint.
        current: its state (a :class:`~barrierflow.checkpointing.lifecycle.CheckpointState`).
        target: the state asked for.
    """

    def __init__(self, checkpoint_id: int, current: enum.Enum, target: enum.Enum) -> None:
        self.checkpoint_id = checkpoint_id
        self.current = current
        self.target = target
        super().__init__(
            f"checkpoint {checkpoint_id} cannot go from {current.value} to {target.value}; "
            "this is a bug in the checkpoint coordinator (see barrierflow.checkpointing.lifecycle)")


class GlobalManifestExistsError(CheckpointError):
    """A global checkpoint already has a global manifest: it is never overwritten (a second
    pipeline coordinator is writing to the same checkpoint store)."""
