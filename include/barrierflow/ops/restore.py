"""Choose a checkpoint and restore the pipeline's job from it.

The choice follows the one rule of :mod:`barrierflow.verification.choice` (the chosen
checkpoint is verified structurally first), whoever asks:

* ``barrierflow restore SPEC --latest | --latest-valid | --checkpoint N`` calls :func:`restore`,
  which chooses and restores under the job's lease (no job, reconciliation or other restore
  can start in between);
* the recovery DAG calls :func:`choose` in one task and :func:`restore_chosen` in the next
  (its first task made sure the job is stopped).

A multi-stage pipeline restores whole global checkpoints: :func:`restore_global` (the CLI),
:func:`choose_global` then :func:`restore_global` with the chosen id (the recovery DAG).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.ops.pipeline import open_pipeline
from barrierflow.recovery.restore import RestoreReport, restore_pipeline
from barrierflow.verification.choice import CheckpointChoice, CheckpointRequest, choose_checkpoint
from barrierflow.workdir.layout import JobLayout
from barrierflow.workdir.lease import JobLease

if TYPE_CHECKING:
    from barrierflow.runtime.pipeline import StagedPipelineJob

#: What a chosen global checkpoint passed before it is restored.
GLOBAL_VERIFICATION = "passed global verification (every stage's checks and the cut over its channels)"


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
    with JobLease(layout.work_dir, pipeline.name, "restore", store=pipeline.store.objects) as lease:
        pipeline.store.fence = lease.token  # the restore's decisions and attempt record carry its fence
        choice = choose_checkpoint(pipeline.spec, pipeline.store, requested, spec_path=pipeline.spec_path)
        report = restore_pipeline(pipeline.spec, choice.checkpoint_id, store=pipeline.store, layout=layout,
                                  accept_duplicates=accept_duplicates, check_running=False)
        pipeline.store.fence = None
    return RestoreOutcome(choice, report)


def restore_chosen(spec_path: str | os.PathLike[str], checkpoint_id: int, *,
                   accept_duplicates: bool = False) -> RestoreReport:
    """Restore ``checkpoint_id``, chosen earlier by :func:`choose` (the restore re-checks every
    file's sha256 while it materializes them). Takes the job's lease for the restore."""
    pipeline = open_pipeline(spec_path)
    return restore_pipeline(pipeline.spec, checkpoint_id, store=pipeline.store, accept_duplicates=accept_duplicates)


@dataclass(frozen=True)
class GlobalRestoreOutcome:
    """A multi-stage pipeline restored to one global checkpoint: which, why, and the new attempt."""

    pipeline: str
    requested: CheckpointRequest
    checkpoint_id: int
    attempt: int
    skipped: list[tuple[int, str]]
    fences: dict[str, dict[str, int]]

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "requested": self.requested, "checkpoint_id": self.checkpoint_id,
                "attempt": self.attempt, "skipped": [{"checkpoint_id": c, "reason": w} for c, w in self.skipped],
                "fences": self.fences, "verification": GLOBAL_VERIFICATION}


@dataclass(frozen=True)
class GlobalCheckpointChoice:
    """The global checkpoint a request resolves to, verified as one cut, and the newer ones
    skipped (``latest-valid`` only), each with why."""

    pipeline: str
    requested: CheckpointRequest
    checkpoint_id: int
    skipped: list[tuple[int, str]]

    @property
    def verification(self) -> str:
        return GLOBAL_VERIFICATION

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "requested": self.requested, "checkpoint_id": self.checkpoint_id,
                "skipped": [{"checkpoint_id": c, "reason": w} for c, w in self.skipped],
                "verification": self.verification}


def _choose_global(job: StagedPipelineJob, requested: CheckpointRequest) -> GlobalCheckpointChoice:
    """The rule of :func:`choose_global`, on an opened pipeline."""
    from barrierflow.errors import CheckpointNotFoundError
    from barrierflow.ops.global_checkpoints import stage_parts
    from barrierflow.verification.choice import LATEST_VALID, ChosenCheckpointInvalidError
    from barrierflow.verification.global_cut import verify_global

    spec = job.spec
    ids = job.global_checkpoints()
    if not ids:
        raise CheckpointNotFoundError(f"pipeline {spec.name!r} has no completed global checkpoint in "
                                      f"{spec.checkpoint.storage} to restore")
    if requested == LATEST_VALID:
        candidates = list(reversed(ids))
    else:
        wanted = ids[-1] if requested == "latest" else int(requested)
        if wanted not in ids:
            raise CheckpointNotFoundError(
                f"global checkpoint {wanted} of pipeline {spec.name!r} is not complete (or was abandoned by an "
                f"earlier restore); completed: {ids}")
        candidates = [wanted]
    parts = stage_parts(job)
    skipped: list[tuple[int, str]] = []
    for cid in candidates:
        report = verify_global(job.global_store, parts, [cid])[0]
        if report.passed:
            return GlobalCheckpointChoice(spec.name, requested, cid, skipped)
        reason = report.reason()  # each failed check is named "<stage>: <check>"
        if requested != LATEST_VALID:
            raise ChosenCheckpointInvalidError(
                cid, [(c.name, c.message) for c in report.failures],
                f"global checkpoint {cid} of pipeline {spec.name!r} (requested as checkpoint={requested!r}) fails "
                f"verification: {reason}. Use checkpoint={LATEST_VALID!r} to restore the newest one that passes, "
                "or choose another id.")
        skipped.append((cid, reason))
    raise CheckpointNotFoundError(
        f"no global checkpoint of pipeline {spec.name!r} passes verification: "
        + "; ".join(f"{cid}: {why}" for cid, why in skipped))


def choose_global(spec_path: str | os.PathLike[str], requested: CheckpointRequest) -> GlobalCheckpointChoice:
    """The global checkpoint ``requested`` resolves to, by the rule every restore of a
    multi-stage pipeline follows: ``latest`` is the newest completed one (of the current
    timeline), an id that one, ``latest-valid`` the newest that passes global verification
    (:mod:`barrierflow.verification.global_cut`: every stage's structural checks and the cut
    over the channels; newer ones skipped, each with why). The chosen one is verified as one
    cut first. Reads only the checkpoint store (and the channels' retention, as verification
    does); restores nothing (the recovery DAG's ``choose_checkpoint``).

    Raises:
        SpecError, UserInputError: the spec does not load, or is single-stage.
        CheckpointNotFoundError: no completed global checkpoint / the id is not one / none passes.
        ChosenCheckpointInvalidError: the requested global checkpoint fails verification (the
            message names each failed check as ``<stage>: <check>``).
    """
    from barrierflow.ops.global_checkpoints import open_staged

    return _choose_global(open_staged(spec_path), requested)


def restore_global(spec_path: str | os.PathLike[str], requested: CheckpointRequest) -> GlobalRestoreOutcome:
    """Restore every stage of the multi-stage pipeline at ``spec_path`` to one global checkpoint,
    under the pipeline's lease (a run holds it too).

    ``requested`` resolves by the rule of :func:`choose_global` (the chosen global checkpoint
    is verified as one cut before anything is restored). Then
    :meth:`StagedPipelineJob.restore`: each stage restores its manifest, the attempt increases,
    fences make downstream stages skip what older attempts wrote after the restored barriers;
    the next ``barrierflow run`` continues from there. Channels on the embedded broker: it is
    started on the pipeline's data dir (``<work_dir>/embedded-broker``, where the runs keep the
    channels' records) for the restore.

    Raises:
        UserInputError: the spec is single-stage.
        EmbeddedBrokerError: the embedded broker did not start (also: the pipeline runs and
            holds its data dir).
        CheckpointNotFoundError: no completed global checkpoint / the id is not one / none passes.
        ChosenCheckpointInvalidError: the requested global checkpoint fails verification.
        JobAlreadyRunningError: the pipeline runs, or another restore is under way.
    """
    from contextlib import ExitStack

    from barrierflow.errors import UserInputError
    from barrierflow.runtime.pipeline import StagedPipelineJob, pipeline_work_dir
    from barrierflow.sources.embedded_broker import data_dir_for, embedded_broker
    from barrierflow.spec.loader import load_any_spec
    from barrierflow.spec.stages import StagedPipelineSpec

    spec = load_any_spec(spec_path)
    if not isinstance(spec, StagedPipelineSpec):
        raise UserInputError(f"{spec_path} is a single-stage spec; restore it with ops.restore.restore")
    with ExitStack() as stack:
        servers: dict[str, str] = {}
        if any(c.is_embedded for c in spec.channels):
            address = stack.enter_context(embedded_broker(data_dir_for(pipeline_work_dir(spec))))
            servers = {c.name: address for c in spec.channels if c.is_embedded}
        job = StagedPipelineJob(spec, spec_path=str(spec_path), channel_servers=servers)
        return _restore_global_under_lease(job, requested)


def _restore_global_under_lease(job: StagedPipelineJob, requested: CheckpointRequest) -> GlobalRestoreOutcome:
    from pathlib import Path

    spec = job.spec
    with JobLease(Path(job.work_dir), spec.name, "restore", store=job.objects) as lease:
        job.hold(lease)  # the stages' restores and 2PC decisions record the restore's fence
        choice = _choose_global(job, requested)
        report = job.restore(choice.checkpoint_id)
    return GlobalRestoreOutcome(spec.name, requested, choice.checkpoint_id, report.attempt, choice.skipped,
                                report.fences)
