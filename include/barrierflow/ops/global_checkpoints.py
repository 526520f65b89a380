"""Operations on the global checkpoints of a multi-stage pipeline: ``checkpoints show``,
``verify``, ``retain``, ``savepoint``, ``reconcile`` and ``skew`` (``checkpoints list`` and
``restore`` are in :mod:`.checkpoints` and :mod:`.restore`).

Each works on whole global checkpoints, through the stages' own stores: a global checkpoint is
shown with every stage's part, verified as one cut (verification/global_cut.py), kept or
deleted whole (retention/global_plan.py), and becomes a savepoint in every stage. None of them
needs the channels' broker, so they work on pipelines whose channels are on the embedded broker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.checkpointing.global_manifest import GlobalManifest
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.errors import CheckpointCorruptError, UserInputError
from barrierflow.recovery.reconcile import (
    GlobalReconciliationPlan,
    ReconciledStage,
    apply_global_reconciliation,
    plan_global_reconciliation,
)
from barrierflow.reports.skew import SkewReport, skew_report
from barrierflow.retention.global_plan import GlobalRetentionPlan, RetainedStage, retain_global
from barrierflow.retention.savepoint import take_savepoint
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sources.kafka import partition_id
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.stages import StagedPipelineSpec
from barrierflow.verification.global_cut import (
    GlobalVerificationReport,
    StagePart,
    select_global_ids,
    verify_global,
)


def open_staged(spec_path: str | os.PathLike[str]) -> StagedPipelineJob:
    """The multi-stage pipeline at ``spec_path``, opened offline (nothing started).

    Raises:
        SpecError: the spec does not load. UserInputError: it is a single-stage spec.
    """
    spec = load_any_spec(spec_path)
    if not isinstance(spec, StagedPipelineSpec):
        raise UserInputError(f"{spec_path} is a single-stage spec; these operations are for multi-stage ones")
    return StagedPipelineJob.offline(spec, spec_path=str(spec_path))


def stage_parts(job: StagedPipelineJob) -> list[StagePart]:
    """Each stage of ``job`` with its input partitions and back-edges (for the global checks)."""
    parts = []
    for stage in job.stages:
        inputs, back, embedded = set(), set(), False
        for name in stage.stage.input_channels:
            channel = job.spec.channel(name)
            ids = {partition_id(channel.topic_for(job.spec.name), p) for p in range(channel.partitions)}
            inputs |= ids
            embedded = embedded or channel.is_embedded
            if job.graph.is_back_edge(name, stage.stage.name):
                back |= ids
        parts.append(StagePart(stage.stage.name, stage.spec, stage.store, frozenset(inputs), frozenset(back),
                               embedded))
    return parts


@dataclass(frozen=True)
class GlobalCheckpointView:
    """One global checkpoint with the manifest of every stage."""

    manifest: GlobalManifest
    stages: dict[str, Manifest]

    def as_dict(self) -> dict[str, Any]:
        return {**self.manifest.model_dump(mode="json"),
                "stage_manifests": {name: m.model_dump(mode="json") for name, m in self.stages.items()}}


def show_global_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int) -> GlobalCheckpointView:
    """Global checkpoint ``checkpoint_id`` and each stage's manifest.

    Raises:
        CheckpointNotFoundError: it did not complete (or does not exist); the message says
            which it was. CheckpointCorruptError: its global manifest does not parse.
    """
    job = open_staged(spec_path)
    manifest = job.global_store.get(checkpoint_id)
    return GlobalCheckpointView(manifest, {s.stage.name: s.store.get(checkpoint_id) for s in job.stages})


@dataclass(frozen=True)
class GlobalVerifyOutcome:
    pipeline: str
    storage: str
    reports: list[GlobalVerificationReport]

    @property
    def failed(self) -> list[GlobalVerificationReport]:
        return [r for r in self.reports if not r.passed]

    def summary(self) -> dict[str, Any]:
        """The JSON of ``barrierflow verify --json`` on a multi-stage spec."""
        return {"pipeline": self.pipeline, "storage": self.storage, "verified": len(self.reports),
                "failed": [r.checkpoint_id for r in self.failed], "reports": [r.as_dict() for r in self.reports]}


def verify_global_checkpoints(spec_path: str | os.PathLike[str], *, checkpoint_id: int | None = None,
                              latest: int | None = None, deep: bool = False) -> GlobalVerifyOutcome:
    """Verify one global checkpoint, the newest ``latest`` completed ones, or all of them
    (see :mod:`barrierflow.verification.global_cut`). A failed check is a result, not an error.

    Raises:
        SpecError, UserInputError (see :func:`open_staged`; also ``latest`` below 1),
        CheckpointNotFoundError (``checkpoint_id`` never existed), StorageError.
    """
    job = open_staged(spec_path)
    ids = select_global_ids(job.global_store, checkpoint_id, latest)
    reports = verify_global(job.global_store, stage_parts(job), ids, deep=deep)
    return GlobalVerifyOutcome(job.spec.name, job.objects.uri, reports)


def retain_global_checkpoints(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> GlobalRetentionPlan:
    """Keep the newest ``checkpoint.retained`` global checkpoints (as the policy chooses) and
    every global savepoint; delete the rest in every stage (retention/global_plan.py).

    Raises SpecError, UserInputError (single-stage spec), StorageError, LocalRetentionError."""
    job = open_staged(spec_path)
    stages = [RetainedStage(s.stage.name, s.spec, s.store) for s in job.stages]
    return retain_global(job.global_store, stages, retained=job.spec.checkpoint.retained, dry_run=dry_run)


def savepoint_global(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> GlobalCheckpointView:
    """Promote global checkpoint ``checkpoint_id`` (None: the latest completed) to a savepoint:
    it is verified as one cut first, then every stage's checkpoint becomes a savepoint, which
    retention never deletes (nor the global checkpoint). Running it again after an interruption
    finishes the promotion.

    Raises:
        CheckpointNotFoundError: no (such) completed global checkpoint.
        CheckpointCorruptError: it fails verification (the message names the stage and check).
    """
    job = open_staged(spec_path)
    checkpoint_id = job.completed_global(checkpoint_id)
    report = verify_global(job.global_store, stage_parts(job), [checkpoint_id])[0]
    if not report.passed:
        raise CheckpointCorruptError(f"global checkpoint {checkpoint_id} cannot become a savepoint: it fails "
                                     f"verification ({report.reason()})")
    for stage in job.stages:
        take_savepoint(stage.spec, stage.store, checkpoint_id)
    return show_global_checkpoint(spec_path, checkpoint_id)


def reconcile_global(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> GlobalReconciliationPlan:
    """Decide every in-doubt transaction of every stage's 2PC sink against the latest
    completed global checkpoint and, unless ``dry_run``, apply the decisions (see
    :func:`barrierflow.recovery.reconcile.plan_global_reconciliation`).

    Raises:
        SpecError, UserInputError (single-stage spec), JobAlreadyRunningError (a restore or
        reconciliation is under way), SinkError or StorageError (decisions applied before stay).
    """
    from pathlib import Path

    job = open_staged(spec_path)
    ids = job.global_checkpoints()
    stages = [ReconciledStage(s.stage.name, s.spec, s.store, s.layout) for s in job.stages]
    plan = plan_global_reconciliation(job.spec.name, Path(job.work_dir), ids[-1] if ids else None, stages,
                                      store=job.root_store)
    if not dry_run:
        apply_global_reconciliation(plan, Path(job.work_dir), stages, store=job.root_store)
    return plan


@dataclass(frozen=True)
class GlobalSkewReport:
    """The watermark-skew report of each stage (each over its own checkpoints of the global
    ones, stored in the stage's store)."""

    pipeline: str
    stages: dict[str, SkewReport]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.stages.values())

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "passed": self.passed,
                "stages": {name: r.as_dict() for name, r in self.stages.items()}}


def skew_global(spec_path: str | os.PathLike[str], *, last: int | None = None) -> GlobalSkewReport:
    """Each stage's skew report over the stage checkpoints of the newest ``last`` completed
    global checkpoints (None: all). Failed expectations are in the reports, not raised.

    Raises SpecError, UserInputError (single-stage spec, ``last`` below 1), StorageError."""
    if last is not None and last < 1:
        raise UserInputError("--last must be a positive whole number")
    job = open_staged(spec_path)
    ids = set(job.global_checkpoints())
    return GlobalSkewReport(job.spec.name, {s.stage.name: skew_report(s.spec, s.store, last=last, only=ids)
                                            for s in job.stages})
