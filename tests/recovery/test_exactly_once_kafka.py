"""Exactly-once into Kafka (write-ahead epochs, one Kafka transaction per epoch) across
SIGKILLed drivers. Valid on the test broker: none of these crash points leaves an aborted
Kafka transaction behind, so its defect (aborted records visible to read_committed) does
not apply; the zombie and aborted-marker cases run in tests/sinks against a real Kafka."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from barrierflow.testing.kafka_broker import create_topic
from kafka import KafkaConsumer, TopicPartition

from tests.recovery.harness import crash_at_every_point, finish, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.slow(200)]
RECORDS = 6000


def _read_all(bootstrap: str, topic: str, idle: float = 1.0, limit: float = 30.0) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[dict[str, Any]] = []
        start = last = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() - start < limit:
            for records in consumer.poll(timeout_ms=100).values():
                out += [json.loads(r.value) for r in records]
                last = time.monotonic()
        return out
    finally:
        consumer.close()


def _reference(reference_rows: Any, records: int) -> list[tuple[Any, ...]]:
    return sorted((ws.replace(" ", "T"), we.replace(" ", "T"), *rest) for ws, we, *rest in reference_rows(records))


def test_crash_at_every_point_restore_finish(spark, tmp_path: Path, reference_rows, kafka_endpoint) -> None:
    topic, markers = f"eo-{uuid.uuid4().hex[:8]}", f"eo-markers-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 1)
    create_topic(kafka_endpoint, markers, 1)
    spec_path = windowed_spec(tmp_path, {"name": "k", "type": "kafka", "topic": topic, "key_column": "key",
                                         "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                                         "commit_marker_topic": markers}, records=RECORDS, per_batch=300)
    reference = _reference(reference_rows, RECORDS)

    def produced() -> list[tuple[Any, ...]]:
        return window_rows(_read_all(kafka_endpoint.bootstrap_servers, topic, idle=0.5))

    ways = crash_at_every_point(spec_path, produced, reference)
    assert "restore" in ways
    finish(spark, spec_path)
    assert produced() == reference
