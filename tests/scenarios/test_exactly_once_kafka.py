"""Exactly-once into Kafka (write-ahead epochs, one Kafka transaction per epoch) across
SIGKILLed drivers, at every stage point where the sink holds an epoch (pre-committed, told to
commit, half committed; the two before any sink call are the Parquet sink's tests) and at the
two points inside the sink's Kafka transaction (records sent, no marker; marker sent, no
commit), which leave aborted transactions behind.

The output is read through the sink's commit markers (:func:`committed_records`), and also by
a second client, a plain ``read_committed`` consumer: both must see exactly the failure-free
run's rows, on the tests' Apache Kafka broker and on an external Kafka
(``BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from barrierflow.faults import SINK_POINTS
from barrierflow.kafka_io.committed_output import committed_records
from kafka import KafkaConsumer, TopicPartition

from tests.scenarios.harness import SINK_HELD_POINTS, crash_at_every_point, finish, window_rows, windowed_spec
from tests.support.kafka_broker import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.slow(200)]
#: Records per source partition: 10 batches of 520, more than the 5 crashes (each at the first
#: hit of its point, from the previous crash's restored state) use up.
RECORDS = 5200
PER_BATCH = 520
#: Keys: every closed 1 s window has a row per key, so the output is about 10,000 rows
#: (52 s of event time x 200 keys).
KEYS = 200
#: Event time between records: 10 ms, so a 1 s window closes in every batch and every epoch has
#: output to commit; with 1 ms a crash in the sink's commit came only after 4 batches of a new
#: driver (see tests/scenarios/test_random_crashes.py).
EVENT_TIME_STEP_MS = 10


def _read_all(bootstrap: str, topic: str, limit: float = 60.0) -> list[dict[str, Any]]:
    """Every record a ``read_committed`` consumer sees in partition 0 of ``topic``, read up to
    the partition's end as such a consumer sees it (the last stable offset): no idle guess."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + limit
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"read {consumer.position(tp)} of {end} offsets in {limit} s"
            for records in consumer.poll(timeout_ms=200).values():
                out += [json.loads(r.value) for r in records]
        return out
    finally:
        consumer.close()


def _reference(reference_rows: Any) -> list[tuple[Any, ...]]:
    return sorted((ws.replace(" ", "T"), we.replace(" ", "T"), *rest)
                  for ws, we, *rest in reference_rows(RECORDS, EVENT_TIME_STEP_MS, keys=KEYS, per_batch=PER_BATCH))


def test_crash_at_every_point_restore_finish(spark, tmp_path: Path, reference_rows, kafka_endpoint,
                                            figures: dict[str, object]) -> None:
    topic, markers = f"eo-{uuid.uuid4().hex[:8]}", f"eo-markers-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 1)
    create_topic(kafka_endpoint, markers, 1)
    spec_path = windowed_spec(tmp_path, {"name": "k", "type": "kafka", "topic": topic, "key_column": "key",
                                         "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                                         "commit_marker_topic": markers}, records=RECORDS, per_batch=PER_BATCH,
                              event_time_step_ms=EVENT_TIME_STEP_MS, keys=KEYS)
    reference = _reference(reference_rows)
    assert len(reference) >= 10_000

    def produced() -> list[tuple[Any, ...]]:
        records = committed_records(kafka_endpoint.bootstrap_servers, topic, markers, timeout=10.0)
        return window_rows([json.loads(r.value) for r in records])

    ways = crash_at_every_point(spec_path, produced, reference, SINK_HELD_POINTS + SINK_POINTS["kafka"])
    assert "restore" in ways
    spec = finish(spark, spec_path)
    assert produced() == reference
    plain = window_rows(_read_all(kafka_endpoint.bootstrap_servers, topic))
    figures.update({"crashes": len(ways), "rows committed (through the markers)": len(reference),
                    "rows a read_committed reader sees": len(plain)})
    assert plain == reference
    figures.update({"rows lost": 0, "rows duplicated": 0})
    assert spec.name
