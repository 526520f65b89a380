"""The watermark-skew report of a pipeline (``barrierflow skew``, the scheduled skew DAG)."""

from __future__ import annotations

import os

from barrierflow.errors import UserInputError
from barrierflow.ops.pipeline import open_pipeline
from barrierflow.reports.skew import SkewReport, skew_report


def skew(spec_path: str | os.PathLike[str], *, last: int | None = None) -> SkewReport:
    """The report over the newest ``last`` completed checkpoints (None: all); stored in the
    checkpoint store. Failed expectations are in the report, not raised.

    Raises SpecError, UserInputError (``last`` below 1) or StorageError."""
    if last is not None and last < 1:
        raise UserInputError("--last must be a positive whole number")
    pipeline = open_pipeline(spec_path)
    return skew_report(pipeline.spec, pipeline.store, last=last)
