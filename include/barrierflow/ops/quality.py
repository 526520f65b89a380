"""The data-quality report of a pipeline's committed output and rollups (``barrierflow quality``,
the data-quality DAG)."""

from __future__ import annotations

import os

from barrierflow.batch.rollups import previous_report
from barrierflow.ops.pipeline import open_pipeline
from barrierflow.reports.quality import QualityReport, quality_report


def quality(spec_path: str | os.PathLike[str], *, epochs: int | None = None) -> QualityReport:
    """Validate the newest ``epochs`` committed epochs (default: the spec's
    ``verification.quality_epochs``) and the days the latest rollup run wrote; the report and
    the Data Docs are stored in the checkpoint store. Failed expectations are in the report,
    not raised. Raises SpecError, UserInputError or StorageError."""
    pipeline = open_pipeline(spec_path)
    rollups = previous_report(pipeline.store) or {}
    return quality_report(pipeline.spec, pipeline.store, epochs=epochs, rollup_days=sorted(rollups.get("days") or {}))
