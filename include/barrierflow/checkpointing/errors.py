"""Errors of the checkpoint core; all derive from :class:`barrierflow.errors.BarrierflowError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.errors import BarrierflowError, CheckpointError

if TYPE_CHECKING:
    from barrierflow.checkpointing.lifecycle import CheckpointState


class SinkCommitFailedError(BarrierflowError):
    """A sink could not commit or abort an epoch's transaction after its checkpoint ended."""


class SinkPreCommitError(CheckpointError):
    """A sink's pre-commit failed inside the asynchronous phase (fails the checkpoint with
    ``PRECOMMIT_FAILED``; the job goes on)."""


class CheckpointLifecycleError(CheckpointError):
    """A checkpoint was asked to move between two states the lifecycle does not connect.

    Attributes:
        checkpoint_id: the checkpoint.
        current: its state.
        target: the state asked for.
    """

    def __init__(self, checkpoint_id: int, current: CheckpointState, target: CheckpointState) -> None:
        self.checkpoint_id = checkpoint_id
        self.current = current
        self.target = target
        super().__init__(
            f"checkpoint {checkpoint_id} cannot go from {current.value} to {target.value}; "
            "this is a bug in the checkpoint coordinator (see barrierflow.checkpointing.lifecycle)")
