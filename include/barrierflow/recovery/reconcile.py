"""Reconciliation of a pipeline's sink transactions with its completed checkpoints.

:func:`plan_reconciliation` compares the ledger and the external system (prepared
PostgreSQL transactions, staged batches) with the latest completed checkpoint T and decides,
per unfinished transaction: COMMIT if T covers its epoch; ABORT otherwise when the job is
not running (its staged batches stay, so the epoch's data is re-committed with a later
checkpoint); NONE (left alone, reported) while the job runs, because it may be in flight. While a restore
holds the job's lease, reconciliation refuses: the restore decides the same transactions
against an older checkpoint. :func:`apply_reconciliation` applies exactly a plan's decisions,
so a dry run's output is what the real run does; for a stopped job it holds the lease while
it applies them, so neither a job nor a restore starts in the middle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.spec.models import PipelineSpec
from barrierflow.transactions.two_phase import Decision, TwoPhaseCommitSink
from barrierflow.workdir.layout import JobLayout
from barrierflow.workdir.lease import JobAlreadyRunningError, JobLease, describe, lease_holder


@dataclass
class ReconciliationPlan:
    pipeline: str
    latest_completed: int | None
    job_running: bool
    decisions: list[Decision] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "latest_completed": self.latest_completed,
                "job_running": self.job_running, "decisions": [d.as_dict() for d in self.decisions]}


def _sink(spec: PipelineSpec, store: CheckpointStore, layout: JobLayout) -> TwoPhaseCommitSink | None:
    from barrierflow.sinks.factory import build_sink

    sink = build_sink(spec, store, layout, attempt=store.attempt())
    return sink if isinstance(sink, TwoPhaseCommitSink) else None


def _holder_unless_busy(pipeline: str, work_dir: Path, store: CheckpointStore | None = None
                        ) -> dict[str, object] | None:
    """The live lease of ``work_dir`` / the checkpoint store (None: nothing runs); raises
    JobAlreadyRunningError while a restore or another reconciliation holds it."""
    holder = lease_holder(work_dir, store.objects if store is not None else None)
    if holder is not None and holder.get("purpose") in ("restore", "reconcile"):
        raise JobAlreadyRunningError(
            f"pipeline {pipeline} is being {'restored' if holder['purpose'] == 'restore' else 'reconciled'} "
            f"({describe(holder)}); reconcile after it finished (a restore reconciles the sinks itself)")
    return holder


def plan_reconciliation(spec: PipelineSpec, *, store: CheckpointStore | None = None,
                        layout: JobLayout | None = None) -> ReconciliationPlan:
    store = store or CheckpointStore.for_spec(spec)
    layout = layout or JobLayout.for_spec(spec)
    holder = _holder_unless_busy(spec.name, layout.work_dir, store)
    latest = store.latest()
    running = holder is not None
    plan = ReconciliationPlan(spec.name, latest.checkpoint_id if latest else None, running)
    sink = _sink(spec, store, layout)
    if sink is not None:
        plan.decisions = sink.plan(plan.latest_completed, restoring=not running)
    return plan


def apply_reconciliation(spec: PipelineSpec, plan: ReconciliationPlan, *, store: CheckpointStore | None = None,
                         layout: JobLayout | None = None) -> None:
    store = store or CheckpointStore.for_spec(spec)
    layout = layout or JobLayout.for_spec(spec)
    sink = _sink(spec, store, layout)
    if sink is None:
        return
    if plan.job_running:
        sink.apply(plan.decisions)  # only COMMITs of covered epochs: the job does the same, idempotently
        return
    # raises if a job or restore started since the plan
    with JobLease(layout.work_dir, spec.name, "reconcile", store=store.objects) as lease:
        sink.fence = lease.token
        sink.apply(plan.decisions)


@dataclass(frozen=True)
class ReconciledStage:
    """A stage of a multi-stage pipeline as reconciliation sees it."""

    name: str
    spec: PipelineSpec
    store: CheckpointStore
    layout: JobLayout


@dataclass
class GlobalReconciliationPlan:
    """The decisions for a multi-stage pipeline, per stage, against its latest completed
    global checkpoint (a final stage's sink commits an epoch only once the global checkpoint
    of that epoch is complete, so a stage's own newer checkpoints never count)."""

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


def plan_global_reconciliation(pipeline: str, work_dir: Path, latest_global: int | None,
                               stages: Sequence[ReconciledStage], store: CheckpointStore | None = None
                               ) -> GlobalReconciliationPlan:
    """Decide every unfinished transaction of every stage's 2PC sink against global checkpoint
    ``latest_global`` (None: none completed), as :func:`plan_reconciliation` does for one
    stage. The pipeline's lease is on ``store`` (the pipeline's root checkpoint store), or in
    ``work_dir`` without one (a multi-stage run and restore hold it).

    Raises:
        JobAlreadyRunningError: a restore or reconciliation of the pipeline is under way.
    """
    holder = _holder_unless_busy(pipeline, work_dir, store)
    running = holder is not None
    plan = GlobalReconciliationPlan(pipeline, latest_global, running)
    for stage in stages:
        sink = _sink(stage.spec, stage.store, stage.layout)
        if sink is not None:
            plan.stages[stage.name] = sink.plan(latest_global, restoring=not running)
    return plan


def apply_global_reconciliation(plan: GlobalReconciliationPlan, work_dir: Path,
                                stages: Sequence[ReconciledStage], store: CheckpointStore | None = None) -> None:
    """Apply exactly ``plan``'s decisions, each to its own stage's sink; for a stopped pipeline
    under its lease (raises JobAlreadyRunningError if a run or restore started since the plan)."""
    by_name = {s.name: s for s in stages}

    def apply_all() -> None:
        for name, decisions in plan.stages.items():
            stage = by_name[name]
            sink = _sink(stage.spec, stage.store, stage.layout)
            if sink is not None:
                sink.apply(decisions)

    if plan.job_running:
        apply_all()  # only COMMITs of covered epochs: the pipeline does the same, idempotently
        return
    with JobLease(work_dir, plan.pipeline, "reconcile", store=store.objects if store is not None else None):
        apply_all()
