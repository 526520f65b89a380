"""The benchmarks' JVM hygiene (bench/jvm.py) on the tests' SparkSession: a finished stateful
query's state stores are unloaded by :func:`settle` (Spark itself would keep them until its
next maintenance), and :class:`JvmUsage` measures CPU the JVM really spent."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.jvm import JvmUsage, settle

pytestmark = [pytest.mark.spark]


def _state_store(spark: object) -> object:
    jvm = spark._jvm  # type: ignore[attr-defined]
    return (jvm.py4j.reflection.ReflectionUtil
            .classForName("org.apache.spark.sql.execution.streaming.state.StateStore$")
            .getField("MODULE$").get(None))


def test_settle_unloads_a_stopped_querys_state_stores_and_usage_counts_its_cpu(spark, tmp_path: Path) -> None:
    from pyspark.sql.functions import col

    before = JvmUsage.now(spark)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 1000).option("numPartitions", 2).load()
             .groupBy((col("value") % 10).alias("key")).count()
             .writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(processingTime="100 milliseconds")
             .start())
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < 2:
            query.awaitTermination(0.2)
    finally:
        query.stop()
    store = _state_store(spark)
    assert store.isMaintenanceRunning()  # loading the query's state stores started Spark's maintenance

    settle(spark)

    assert not store.isMaintenanceRunning()
    used = JvmUsage.now(spark).since(before)
    assert used.cpu_seconds > 0.0

