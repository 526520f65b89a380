"""Reconciliation of a pipeline's sink transactions with its completed checkpoints.

:func:`plan_reconciliation` compares, for every stage of the pipeline (one for a single-stage
spec), the ledger and the external system (prepared PostgreSQL transactions, write-ahead batches)
with the pipeline's latest completed cut T (its checkpoint; several stages: its global
checkpoint) and decides,
per unfinished transaction: COMMIT if T covers its epoch; ABORT otherwise when the job is
not running (its write-ahead batches stay, so the epoch's data is re-committed with a later
checkpoint); NONE (left alone, reported) while the job runs, because it may be in flight. While a restore
holds the job's lease, reconciliation refuses: the restore decides the same transactions
against an older checkpoint. :func:`apply_reconciliation` applies exactly a plan's decisions,
so a dry run's output is what the real run does; for a stopped job it holds the lease while
it applies them, so neither a job nor a restore starts in the middle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.lease import JobAlreadyRunningError, JobLease, describe, lease_holder
from barrierflow.pipeline.model import OpenedPipeline, Stage
from barrierflow.transactions.two_phase import Decision, TwoPhaseCommitSink


@dataclass
class ReconciliationPlan:
    """The decisions for a pipeline's sinks, per stage, against its latest completed cut (a
    final stage's sink of several commits an epoch only once the global checkpoint of that
    epoch is complete, so a stage's own newer checkpoints never count; a pipeline of one stage
    has one stage, its cuts are its checkpoints)."""

    pipeline: str
    latest_completed: int | None
    job_running: bool
    stages: dict[str, list[Decision]] = field(default_factory=dict)

    @property
    def decisions(self) -> list[Decision]:
        return [d for decisions in self.stages.values() for d in decisions]

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "latest_completed": self.latest_completed,
                "job_running": self.job_running,
                "stages": {name: [d.as_dict() for d in ds] for name, ds in self.stages.items()},
                "decisions": [d.as_dict() for d in self.decisions]}


def _sinks(stage: Stage) -> list[TwoPhaseCommitSink]:
    """The stage's two-phase-commit sinks (each sink of a stage with several)."""
    from barrierflow.sinks.factory import build_sinks

    return [sink for sink in build_sinks(stage.spec, stage.store, stage.layout, attempt=stage.store.attempt())
            if isinstance(sink, TwoPhaseCommitSink)]


def _holder_unless_busy(pipeline: OpenedPipeline) -> dict[str, object] | None:
    """The live lease of the pipeline (None: nothing runs); raises JobAlreadyRunningError while
    a restore or another reconciliation holds it."""
    holder = lease_holder(Path(pipeline.work_dir), pipeline.objects)
    if holder is not None and holder.get("purpose") in ("restore", "reconcile"):
        raise JobAlreadyRunningError(
            f"pipeline {pipeline.name} is being {'restored' if holder['purpose'] == 'restore' else 'reconciled'} "
            f"({describe(holder)}); reconcile after it finished (a restore reconciles the sinks itself)")
    return holder


def plan_reconciliation(pipeline: OpenedPipeline) -> ReconciliationPlan:
    """Decide every unfinished transaction of every stage's 2PC sink against the newest
    completed cut (module docstring). The pipeline's lease is on its checkpoint store, or in
    its work dir (a run and a restore hold it).

    Raises:
        JobAlreadyRunningError: a restore or reconciliation of the pipeline is under way.
    """
    running = _holder_unless_busy(pipeline) is not None
    newest = pipeline.newest_cut()
    plan = ReconciliationPlan(pipeline.name, newest.checkpoint_id if newest else None, running)
    for stage in pipeline.stages:
        sinks = _sinks(stage)
        if sinks:
            plan.stages[stage.name] = [d for sink in sinks
                                       for d in sink.plan(plan.latest_completed, restoring=not running)]
    return plan


def apply_reconciliation(pipeline: OpenedPipeline, plan: ReconciliationPlan) -> None:
    """Apply exactly ``plan``'s decisions, each to its own stage's sink; for a stopped pipeline
    under its lease, whose fencing token every decision carries (raises JobAlreadyRunningError
    if a run or restore started since the plan)."""
    sinks = [(s.name, sink) for s in pipeline.stages if s.name in plan.stages for sink in _sinks(s)]
    if plan.job_running:
        for name, sink in sinks:
            sink.apply(plan.stages[name])  # only COMMITs of covered epochs: the job does the same, idempotently
        return
    with JobLease(Path(pipeline.work_dir), pipeline.name, "reconcile", store=pipeline.objects) as lease:
        for name, sink in sinks:
            sink.fence = lease.token
            sink.apply(plan.stages[name])  # each sink applies the decisions naming it
