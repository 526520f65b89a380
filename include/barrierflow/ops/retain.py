"""Apply a pipeline's retention policy (``barrierflow retain``, the scheduled retention DAG)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from barrierflow.ops.pipeline import open_pipeline
from barrierflow.retention.plan import RetentionPlan
from barrierflow.retention.plan import retain as retain_checkpoints


@dataclass(frozen=True)
class RetentionOutcome:
    """The plan carried out (or, in a dry run, only made) and the ``checkpoint.retained`` it kept to."""

    plan: RetentionPlan
    retained: int


def retain(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> RetentionOutcome:
    """Keep the newest ``checkpoint.retained`` completed checkpoints and every savepoint;
    delete the rest (see :mod:`barrierflow.retention.plan`); ``dry_run`` only plans.

    Raises SpecError (bad spec) or StorageError (store unreadable or unwritable)."""
    pipeline = open_pipeline(spec_path)
    plan = retain_checkpoints(pipeline.spec, pipeline.store, dry_run=dry_run)
    return RetentionOutcome(plan, pipeline.spec.checkpoint.retained)
