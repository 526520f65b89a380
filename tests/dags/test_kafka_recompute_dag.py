"""The stream-vs-batch comparison DAG of a Kafka-fed lake, run as Airflow runs it (``dag.test()``):
its job spark-submits ``jobs/batch_job.py recompute`` with Spark's Kafka connector on ``--jars``,
reads the topic again over exactly the offset ranges the trusted checkpoint covers (Spark's Kafka
batch source, decoded as barrierflow's Python reader decodes: its dead letters dropped), runs the
spec's transformation as a batch query and compares every closed window with what the stream
committed. The lake: :mod:`tests.batch.kafka_lake`."""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.batch.kafka_lake import MALFORMED_EVERY, NAME, PARTITIONS, RECORDS, T0, make_kafka_lake, record
from tests.batch.lake import Lake
from tests.dags.conftest import run_dag

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.usefixtures("airflow_db"),
              pytest.mark.timeout(900), pytest.mark.slow(90)]

RECOMPUTE = f"barrierflow_recompute__{NAME}"
WINDOW = timedelta(milliseconds=200)


@pytest.fixture
def submit_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """spark-submit of this venv on PATH, no Spark connection (the spec's master is used)."""
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield


def expected_windows(end: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(window start, key) -> (count, value sum) of every window ending before ``end``, computed
    here from the produced records (the malformed ones are dead letters), independently of Spark."""
    closes = datetime.fromisoformat(end.replace("Z", "+00:00"))
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            if i % MALFORMED_EVERY == 0:
                continue
            r = record(p, i)
            at = datetime.fromisoformat(r["event_time"])
            start = T0 + ((at - T0) // WINDOW) * WINDOW
            if start + WINDOW < closes:
                acc = sums[(start.isoformat(), int(r["key"]))]
                acc[0] += 1
                acc[1] += int(r["value"])
    return {k: (v[0], v[1]) for k, v in sums.items()}


def test_recompute_dag_of_a_kafka_fed_lake_passes_and_names_an_altered_window(
        monkeypatch: pytest.MonkeyPatch, spark: Any, kafka_endpoint: Any, tmp_path: Path, submit_env: None) -> None:
    lake: Lake = make_kafka_lake(spark, kafka_endpoint, tmp_path)

    run = run_dag(monkeypatch, lake.pipelines, RECOMPUTE)

    assert run.state == "success", run.log[-6000:]
    assert run.task_states == {"recompute": "success", "compare": "success"}
    assert "--jars" in run.log and "spark-sql-kafka" in run.log  # the connector, for the batch read
    summary = run.xcom("compare")
    assert summary["passed"] is True and summary["verdict"] == "passed" and summary["differences"] == []
    [ranges] = summary["source_ranges"].values()
    assert ranges["from"] == "the stream's first offsets", ranges
    assert len(ranges["ranges"]) == PARTITIONS and all(first == 0 for first, _ in ranges["ranges"].values()), ranges
    expected = expected_windows(summary["end"])
    assert len(expected) > 20  # several closed windows of every key
    assert summary["stream_rows"] == summary["batch_rows"] == len(expected)
    committed = {(r["window_start"].replace(tzinfo=T0.tzinfo).isoformat(), int(r["key"])):
                 (int(r["count"]), int(r["value_sum"])) for r in lake.rows()}
    assert {k: v for k, v in committed.items() if k in expected} == expected  # exactly once, and right

    with lake.altered():
        part = next(p for p in lake.parts()
                    if any((r["window_start"].replace(tzinfo=T0.tzinfo).isoformat(), int(r["key"])) in expected
                           for r in pq.read_table(p).to_pylist()))
        rows = pq.read_table(part).to_pylist()
        index = next(i for i, r in enumerate(rows)
                     if (r["window_start"].replace(tzinfo=T0.tzinfo).isoformat(), int(r["key"])) in expected)
        changed = rows[index]
        rows[index] = {**changed, "value_sum": changed["value_sum"] + 7}
        lake.rewrite(part, rows)

        failed = run_dag(monkeypatch, lake.pipelines, RECOMPUTE)

    assert failed.state == "failed" and failed.task_states == {"recompute": "success", "compare": "failed"}
    assert "1 output rows differ from the batch recomputation" in failed.log, failed.log[-4000:]
    start = changed["window_start"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    named = re.search(
        rf"changed: window \[window_start={re.escape(start)}Z, window_end=[^\]]+\] key \[key={changed['key']}\]: "
        rf"stream \[\{{'count': {changed['count']}, 'value_sum': {changed['value_sum'] + 7}\}}\], "
        rf"batch \{{'count': {changed['count']}, 'value_sum': {changed['value_sum']}\}}", failed.log)
    assert named, failed.log[-4000:]

    # Kafka deletes the topic's records (as retention does): no range can be read again, and the
    # comparison says so in one line naming the partition and both offsets, never that it passed
    from barrierflow.ops.batch import recompute
    from barrierflow.spec import load_spec
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    topic = load_spec(lake.spec_path).source.topics[0]
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(bootstrap_servers=kafka_endpoint.bootstrap_servers)
    admin = KafkaAdminClient(bootstrap_servers=kafka_endpoint.bootstrap_servers)
    try:
        admin.delete_records(consumer.end_offsets(partitions))
    finally:
        admin.close()
        consumer.close()
    expired = recompute(lake.spec_path, spark=spark)
    assert expired.verdict == "not compared" and not expired.passed, expired.message()
    assert re.fullmatch(rf"pipeline '{NAME}': stream-vs-batch comparison not compared: Kafka source 'events': no "
                        rf"offset range up to checkpoint \d+ can be read again: .*the records of {topic}:\d from "
                        r"offset \d+ are no longer retained \(Kafka's oldest retained offset there is \d+\).*",
                        expired.message()), expired.message()
