"""Choose a pipeline's cut and restore every stage to it, whatever the pipeline's shape.

The choice follows the one rule of :mod:`barrierflow.verification.choice` (the chosen cut is
verified first), whoever asks:

* ``barrierflow restore SPEC --latest | --latest-valid | --checkpoint N`` calls :func:`restore`,
  which chooses and restores under the pipeline's lease (no run, reconciliation or other
  restore can start in between);
* the recovery DAG calls :func:`choose` in one task and :func:`restore_chosen` in the next
  (its first task made sure the pipeline is stopped).

How the stages are restored is the one place where the shapes differ inside: a single-stage
pipeline restores its checkpoint with :func:`barrierflow.recovery.restore.restore_pipeline`
(sinks reconciled, newer committed epochs replayed with their output suppressed, or with
``accept_duplicates`` written again); a pipeline of several stages restores every stage to one
global checkpoint with :func:`barrierflow.recovery.cut_restore.restore_cut` (a new
attempt, attempt cutoffs so downstream stages skip what older attempts wrote), starting the embedded
broker on the pipeline's data dir for channels that live there.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.lease import JobLease
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.recovery.restore import DuplicateOutputError, RestoreReport, restore_pipeline
from barrierflow.verification.choice import CheckpointChoice, CheckpointRequest, choose_checkpoint

#: DuplicateOutputError is part of what :func:`restore_chosen` raises: the front doors catch it from here.
__all__ = ["DuplicateOutputError", "RestoreOutcome", "choose", "restore", "restore_chosen"]


@dataclass(frozen=True)
class RestoreOutcome:
    """The cut chosen (and why) and what the restore did.

    Attributes:
        stages: the stages restored (one: the pipeline's).
        report: one stage: what its restore did (files, sink decisions, replay); else None.
        cutoffs: several stages: per stage fed by channels, its attempt cutoff: the offsets
            after which it skips what older attempts wrote.
    """

    pipeline: str
    choice: CheckpointChoice
    attempt: int
    stages: tuple[str, ...]
    report: RestoreReport | None = None
    cutoffs: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> int:
        return self.choice.checkpoint_id

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``barrierflow restore --json`` (the recovery DAG's restore report): one
        stage: :meth:`RestoreReport.as_dict` with ``requested``, ``skipped``, ``verification``;
        several: ``pipeline``, ``checkpoint_id``, ``attempt``, ``cutoffs``, the same three and
        ``"global": true``. Both carry ``stages``."""
        choice = {"requested": self.choice.requested, "verification": self.choice.verification,
                  "skipped": [{"checkpoint_id": c, "reason": w} for c, w in self.choice.skipped],
                  "stages": list(self.stages)}
        if self.report is not None:
            return {**self.report.as_dict(), **choice}
        return {"pipeline": self.pipeline, "checkpoint_id": self.checkpoint_id, "attempt": self.attempt,
                "cutoffs": self.cutoffs, "global": True, **choice}


def choose(spec_path: str | os.PathLike[str], requested: CheckpointRequest) -> CheckpointChoice:
    """The cut ``requested`` resolves to, verified first (see
    :func:`barrierflow.verification.choice.choose_checkpoint` for the rule and errors). Reads
    only the checkpoint store; restores nothing (the recovery DAG's ``choose_checkpoint``)."""
    return choose_checkpoint(open_pipeline(spec_path), requested)


def _refuse_duplicates(pipeline: OpenedPipeline, accept_duplicates: bool) -> None:
    if accept_duplicates and not pipeline.single_stage:
        raise UserInputError("--accept-duplicates applies to single-stage pipelines only (the recovery DAG's "
                             "accept_duplicates too): a pipeline of several stages restores only complete global "
                             "checkpoints, whose final sinks are never ahead of them; restore without it")


def _restore_stage(pipeline: OpenedPipeline, requested: CheckpointRequest, accept_duplicates: bool
                   ) -> RestoreOutcome:
    stage = pipeline.stages[0]
    with JobLease(stage.layout.work_dir, pipeline.name, "restore", store=stage.store.objects) as lease:
        stage.store.fence = lease.token  # the restore's decisions and attempt record carry its fence
        try:
            choice = choose_checkpoint(pipeline, requested)
            report = restore_pipeline(stage.spec, choice.checkpoint_id, store=stage.store, layout=stage.layout,
                                      accept_duplicates=accept_duplicates, check_running=False)
        finally:
            stage.store.fence = None
    return RestoreOutcome(pipeline.name, choice, report.attempt, (stage.name,), report=report)


def _restore_stages(pipeline: OpenedPipeline, requested: CheckpointRequest) -> RestoreOutcome:
    from barrierflow.checkpointing.global_store import GlobalCheckpointStore
    from barrierflow.kafka_io.embedded_broker import data_dir_for, embedded_broker
    from barrierflow.recovery.cut_restore import restore_cut
    from barrierflow.spec.stages import StagedPipelineSpec

    spec, cuts = pipeline.spec, pipeline.cuts
    assert isinstance(spec, StagedPipelineSpec) and isinstance(cuts, GlobalCheckpointStore)  # several stages
    with ExitStack() as stack:
        address = None
        if any(c.is_embedded for c in spec.channels):
            address = stack.enter_context(embedded_broker(data_dir_for(pipeline.work_dir)))
        stages = pipeline.connected_stages(address)
        with JobLease(Path(pipeline.work_dir), spec.name, "restore", store=pipeline.objects) as lease:
            for stage in stages:  # the stages' restores and 2PC decisions record the restore's fence
                stage.store.fence = lease.token
            choice = choose_checkpoint(pipeline, requested)
            report = restore_cut(spec, stages, cuts, choice.checkpoint_id)
    return RestoreOutcome(spec.name, choice, report.attempt, tuple(s.name for s in pipeline.stages),
                          cutoffs=report.cutoffs)


def restore(spec_path: str | os.PathLike[str], requested: CheckpointRequest, *,
            accept_duplicates: bool = False) -> RestoreOutcome:
    """Choose the cut ``requested`` resolves to and restore every stage to it, holding the
    pipeline's lease throughout (module docstring); the next ``barrierflow run`` continues
    from there.

    Raises:
        UserInputError: ``accept_duplicates`` for a pipeline of several stages.
        JobAlreadyRunningError: the pipeline runs, or a restore or reconciliation is under way.
        CheckpointNotFoundError, ChosenCheckpointInvalidError: see :func:`choose`.
        CheckpointCorruptError, DuplicateOutputError: see
            :func:`barrierflow.recovery.restore.restore_pipeline` (and, several stages,
            :func:`barrierflow.recovery.cut_restore.restore_cut`, also ChannelRecordsLostError).
        EmbeddedBrokerError: several stages: the embedded broker did not start (also: the
            pipeline runs and holds its data dir).
    """
    pipeline = open_pipeline(spec_path)
    _refuse_duplicates(pipeline, accept_duplicates)
    if pipeline.single_stage:
        return _restore_stage(pipeline, requested, accept_duplicates)
    return _restore_stages(pipeline, requested)


def restore_chosen(spec_path: str | os.PathLike[str], checkpoint_id: int, *,
                   accept_duplicates: bool = False) -> RestoreOutcome:
    """Restore cut ``checkpoint_id``, chosen earlier by :func:`choose`. One stage: the restore
    re-checks every file's sha256 while it materializes them, under the job's lease; several:
    the cut is verified again under the pipeline's lease. Raises as :func:`restore`."""
    pipeline = open_pipeline(spec_path)
    _refuse_duplicates(pipeline, accept_duplicates)
    if not pipeline.single_stage:
        return _restore_stages(pipeline, checkpoint_id)
    stage = pipeline.stages[0]
    report = restore_pipeline(stage.spec, checkpoint_id, store=stage.store, layout=stage.layout,
                              accept_duplicates=accept_duplicates)
    choice = CheckpointChoice(checkpoint_id, checkpoint_id, [], "verified when it was chosen", pipeline.name)
    return RestoreOutcome(pipeline.name, choice, report.attempt, (stage.name,), report=report)
