"""A stopped query's tasks, on the shared SparkSession: ``StreamingQuery.stop()`` returns while the
tasks of the micro-batch it cancelled still run; :func:`wait_for_tasks` returns only once they
ended.

The pace is the test's: each row's Python UDF waits (up to 120 s) for a file the test never
writes, so the micro-batch is in flight when the query is stopped, whatever the machine's speed;
the stop kills the UDF's worker (Spark's kill timeout), which ends the task."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from barrierflow.spark.query_tasks import active_tasks, wait_for_tasks

pytestmark = pytest.mark.spark


def _waiting_udf(marker: str) -> Any:
    from pyspark.sql import functions as F

    def waiting(value):  # type: ignore[no-untyped-def]  # untyped: PySpark reads hints as a pandas UDF's
        import os
        import time as clock

        deadline = clock.monotonic() + 120.0
        while not os.path.exists(marker) and clock.monotonic() < deadline:
            clock.sleep(0.05)
        return value

    return F.udf(waiting, "long")


def test_wait_for_tasks_returns_once_the_stopped_querys_tasks_ended(spark: Any, tmp_path: Path) -> None:
    waiting = _waiting_udf(str(tmp_path / "never-written"))
    rows = (spark.readStream.format("rate").option("rowsPerSecond", 10).option("numPartitions", 2).load()
            .select(waiting("value").alias("v")))
    query = rows.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk")).start()
    group = str(query.runId)
    context = spark.sparkContext
    try:
        deadline = time.monotonic() + 120  # readiness: the batch's tasks are in the UDF
        while active_tasks(context, group) == 0 and query.isActive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert active_tasks(context, group) > 0, "no task of the query was seen running"
    finally:
        query.stop()
    assert wait_for_tasks(context, group, limit=120) == 0
    assert active_tasks(context, group) == 0
    assert active_tasks(context, "a-group-spark-never-saw") == 0
