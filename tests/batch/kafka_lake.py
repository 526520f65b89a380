"""A real committed lake fed by Kafka, produced once: records produced to a two-partition topic of
the suite's broker, the pipeline (Kafka, ``format: json`` -> per-key 200 ms event-time window
counts and value sums, append -> Parquet, 2PC) run to the end of the topic on the shared
SparkSession.

Every :data:`MALFORMED_EVERY`-th record's ``value`` is a JSON string, not a number: barrierflow's
Python reader sends it to the dead-letter output, so the batch read must drop it too (else every
window holding one would differ). Records of both partitions are 5 ms of event time apart, so
the topic spans 2 s and closes some ten windows per key.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from tests.batch.lake import Lake
from tests.scenarios.harness import FAST_JVM, finish
from tests.support.kafka_broker import KafkaEndpoint, create_topic

NAME = "kafkalake"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PARTITIONS, RECORDS, KEYS, STEP_MS, MALFORMED_EVERY = 2, 400, 4, 5, 41


def record(partition: int, i: int) -> dict[str, Any]:
    """Record ``i`` of ``partition`` (malformed for barrierflow's reader every :data:`MALFORMED_EVERY`)."""
    value: Any = partition * 1000 + i if i % MALFORMED_EVERY else "not a number"
    return {"key": i % KEYS, "value": value, "event_time": (T0 + timedelta(milliseconds=i * STEP_MS)).isoformat()}


def produce(endpoint: KafkaEndpoint, topic: str, first: int, last: int) -> None:
    """Records ``[first, last)`` of every partition, acknowledged."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=endpoint.bootstrap_servers, acks="all")
    try:
        futures = [producer.send(topic, value=json.dumps(record(p, i)).encode(), partition=p)
                   for p in range(PARTITIONS) for i in range(first, last)]
        producer.flush(timeout=60)
        for future in futures:
            future.get(timeout=60)
    finally:
        producer.close(timeout=10)


def kafka_spec(folder: Path, file: str, endpoint: KafkaEndpoint, topic: str, *, name: str = NAME,
               function: str = "barrierflow.transforms.aggregations:keyed_window_counts",
               suite: Path | None = None, reader: str = "python") -> Path:
    """Write ``folder/file``: the pipeline over ``topic`` (module docstring), its stores under
    ``folder``; ``suite``: the state expectation suite (none: ``verification`` names none)."""
    data: dict[str, Any] = {
        "version": 1, "name": name, "work_dir": str(folder / "work"),
        "sources": [{"name": "events", "type": "kafka", "reader": reader,
                     "bootstrap_servers": endpoint.bootstrap_servers, "topics": [topic],
                     "max_records_per_batch": 100, "format": "json",
                     "json_fields": {"key": "long", "value": "long", "event_time": "timestamp"}}],
        "transformation": {"function": function, "output_mode": "append",
                           "options": {"window": "200 milliseconds"}},
        "event_time": {"column": "event_time", "watermark_delay": "100ms"},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{folder / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{folder / 'checkpoints'}", "interval": "300ms", "timeout": "600s"},
        "spark": {"master": "local[1]", "shuffle_partitions": 2, "conf": FAST_JVM},
        "batch": {"output_event_interval": "0s"},
    }
    if suite is not None:
        data["verification"] = {"expectations": str(suite)}
    path = folder / file
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def make_kafka_lake(spark: Any, endpoint: KafkaEndpoint, tmp: Path) -> Lake:
    """The lake of the whole topic (module docstring); its spec alone in ``tmp/pipelines``."""
    topic = f"kl-{uuid.uuid4().hex[:10]}"
    create_topic(endpoint, topic, PARTITIONS)
    produce(endpoint, topic, 0, RECORDS)
    pipelines = tmp / "pipelines"
    pipelines.mkdir()
    spec_path = kafka_spec(tmp, "pipelines/" + f"{NAME}.yaml", endpoint, topic)
    finish(spark, spec_path)
    lake = Lake(tmp, pipelines, spec_path, tmp / "out", tmp / "checkpoints")
    assert lake.parts(), "the run committed no output"
    return lake
