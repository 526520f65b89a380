"""Daily rollups of the committed lake output.

Per UTC day of ``batch.time_column`` (``window_start``) and ``batch.keys``: the sum of each of
``batch.measures`` and ``windows`` (how many output rows were rolled up). Written as Parquet
partitioned by ``day`` under :func:`~barrierflow.batch.lake.rollups_uri`, with Spark's
dynamic partition overwrite: a run replaces exactly the days it rolls up, every other day's
partition stays as it was. So a rerun of a day is idempotent (same rows), and a day whose
output vanished is emptied (its partition deleted).

Which days a run rolls up: the given ``day``; else every day with output committed since the
previous run (output files after ``(through_attempt, through_batch)`` of the stored report: a
restore starts a new attempt and reuses batch ids, so files are ordered by attempt first), i.e.
all days on the first run.

An Iceberg or Delta table is read as of its newest cut (:mod:`barrierflow.pipeline.table_output`),
never its latest state; the days with new output are those of the data files the cut's table
version holds and the previous run's version (``table_version`` of the report) did not (all days
when that version is gone). Each day is always recomputed from *all* its committed rows, never
incrementally added to, so reruns and late epochs cannot double-count.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.batch.lake import committed_parts, spark_path
from barrierflow.errors import UserInputError
from barrierflow.pipeline.table_output import (
    cut_checkpoints,
    cut_output,
    describe,
    files_added,
    lake_rollups_uri,
    lake_sink,
)
from barrierflow.spec.models import ParquetSinkSpec
from barrierflow.storage import open_store
from barrierflow.storage.object_store import ObjectNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec.models import StageSpec

log = logging.getLogger(__name__)

ROLLUP_REPORT_KEY = "reports/rollups-latest.json"


@dataclass
class RollupReport:
    """The JSON document stored as ``reports/rollups-latest.json``: the days written (rows per
    day), the newest output batch read (``through_batch``) and where the rollups are."""

    pipeline: str
    rollups: str
    days: dict[str, int]
    through_batch: int | None
    through_attempt: int | None
    files_read: int
    requested_day: str | None = None
    tag: str = ""
    #: An Iceberg or Delta table: the cut read (its checkpoint id) and the table's version in it.
    through_checkpoint: int | None = None
    table_version: int | None = None
    generated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def message(self) -> str:
        if not self.days:
            return (f"pipeline {self.pipeline!r}: no new committed output since batch {self.through_batch} "
                    f"(attempt {self.through_attempt}); nothing rolled up")
        written = ", ".join(f"{d}: {n} rows" for d, n in sorted(self.days.items()))
        return f"pipeline {self.pipeline!r}: daily rollups written to {self.rollups} ({written})"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message()}


def parse_day(value: str) -> date:
    """``YYYY-MM-DD`` -> date; UserInputError naming the value otherwise."""
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UserInputError(f"day {value!r} is not a date: give it as YYYY-MM-DD, e.g. 2026-01-01") from None


def previous_report(store: CheckpointStore) -> dict[str, Any] | None:
    try:
        return json.loads(store.objects.get_bytes(ROLLUP_REPORT_KEY))
    except ObjectNotFoundError:
        return None


def rollup(spark: SparkSession, spec: StageSpec, store: CheckpointStore, *, day: date | None = None,
           tag: str = "") -> RollupReport:
    """Roll up ``day`` (None: the days with new output, see the module docstring); stores the
    report in the checkpoint store and returns it. Raises UserInputError for a pipeline
    without a Parquet, Iceberg or Delta sink."""
    from pyspark.sql import functions as F

    sink, settings, target = lake_sink(spec), spec.batch, lake_rollups_uri(spec)
    if isinstance(sink, ParquetSinkSpec):
        parts = committed_parts(sink.path)
        newest = max(((p.attempt, p.batch_id) for p in parts), default=None)
        report = RollupReport(spec.name, target, {}, newest[1] if newest else None, newest[0] if newest else None, 0,
                              day.isoformat() if day else None, tag)
        files = [spark_path(sink.path, p.key) for p in parts]
        where = sink.path
    else:
        cut = cut_output(spec, store) if cut_checkpoints(store, sink) else None
        report = RollupReport(spec.name, target, {}, None, None, 0, day.isoformat() if day else None, tag,
                              through_checkpoint=cut.checkpoint_id if cut else None,
                              table_version=cut.table_version if cut else None)
        files = [spark_path(f) for f in cut.files] if cut else []
        where = f"{describe(sink)} as of its newest cut"
    if not files:
        if day is not None:
            _delete_day(target, day)
        log.info("pipeline %r: no committed output in %s yet", spec.name, where)
        return _store(store, report)
    rows = spark.read.parquet(*files)
    missing = [c for c in [settings.time_column, *settings.keys, *settings.measures] if c not in rows.columns]
    if missing:
        raise UserInputError(f"pipeline {spec.name!r}: columns {missing} (batch.time_column, batch.keys, "
                             f"batch.measures of the spec) are not in the output {where}; its columns: "
                             f"{rows.columns}")
    with_day = rows.withColumn("day", F.to_date(F.col(settings.time_column)))
    if day is not None:
        days = [day]
    else:
        new = _new_files(spec, store, report, files)
        report.files_read = len(new)
        if not new:
            return _store(store, report)
        new_rows = spark.read.parquet(*new)
        days = sorted(r[0] for r in new_rows.select(F.to_date(F.col(settings.time_column))).distinct().collect()
                      if r[0] is not None)
    report.files_read = len(files)
    daily = (with_day.filter(F.col("day").isin(days)).groupBy("day", *settings.keys)
             .agg(*[F.sum(m).alias(m) for m in settings.measures], F.count(F.lit(1)).alias("windows"))
             .cache())  # counted, then written: computed once
    try:
        per_day = daily.groupBy("day").agg(F.count(F.lit(1)).alias("n")).collect()
        counts = {r["day"].isoformat(): int(r["n"]) for r in per_day}
        (daily.repartition("day").write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
         .partitionBy("day").parquet(spark_path(target)))
    finally:
        daily.unpersist()  # a later rollup in this session must read the output again, not this cache
    for empty in [d for d in days if d.isoformat() not in counts]:
        _delete_day(target, empty)
    report.days = {d.isoformat(): counts.get(d.isoformat(), 0) for d in days}
    return _store(store, report)


def _new_files(spec: StageSpec, store: CheckpointStore, report: RollupReport, files: list[str]) -> list[str]:
    """The output files committed since the previous run (all of them on the first run)."""
    previous = previous_report(store) or {}
    if report.through_checkpoint is not None:  # a table, read as of a cut
        if previous.get("through_checkpoint") is None:
            return files
        added = files_added(spec, report.table_version, previous.get("table_version"))
        return files if added is None else [spark_path(f) for f in added]
    sink = lake_sink(spec)
    assert isinstance(sink, ParquetSinkSpec)
    seen = (int(previous.get("through_attempt") or 0), int(previous["through_batch"])) \
        if previous.get("through_batch") is not None else None
    return [spark_path(sink.path, p.key) for p in committed_parts(sink.path)
            if seen is None or (p.attempt, p.batch_id) > seen]


def _delete_day(target: str, day: date) -> None:
    objects = open_store(target)
    keys = [o.key for o in objects.list(f"day={day.isoformat()}/")]
    if keys:
        objects.delete_many(keys)
        log.info("day %s has no committed output any more: deleted its %d rollup files", day, len(keys))


def _store(store: CheckpointStore, report: RollupReport) -> RollupReport:
    store.objects.put_bytes(ROLLUP_REPORT_KEY, json.dumps(report.as_dict(), indent=2).encode())
    log.info("%s", report.message())
    return report
