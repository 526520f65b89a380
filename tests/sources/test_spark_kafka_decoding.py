"""``reader: spark`` decodes JSON in the JVM (no broker: the connector's rows stand in as a static
DataFrame of its columns): each record is parsed once whatever the job takes from it, and the
fields come out as barrierflow's reader gives them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from barrierflow.sources.spark_kafka import decoded_rows
from barrierflow.spec.models import KafkaSourceSpec
from pyspark.sql import functions as F

SPEC = KafkaSourceSpec.model_validate({
    "name": "events", "type": "kafka", "reader": "spark", "bootstrap_servers": "b:9092", "topics": ["t"],
    "format": "json", "json_fields": {"key": "long", "value": "long", "event_time": "timestamp"}})


def _raw(spark: Any, values: list[bytes]) -> Any:
    return spark.createDataFrame([("t", 0, i, datetime(2026, 1, 1, tzinfo=UTC), v) for i, v in enumerate(values)],
                                 "topic string, partition int, offset long, timestamp timestamp, value binary")


def test_each_record_is_parsed_once_when_the_job_takes_several_fields(spark: Any) -> None:
    totals = decoded_rows(_raw(spark, [b'{"key": 1, "value": 2}']), SPEC).groupBy("key").agg(F.sum("value"))
    plan = totals._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_json(") == 1, plan  # Spark's decoding, where barrierflow's leaves it the record
    assert plan.count("barrierflow_flat_json(") == 1, plan


def test_the_fields_are_decoded_as_barrierflows_reader_gives_them(spark: Any) -> None:
    rows = decoded_rows(_raw(spark, [b'{"key": 1, "value": 2, "event_time": "2026-01-01T00:00:01"}',
                                 b'{"key": 3, "value": "x", "event_time": 1767225602000}', b"[1, 2]"]), SPEC) \
        .orderBy("offset") \
        .select("topic", "partition", "key", "value", F.date_format("event_time", "yyyy-MM-dd HH:mm:ss").alias("at")) \
        .collect()
    # the session's time zone is UTC (barrierflow's sessions set it), so the text is UTC
    assert [(r.key, r.value, r.at) for r in rows] == [
        (1, 2, "2026-01-01 00:00:01"), (3, None, "2026-01-01 00:00:02"), (None, None, None)]
    assert rows[0].topic == "t" and rows[0].partition == 0


def test_each_record_is_parsed_once_when_the_job_filters_on_a_field(spark: Any) -> None:
    # Spark's optimizer pushes a filter below the projection it reads; a decoding it may copy
    # there would run twice for every record that passes (the filter's and the projection's)
    rows = decoded_rows(_raw(spark, [b'{"key": 1, "value": 2}', b'{"key": 2, "value": 3}']), SPEC)
    kept = rows.where(F.col("key") == 2).select("value", "event_time")
    plan = kept._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("barrierflow_flat_json(") == 1, plan
    assert plan.count("from_json(") == 1, plan
    assert kept.count() == 1 and kept.where(F.col("value") == 3).count() == 1  # the rows, compared in Spark
