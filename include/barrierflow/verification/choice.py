"""The one rule for choosing the checkpoint a restore starts from.

Every caller uses :func:`choose_checkpoint`: ``barrierflow restore``, the recovery DAG (through
:mod:`barrierflow.ops.restore`) and a job that starts without a local Spark checkpoint.
The rule: *the chosen checkpoint is verified structurally before anything is restored*::

    "latest-valid": the newest checkpoint of the current timeline that passes structural
                    verification (latest_valid); the newer ones are skipped, each with why
    "latest":       the newest checkpoint of the current timeline (a damaged one, whose
                    manifest is gone or unreadable, included: damage is reported, never
                    silently stepped over), then verified
    an id:          that checkpoint (not abandoned by an earlier restore), then verified
    verification failed -> ChosenCheckpointInvalidError naming every failed check

Every verification result is stored beside its checkpoint (``chk-<n>/_verification.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointError, CheckpointNotFoundError, UserInputError
from barrierflow.spec.models import PipelineSpec
from barrierflow.verification.runner import candidate_ids, select_ids, verify_checkpoints
from barrierflow.verification.selection import latest_valid

LATEST_VALID = "latest-valid"
LATEST = "latest"
#: What a checkpoint request accepts besides a positive checkpoint id.
CHECKPOINT_CHOICES = (LATEST_VALID, LATEST)

CheckpointRequest = int | Literal["latest-valid", "latest"]


class ChosenCheckpointInvalidError(CheckpointError, UserInputError):
    """The checkpoint asked for (by id, or as ``latest``) fails structural verification.

    Attributes:
        checkpoint_id: the checkpoint verified.
        failures: ``(check name, message)`` of every failed check.
    """

    def __init__(self, checkpoint_id: int, failures: list[tuple[str, str]], detail: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.failures = failures
        super().__init__(detail)


@dataclass
class CheckpointChoice:
    """The checkpoint to restore, and why.

    Attributes:
        requested: ``"latest-valid"``, ``"latest"`` or an id.
        checkpoint_id: the checkpoint chosen.
        skipped: ``(checkpoint id, reason)`` of the newer checkpoints passed over, newest first
            (only ``latest-valid`` skips any).
        verification: the verdict on the chosen checkpoint, one line.
    """

    requested: CheckpointRequest
    checkpoint_id: int
    skipped: list[tuple[int, str]] = field(default_factory=list)
    verification: str = "passed"

    def as_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "checkpoint_id": self.checkpoint_id,
                "skipped": [{"checkpoint_id": cid, "reason": why} for cid, why in self.skipped],
                "verification": self.verification}


def choose_checkpoint(spec: PipelineSpec, store: CheckpointStore, requested: CheckpointRequest, *,
                      spec_path: str = "SPEC") -> CheckpointChoice:
    """Resolve ``requested`` to a verified checkpoint (module docstring).

    Raises:
        CheckpointNotFoundError: no checkpoint exists / none passes (``latest-valid``: the
            message lists why each failed), or the id does not exist or was abandoned by an
            earlier restore.
        ChosenCheckpointInvalidError: the requested checkpoint fails a structural check; the
            message names the checkpoint and each failed check and suggests ``latest-valid``.
        StorageError: the checkpoint store cannot be read.
    """
    if requested == LATEST_VALID:
        selection = latest_valid(spec, store)
        return CheckpointChoice(requested, selection.checkpoint_id, list(selection.skipped),
                                "the newest checkpoint that passes structural verification")
    if requested == LATEST:
        ids = candidate_ids(store)
        if not ids:
            raise CheckpointNotFoundError(f"pipeline {spec.name!r} has no completed checkpoint in {store.uri} "
                                          "to restore; the job never completed one")
        checkpoint_id = ids[-1]
    else:
        checkpoint_id = int(requested)
        if checkpoint_id in store.abandoned():
            raise CheckpointNotFoundError(
                f"checkpoint {checkpoint_id} of pipeline {spec.name!r} was abandoned by an earlier restore (its "
                f"timeline was discarded) and cannot be restored; use checkpoint={LATEST_VALID!r} or an id from "
                f"'barrierflow checkpoints list {spec_path}'")
        select_ids(store, checkpoint_id=checkpoint_id)  # CheckpointNotFoundError if there is no such checkpoint
    report = verify_checkpoints(spec, store, [checkpoint_id])[0]
    if not report.passed:
        failures = [(c.name, c.message) for c in report.failures]
        listed = "; ".join(f"the {c.name} check: {c.message}" + (f" [{c.file}]" if c.file and c.file not in c.message
                                                                 else "")
                           for c in report.failures)
        raise ChosenCheckpointInvalidError(
            checkpoint_id, failures,
            f"checkpoint {checkpoint_id} of pipeline {spec.name!r} (requested as checkpoint={requested!r}) fails "
            f"structural verification, so restoring it would fail or resume from damaged state: failed {listed}. "
            f"Use checkpoint={LATEST_VALID!r} to restore the newest checkpoint that passes (the damaged ones are "
            "skipped and listed), or choose another id.",
        )
    return CheckpointChoice(requested, checkpoint_id, [], "passed structural verification")
