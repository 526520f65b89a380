"""A bounded topic is read to its last record.

Records are produced the way an application produces them: kafka-python's ``KafkaProducer``
with its default linger and batch size, so most produce requests carry many records. The
broker's end offsets must then sum to exactly the number of records acknowledged, and a
single-stage barrierflow pipeline over the topic, run with ``until_exhausted``, must read
every one of them and stop by itself, its last completed checkpoint at the end offsets.

A broker whose end offsets fall short of the records written after batched produce requests
(an earlier embedded broker reported 299,567 of 300,000) fails both: a pipeline would never
read the tail.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.scenarios.harness import FAST_JVM
from tests.support.kafka_broker import KafkaEndpoint, create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.slow(60)]

RECORDS = 40_000
PARTITIONS = 4


def _produce_batched(endpoint: KafkaEndpoint, topic: str, count: int) -> dict[int, int]:
    """Produce ``count`` records round-robin over the partitions with the producer's default
    batching; return, per partition, one past the highest acknowledged offset."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=endpoint.bootstrap_servers, acks="all")
    try:
        futures = [producer.send(topic, value=f"r{i}".encode(), partition=i % PARTITIONS) for i in range(count)]
        producer.flush(timeout=60)
        acked = [f.get(timeout=60) for f in futures]
    finally:
        producer.close(timeout=10)
    ends: dict[int, int] = {}
    for meta in acked:
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    return ends


def _broker_end_offsets(endpoint: KafkaEndpoint, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap_servers, group_id=None, enable_auto_commit=False)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    return {tp.partition: offset for tp, offset in ends.items()}


def test_a_topic_produced_in_batches_is_read_to_its_last_record(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, figures: dict[str, object]) -> None:
    topic = f"bounded-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, PARTITIONS)
    began = time.monotonic()
    acknowledged = _produce_batched(kafka_endpoint, topic, RECORDS)
    produce_seconds = time.monotonic() - began
    assert sum(acknowledged.values()) == RECORDS  # one offset per record, nothing in between

    broker_ends = _broker_end_offsets(kafka_endpoint, topic)
    figures.update({"records produced": RECORDS, "produce (s)": round(produce_seconds, 1),
                    "broker end offsets": dict(sorted(broker_ends.items())),
                    "broker end offsets sum": sum(broker_ends.values())})
    assert broker_ends == acknowledged, "the broker's end offsets disagree with the acknowledged offsets"

    out = tmp_path / "out"
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump({
        "version": 1, "name": f"kb{uuid.uuid4().hex[:8]}", "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "kafka", "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                     "topics": [topic], "max_records_per_batch": 5000, "poll_timeout": 5.0}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"partition": "partition", "offset": "offset",
                                                   "value": "cast(value as string)"}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{out}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "500ms", "timeout": "300s",
                       "tolerable_failed_checkpoints": 5},  # a loaded 2-core machine: slow, not wrong
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM},
    }), encoding="utf-8")
    end = {f"{topic}:{p}": offset for p, offset in acknowledged.items()}

    job = StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path))
    began = time.monotonic()
    result = job.run(duration=420, until_exhausted=True)  # to the end offsets seen at the start
    read_seconds = time.monotonic() - began
    assert result.elapsed_seconds < 420, "the run did not reach the end offsets; it stopped at its time limit"
    assert result.completed[-1].barrier_offsets.get("events") == end

    table = read_committed(f"file://{out}")
    rows = table.to_pylist() if table is not None else []
    figures.update({"records read": len(rows), "run (s)": round(read_seconds, 1)})
    keys = {(r["partition"], r["offset"]) for r in rows}
    assert len(rows) == len(keys) == RECORDS
    assert sorted(r["value"] for r in rows) == sorted(f"r{i}" for i in range(RECORDS))
