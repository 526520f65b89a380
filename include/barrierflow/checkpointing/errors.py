"""Errors of the checkpoint core; all derive from :class:`barrierflow.errors.BarrierflowError`."""

from __future__ import annotations

import enum
from typing import Literal

from barrierflow.errors import BarrierflowError, CheckpointError


class SinkCommitFailedError(BarrierflowError):
    """A sink could not commit or abort an epoch's transaction after its checkpoint ended.

    The message names the pipeline (or stage), the sink, the epoch (the checkpoint id), what it
    means for the output and the fix, then the sink's own error.

    Attributes:
        owner: the pipeline or stage, as named in messages (``pipeline shop``, ``stage b of
            pipeline shop``).
        sink: the sink's name.
        checkpoint_id: the epoch (checkpoint) whose transaction was left unfinished.
        action: ``commit`` (the checkpoint completed) or ``abort`` (it failed).
        cause: the sink's error.
    """

    def __init__(self, owner: str, sink: str, checkpoint_id: int, action: Literal["commit", "abort"],
                 cause: BaseException) -> None:
        self.owner = owner
        self.sink = sink
        self.checkpoint_id = checkpoint_id
        self.action = action
        self.cause = cause
        if action == "commit":
            what = (f"the commit of epoch {checkpoint_id} (checkpoint {checkpoint_id}, completed) failed, so the "
                    "sink's output lacks that epoch: its transaction stays pre-committed (it is never skipped); "
                    "once the sink answers again, run `barrierflow reconcile <spec>` to commit it (or run the "
                    "pipeline again, which commits it before it starts)")
        else:
            what = (f"the abort of epoch {checkpoint_id} (checkpoint {checkpoint_id}, failed) failed: its "
                    "transaction stays open, holding its write-ahead batches, until `barrierflow reconcile <spec>` or "
                    "the next run of the pipeline aborts it; the batches then go into a later epoch")
        super().__init__(f"{owner}: sink {sink!r}: {what}. The sink's error: {type(cause).__name__}: {cause}")


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
