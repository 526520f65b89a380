"""The batch side of a pipeline (``barrierflow rollup``, ``barrierflow recompute``; the daily
rollup and reconciliation DAGs run them through spark-submit ``jobs/batch_job.py``)."""

from __future__ import annotations

import os
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.batch.lake import parquet_sink
from barrierflow.batch.reconciliation import RECONCILIATION_REPORT_KEY, ReconciliationReport, reconcile_output
from barrierflow.batch.rollups import ROLLUP_REPORT_KEY, RollupReport, parse_day
from barrierflow.batch.rollups import rollup as rollup_days
from barrierflow.ops.pipeline import open_pipeline

__all__ = ["parse_day", "recompute", "rollup", "stored_report"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _session(spark: SparkSession | None, spec_path: str | os.PathLike[str], purpose: str) -> SparkSession:
    if spark is not None:
        return spark
    from barrierflow.spark.session import build_session

    spec = open_pipeline(spec_path).spec
    return build_session(spec.spark, app_name=f"barrierflow-{purpose}-{spec.name}")


def rollup(spec_path: str | os.PathLike[str], *, day: date | None = None, tag: str = "",
           spark: SparkSession | None = None) -> RollupReport:
    """Daily rollups of the committed output (:mod:`barrierflow.batch.rollups`); stored report.

    Raises SpecError, UserInputError (no Parquet sink, missing columns) or StorageError."""
    pipeline = open_pipeline(spec_path)
    parquet_sink(pipeline.spec)  # before Spark starts: a pipeline without a lake is refused at once
    return rollup_days(_session(spark, spec_path, "rollup"), pipeline.spec, pipeline.store, day=day, tag=tag)


def recompute(spec_path: str | os.PathLike[str], *, start: datetime | None = None, end: datetime | None = None,
              tag: str = "", spark: SparkSession | None = None) -> ReconciliationReport:
    """Stream-vs-batch reconciliation (:mod:`barrierflow.batch.reconciliation`); differences are in
    the stored report. Raises SpecError, UserInputError (bad range, nothing committed, a source
    that cannot be re-read) or StorageError."""
    pipeline = open_pipeline(spec_path)
    parquet_sink(pipeline.spec)  # before Spark starts: a pipeline without a lake is refused at once
    return reconcile_output(_session(spark, spec_path, "recompute"), pipeline.spec, pipeline.store,
                            start=start, end=end, tag=tag, spec_path=str(spec_path))


#: The stored reports of the batch side, by name.
REPORT_KEYS = {"rollups": ROLLUP_REPORT_KEY, "reconciliation": RECONCILIATION_REPORT_KEY}


def stored_report(spec_path: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """The stored JSON document ``rollups`` or ``reconciliation`` of the pipeline, or None."""
    import json

    from barrierflow.storage.object_store import ObjectNotFoundError

    try:
        return json.loads(open_pipeline(spec_path).store.objects.get_bytes(REPORT_KEYS[name]))
    except ObjectNotFoundError:
        return None
