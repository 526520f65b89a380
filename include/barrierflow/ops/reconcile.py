"""Finish a pipeline's in-doubt sink transactions (``barrierflow reconcile``, the scheduled
reconciliation DAG), every stage's against the latest completed cut. Plan, then apply exactly
the plan; a dry run only plans."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.recovery.reconcile import ReconciliationPlan, apply_reconciliation, plan_reconciliation
from barrierflow.transactions.two_phase import Decision


@dataclass(frozen=True)
class ReconcileOutcome:
    """The plan (applied unless ``dry_run``); ``noun`` names a cut, ``runner`` what runs (a
    ``job`` of one stage, a ``pipeline`` of several: :class:`OpenedPipeline`)."""

    plan: ReconciliationPlan
    dry_run: bool
    noun: str
    runner: str
    #: the checkpoint store whose transaction ledgers were read (named when nothing is in doubt)
    storage: str = ""

    @property
    def stages(self) -> dict[str, list[Decision]]:
        """Each stage's decisions (stages without a 2PC sink are left out)."""
        return self.plan.stages

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``barrierflow reconcile --json``: ``pipeline``, ``latest_completed``,
        ``job_running``, ``decisions`` (every stage's), ``stages`` (per stage: its decisions),
        ``noun`` and ``dry_run``; one shape for every pipeline."""
        return {**self.plan.as_dict(), "noun": self.noun, "dry_run": self.dry_run}


def reconcile(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> ReconcileOutcome:
    """Decide every unfinished transaction of every stage's sink against the latest completed
    cut (see :mod:`barrierflow.recovery.reconcile`) and, unless ``dry_run``, apply the decisions.

    Raises:
        SpecError: the spec does not load.
        JobAlreadyRunningError: a restore or another reconciliation is under way.
        SinkError, StorageError: a sink or the store failed; decisions applied before stay applied.
    """
    pipeline = open_pipeline(spec_path)
    plan = plan_reconciliation(pipeline)
    if not dry_run:
        apply_reconciliation(pipeline, plan)
    return ReconcileOutcome(plan, dry_run, words(pipeline).cut_noun, words(pipeline).runner_noun, pipeline.storage)
