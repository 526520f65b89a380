"""Apply a pipeline's retention policy (``barrierflow retain``, the scheduled retention DAG), by cuts.

A pipeline of one stage runs its stage's retention (its checkpoints are its cuts); a pipeline
of several keeps or deletes whole global checkpoints in every stage (retention/global_plan.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.retention.global_plan import CutRetentionPlan, retain_cuts
from barrierflow.retention.plan import RetentionPlan


@dataclass(frozen=True)
class RetentionOutcome:
    """The plan carried out (or, in a dry run, only made) and the ``checkpoint.retained`` it kept to."""

    plan: CutRetentionPlan
    retained: int
    noun: str

    @property
    def stages(self) -> dict[str, RetentionPlan]:
        """Each stage's plan (one stage: the whole run)."""
        return self.plan.stages

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``barrierflow retain --json`` (:meth:`CutRetentionPlan.as_dict` with
        ``retained`` and ``noun``)."""
        return {**self.plan.as_dict(), "retained": self.retained, "noun": self.noun}


def retain(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> RetentionOutcome:
    """Keep the newest ``checkpoint.retained`` completed cuts (as the policy chooses) and every
    savepoint; delete the rest in every stage (see :mod:`barrierflow.retention.global_plan`);
    ``dry_run`` only plans.

    Raises SpecError (bad spec), StorageError (store unreadable or unwritable) or
    LocalRetentionError (planned local files could not be deleted)."""
    pipeline = open_pipeline(spec_path)
    retained = pipeline.spec.checkpoint.retained
    return RetentionOutcome(retain_cuts(pipeline.cuts, pipeline.stages, retained=retained, dry_run=dry_run), retained,
                            words(pipeline).cut_noun)
