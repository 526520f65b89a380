"""The watermark-skew report of a pipeline (``barrierflow skew``, the scheduled skew DAG), per stage.

Each stage's report is over its checkpoints of the pipeline's completed cuts (one stage: its
checkpoints), stored in the stage's checkpoint store (``reports/skew-latest.json``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.pipeline.model import open_pipeline
from barrierflow.reports.skew import SkewExpectationError, SkewReport, raise_for_failures, skew_report


@dataclass(frozen=True)
class SkewOutcome:
    """The watermark-skew report of each stage. ``single_stage``: one stage, whose report is
    the pipeline's."""

    pipeline: str
    stages: dict[str, SkewReport]
    single_stage: bool = False

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.stages.values())

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``barrierflow skew --json``: one stage: its report's; several:
        ``pipeline``, ``passed`` and each stage's report under ``stages``."""
        if self.single_stage:
            [report] = self.stages.values()
            return report.as_dict()
        return {"pipeline": self.pipeline, "passed": self.passed,
                "stages": {name: r.as_dict() for name, r in self.stages.items()}}

    def raise_for_failures(self, spec_path: str) -> None:
        """Raise :class:`SkewExpectationError` naming every failed check (checkpoint and value;
        several stages: and the stage); ``summary`` holds :meth:`as_dict`."""
        if self.single_stage:
            [report] = self.stages.values()
            raise_for_failures(report, spec_path)
            return
        failures = [f"stage {name}: {c.message}" for name, stage in self.stages.items() for c in stage.failures]
        if failures:
            raise SkewExpectationError(self.as_dict(), failures, (
                f"pipeline {self.pipeline!r}: the watermark-skew report failed its expectations:\n  "
                + "\n  ".join(failures)
                + f"\nSee 'barrierflow skew {spec_path} --html PATH' (one page per stage); the limits are "
                "reports.max_skew / reports.max_lag / reports.max_late_rows of the spec."))


def skew(spec_path: str | os.PathLike[str], *, last: int | None = None) -> SkewOutcome:
    """Each stage's report over its checkpoints of the newest ``last`` completed cuts (None:
    all); stored in the stage's checkpoint store. Failed expectations are in the reports, not
    raised.

    Raises SpecError, UserInputError (``last`` below 1) or StorageError."""
    if last is not None and last < 1:
        raise UserInputError("--last must be a positive whole number")
    pipeline = open_pipeline(spec_path)
    cuts = set(pipeline.cuts.completed_ids())
    return SkewOutcome(pipeline.name, {s.name: skew_report(s.spec, s.store, last=last, only=cuts)
                                       for s in pipeline.stages}, pipeline.single_stage)
