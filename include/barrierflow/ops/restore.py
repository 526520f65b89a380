"""Choose a checkpoint and restore the pipeline's job from it.

The choice follows the one rule of :mod:`barrierflow.verification.choice` (the chosen
checkpoint is verified structurally first), whoever asks:

* ``barrierflow restore SPEC --latest | --latest-valid | --checkpoint N`` calls :func:`restore`,
  which chooses and restores under the job's lease (no job, reconciliation or other restore
  can start in between);
* the recovery DAG calls :func:`choose` in one task and :func:`restore_chosen` in the next
  (its first task made sure the job is stopped).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.ops.pipeline import open_pipeline
from barrierflow.recovery.restore import RestoreReport, restore_pipeline
from barrierflow.verification.choice import CheckpointChoice, CheckpointRequest, choose_checkpoint
from barrierflow.workdir.layout import JobLayout
from barrierflow.workdir.lease import JobLease


@dataclass(frozen=True)
class RestoreOutcome:
    """The checkpoint chosen (and why) and what the restore did."""

    choice: CheckpointChoice
    report: RestoreReport

    def as_dict(self) -> dict[str, Any]:
        return {**self.report.as_dict(), "requested": self.choice.requested,
                "skipped": [{"checkpoint_id": c, "reason": w} for c, w in self.choice.skipped],
                "verification": self.choice.verification}


def choose(spec_path: str | os.PathLike[str], requested: CheckpointRequest) -> CheckpointChoice:
    """The checkpoint ``requested`` resolves to, verified first (see
    :func:`barrierflow.verification.choice.choose_checkpoint` for the rule and errors)."""
    pipeline = open_pipeline(spec_path)
    return choose_checkpoint(pipeline.spec, pipeline.store, requested, spec_path=pipeline.spec_path)


def restore(spec_path: str | os.PathLike[str], requested: CheckpointRequest, *,
            accept_duplicates: bool = False) -> RestoreOutcome:
    """Choose the checkpoint ``requested`` resolves to and restore it, holding the job's lease
    throughout.

    Raises:
        JobAlreadyRunningError: the job runs, or a restore or reconciliation is under way.
        CheckpointNotFoundError, ChosenCheckpointInvalidError: see :func:`choose`.
        CheckpointCorruptError, DuplicateOutputError: see
            :func:`barrierflow.recovery.restore.restore_pipeline`.
    """
    pipeline = open_pipeline(spec_path)
    layout = JobLayout.for_spec(pipeline.spec)
    with JobLease(layout.work_dir, pipeline.name, "restore"):
        choice = choose_checkpoint(pipeline.spec, pipeline.store, requested, spec_path=pipeline.spec_path)
        report = restore_pipeline(pipeline.spec, choice.checkpoint_id, store=pipeline.store, layout=layout,
                                  accept_duplicates=accept_duplicates, check_running=False)
    return RestoreOutcome(choice, report)


def restore_chosen(spec_path: str | os.PathLike[str], checkpoint_id: int, *,
                   accept_duplicates: bool = False) -> RestoreReport:
    """Restore ``checkpoint_id``, chosen earlier by :func:`choose` (the restore re-checks every
    file's sha256 while it materializes them). Takes the job's lease for the restore."""
    pipeline = open_pipeline(spec_path)
    return restore_pipeline(pipeline.spec, checkpoint_id, store=pipeline.store, accept_duplicates=accept_duplicates)
