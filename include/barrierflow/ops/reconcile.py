"""Finish a pipeline's in-doubt sink transactions (``barrierflow reconcile``, the scheduled
reconciliation DAG). Plan, then apply exactly the plan; a dry run only plans."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.ops.pipeline import open_pipeline
from barrierflow.recovery.reconcile import ReconciliationPlan, apply_reconciliation, plan_reconciliation


@dataclass(frozen=True)
class ReconcileOutcome:
    plan: ReconciliationPlan
    dry_run: bool

    def as_dict(self) -> dict[str, Any]:
        return {**self.plan.as_dict(), "dry_run": self.dry_run}


def reconcile(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> ReconcileOutcome:
    """Decide every unfinished transaction against the latest completed checkpoint (see
    :mod:`barrierflow.recovery.reconcile`) and, unless ``dry_run``, apply the decisions.

    Raises:
        SpecError: the spec does not load.
        JobAlreadyRunningError: a restore is under way.
        SinkError, StorageError: a sink or the store failed; decisions applied before stay applied.
    """
    pipeline = open_pipeline(spec_path)
    plan = plan_reconciliation(pipeline.spec)
    if not dry_run:
        apply_reconciliation(pipeline.spec, plan)
    return ReconcileOutcome(plan, dry_run)
