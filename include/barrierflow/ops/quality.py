"""The data-quality report of a pipeline's committed output and rollups (``barrierflow quality``,
the data-quality DAG): of a single-stage pipeline's Parquet sink, or of one final stage of a
pipeline of several (``stage``, as for :mod:`barrierflow.ops.batch`), whose output, 2PC ledger,
rollup report and the quality report with its Data Docs are in the stage's own store."""

from __future__ import annotations

import os

from barrierflow.batch.rollups import previous_report
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.pipeline.final_stages import batch_side
from barrierflow.reports.quality import QualityReport, quality_report
from barrierflow.spec.loader import load_any_spec


def quality(spec_path: str | os.PathLike[str], *, epochs: int | None = None, stage: str | None = None
            ) -> QualityReport:
    """Validate the newest ``epochs`` committed epochs (default: the spec's
    ``verification.quality_epochs``) and the days the latest rollup run wrote; the report and
    the Data Docs are stored in the checkpoint store (a final stage's own). Failed expectations
    are in the report, not raised. The suites of a final stage default to
    ``include/expectations/<pipeline>-<stage>-output.json`` / ``-rollups.json`` (its derived
    name). Raises SpecError, UserInputError (also: no such final stage) or StorageError."""
    side = batch_side(load_any_spec(spec_path), stage, str(spec_path))  # the lake of ops.batch.batch_target
    store = CheckpointStore.for_spec(side.spec)
    rollups = previous_report(store) or {}
    return quality_report(side.spec, store, epochs=epochs, rollup_days=sorted(rollups.get("days") or {}))
