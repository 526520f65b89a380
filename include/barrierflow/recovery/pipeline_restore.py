"""Restore every stage of an opened pipeline to one chosen cut, whatever its shape.

This is the one place where a restore differs by the pipeline's on-disk layout: a pipeline of
one stage restores its own checkpoint (:func:`barrierflow.recovery.restore.restore_pipeline`:
sinks reconciled, newer committed epochs replayed with their output suppressed, or with
``accept_duplicates`` written again) under the job's lease; a pipeline of several restores
every stage to one global checkpoint (:func:`barrierflow.recovery.cut_restore.restore_cut`: a
new attempt, attempt cutoffs so downstream stages skip what older attempts wrote) under the
pipeline's lease, starting the embedded broker on the pipeline's data dir for channels that
live there. Both give a :class:`PipelineRestore`: what was done to each stage.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts
from barrierflow.lease import JobLease
from barrierflow.pipeline.model import OpenedPipeline
from barrierflow.recovery.restore import RestoreReport, restore_pipeline
from barrierflow.verification.choice import CheckpointChoice, CheckpointRequest, choose_checkpoint


@dataclass(frozen=True)
class StageRestore:
    """What a restore did to one stage: its checkpoint restored (``report``: files, sink
    decisions, replay; None when the cut's restore rebuilt it) and its attempt ``cutoff`` (the
    offsets of the channels it reads after which it skips what older attempts wrote; None: it
    reads no channel)."""

    report: RestoreReport | None = None
    cutoff: dict[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**(self.report.as_dict() if self.report is not None else {}), "cutoff": self.cutoff}


@dataclass(frozen=True)
class PipelineRestore:
    """The cut chosen (and why), the new attempt and what was done to each stage."""

    choice: CheckpointChoice
    attempt: int
    stages: dict[str, StageRestore] = field(default_factory=dict)


def _restore_stage(pipeline: OpenedPipeline, requested: CheckpointRequest, accept_duplicates: bool, *,
                   chosen: bool) -> PipelineRestore:
    stage = pipeline.stages[0]
    if chosen:  # chosen (and verified) earlier: the restore re-checks every file's sha256, under the job's lease
        assert isinstance(requested, int)
        report = restore_pipeline(stage.spec, requested, store=stage.store, layout=stage.layout,
                                  accept_duplicates=accept_duplicates)
        choice = CheckpointChoice(requested, requested, [], "verified when it was chosen", pipeline.name)
        return PipelineRestore(choice, report.attempt, {stage.name: StageRestore(report)})
    with JobLease(stage.layout.work_dir, pipeline.name, "restore", store=stage.store.objects) as lease:
        stage.store.fence = lease.token  # the restore's decisions and attempt record carry its fence
        try:
            choice = choose_checkpoint(pipeline, requested)
            report = restore_pipeline(stage.spec, choice.checkpoint_id, store=stage.store, layout=stage.layout,
                                      accept_duplicates=accept_duplicates, check_running=False)
        finally:
            stage.store.fence = None
    return PipelineRestore(choice, report.attempt, {stage.name: StageRestore(report)})


def _restore_stages(pipeline: OpenedPipeline, cuts: GlobalCheckpointStore, requested: CheckpointRequest
                    ) -> PipelineRestore:
    from barrierflow.kafka_io.embedded_broker import data_dir_for, embedded_broker
    from barrierflow.recovery.cut_restore import restore_cut
    spec = pipeline.spec
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
    return PipelineRestore(choice, report.attempt,
                           {s.name: StageRestore(cutoff=report.cutoffs.get(s.name)) for s in pipeline.stages})


def restore_to_cut(pipeline: OpenedPipeline, requested: CheckpointRequest, *, accept_duplicates: bool = False,
                   chosen: bool = False) -> PipelineRestore:
    """Choose the cut ``requested`` resolves to (``chosen``: ``requested`` is the id a choice
    made earlier) and restore every stage to it (module docstring). ``accept_duplicates`` must
    have been refused already where it does not apply
    (:meth:`OpenedPipeline.refuse_accept_duplicates`).

    Raises: as :func:`barrierflow.ops.restore.restore`.
    """
    cuts = pipeline.cuts
    if isinstance(cuts, SingleStageCuts):
        return _restore_stage(pipeline, requested, accept_duplicates, chosen=chosen)
    return _restore_stages(pipeline, cuts, requested)
