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
from barrierflow.pipeline.words import words
from barrierflow.reports.skew import SkewExpectationError, SkewReport, skew_report


@dataclass(frozen=True)
class SkewOutcome:
    """The watermark-skew report of each stage; ``page_suffixes``: what each stage's HTML page
    adds to the name it is given (:meth:`barrierflow.pipeline.words.Words.stage_file_suffix`)."""

    pipeline: str
    stages: dict[str, SkewReport]
    page_suffixes: dict[str, str]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.stages.values())

    @property
    def failures(self) -> list[str]:
        """Every failed check, ``stage <name>: <message>`` (the message names the checkpoint and value)."""
        return [f"stage {name}: {c.message}" for name, stage in self.stages.items() for c in stage.failures]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``barrierflow skew --json``, one shape for every pipeline: ``pipeline``,
        ``passed`` and each stage's report under ``stages``."""
        return {"pipeline": self.pipeline, "passed": self.passed,
                "stages": {name: r.as_dict() for name, r in self.stages.items()}}

    def raise_for_failures(self, spec_path: str) -> None:
        """Raise :class:`SkewExpectationError` naming every failed check (stage, checkpoint and
        value); ``summary`` holds :meth:`as_dict`."""
        failures = self.failures
        if failures:
            raise SkewExpectationError(self.as_dict(), failures, (
                f"pipeline {self.pipeline!r}: the watermark-skew report failed its expectations:\n  "
                + "\n  ".join(failures)
                + f"\nSee 'barrierflow skew {spec_path} --html PATH' (one page per stage); the limits are "
                "reports.max_skew / reports.max_lag / reports.max_late_rows of the spec. A lasting skew usually "
                "means a slow or stalled source partition; late rows are lost from event-time windows: set "
                "event_time.alignment with max_drift below event_time.watermark_delay."))


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
                                       for s in pipeline.stages},
                       {s.name: words(pipeline).stage_file_suffix(s.name) for s in pipeline.stages})
