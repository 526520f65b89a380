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

from dataclasses import dataclass, field
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


def plan_reconciliation(spec: PipelineSpec, *, store: CheckpointStore | None = None,
                        layout: JobLayout | None = None) -> ReconciliationPlan:
    store = store or CheckpointStore.for_spec(spec)
    layout = layout or JobLayout.for_spec(spec)
    holder = lease_holder(layout.work_dir)
    if holder is not None and holder.get("purpose") in ("restore", "reconcile"):
        raise JobAlreadyRunningError(
            f"pipeline {spec.name} is being {'restored' if holder['purpose'] == 'restore' else 'reconciled'} "
            f"({describe(holder)}); reconcile after it finished (a restore reconciles the sinks itself)")
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
    with JobLease(layout.work_dir, spec.name, "reconcile"):  # raises if a job or restore started since the plan
        sink.apply(plan.decisions)
