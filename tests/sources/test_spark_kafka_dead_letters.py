"""``reader: spark`` with ``malformed: dead_letter`` dead-letters malformed records as
barrierflow's reader does (without it, ``validate`` warns that they become rows of nulls): a record whose
value is not a JSON object, or whose field is missing, null or of the wrong type, goes to the
dead-letter output (with the reason barrierflow's reader gives) in the same micro-batch, and is
not among the stage's rows.

First on a static DataFrame of the connector's columns (no broker), then a bounded run on the
suite's Apache Kafka broker, whose committed rows must be exactly the well-formed records
produced and whose dead letters exactly the malformed ones.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.dead_letter import read_dead_letters
from barrierflow.sources.spark_kafka import _dead_lettered, decoded_rows
from barrierflow.spec.models import KafkaSourceSpec

from tests.scenarios.harness import FAST_JVM, finish
from tests.support.kafka_broker import KafkaEndpoint, create_topic

pytestmark = [pytest.mark.spark]

FIELDS = {"key": "long", "value": "long", "event_time": "timestamp"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Malformed values and (a part of) the reason barrierflow's reader gives each.
MALFORMED: list[tuple[bytes, str]] = [
    (b"not json", "value is not valid JSON"),
    (b"[1, 2]", "value is a JSON list, expected an object"),
    (b'{"key": 1, "value": "x", "event_time": "2026-01-01T00:00:00"}', "field 'value' should be long"),
    (b'{"value": 2, "event_time": "2026-01-01T00:00:00"}', "field 'key' is missing"),
    (b'{"key": 1, "value": null, "event_time": "2026-01-01T00:00:00"}', "field 'value'"),
    (b"\xff\xfe{", "value is not valid JSON"),
]


def _good(i: int) -> bytes:
    return json.dumps({"key": i % 3, "value": i, "event_time": (T0 + timedelta(milliseconds=i)).isoformat()}).encode()


def test_malformed_rows_leave_the_rows_for_the_dead_letters(spark: Any, tmp_path: Path) -> None:
    spec = KafkaSourceSpec.model_validate({"name": "events", "type": "kafka", "reader": "spark",
                                           "bootstrap_servers": "b:9092", "topics": ["t"], "format": "json",
                                           "json_fields": FIELDS})
    values = [_good(0), *(v for v, _ in MALFORMED), _good(7)]
    raw = spark.createDataFrame([("t", 0, i, T0, v) for i, v in enumerate(values)],
                                "topic string, partition int, offset long, timestamp timestamp, value binary")
    uri = f"file://{tmp_path / 'dead'}"
    rows = _dead_lettered(decoded_rows(raw, spec, keep_payload=True), spec, uri).orderBy("offset").collect()
    assert [(r.offset, r.key, r.value) for r in rows] == [(0, 0, 0), (7, 1, 7)]
    assert rows[0].__fields__ == ["topic", "partition", "offset", "timestamp", "key", "value", "event_time"]
    letters = read_dead_letters(uri)
    assert [(d["source"], d["partition"], d["offset"]) for d in letters] == [("events", "t:0", i) for i in range(1, 7)]
    for letter, (_value, reason) in zip(letters, MALFORMED, strict=True):
        assert reason in letter["reason"], letter
    assert letters[0]["payload"] == "not json" and "payload_encoding" not in letters[0]
    assert letters[-1]["payload_encoding"] == "base64"


@pytest.mark.kafka
@pytest.mark.slow(40)
def test_a_run_read_by_the_connector_dead_letters_what_barrierflows_reader_would(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    from kafka import KafkaProducer

    topic = f"skdl-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, 2)
    # partition p: good records with a malformed one after every 50th
    produced: dict[int, list[bytes]] = {0: [], 1: []}
    for p in (0, 1):
        for i in range(300):
            produced[p].append(_good(p * 1000 + i))
            if i % 50 == 49:
                produced[p].append(MALFORMED[(i // 50 + p) % len(MALFORMED)][0])
    producer = KafkaProducer(bootstrap_servers=kafka_endpoint.bootstrap_servers, acks="all")
    try:
        for p, values in produced.items():
            for value in values:
                producer.send(topic, value=value, partition=p)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    data = {
        "version": 1, "name": f"skdl{uuid.uuid4().hex[:8]}", "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "kafka", "reader": "spark",
                     "bootstrap_servers": kafka_endpoint.bootstrap_servers, "topics": [topic],
                     "max_records_per_batch": 120, "format": "json", "json_fields": FIELDS,
                     "malformed": "dead_letter"}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"partition": "partition", "offset": "offset", "key": "key",
                                                   "value": "value"}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM},
    }
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")

    finish(spark, spec_path)

    good = Counter((p, offset, json.loads(v)["key"], json.loads(v)["value"]) for p, values in produced.items()
                   for offset, v in enumerate(values) if not v.startswith((b"not", b"[", b"\xff")) and
                   all(json.loads(v).get(f) is not None for f in FIELDS) and isinstance(json.loads(v)["value"], int))
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    assert Counter((r["partition"], r["offset"], r["key"], r["value"]) for r in table.to_pylist()) == good
    assert len(good) == 600
    bad = {(f"{topic}:{p}", offset) for p, values in produced.items() for offset, v in enumerate(values)
           if (p, offset) not in {(g[0], g[1]) for g in good}}
    letters = read_dead_letters(f"file://{tmp_path / 'work' / 'dead-letter'}")
    assert {(d["partition"], d["offset"]) for d in letters} == bad and len(bad) == 12
    reasons = {v: r for v, r in MALFORMED}
    for letter in letters:
        p, offset = int(letter["partition"].rsplit(":", 1)[1]), letter["offset"]
        assert reasons[produced[p][offset]] in letter["reason"], letter


def test_validate_warns_about_null_rows_until_malformed_is_chosen(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.cli.main import main

    data: dict[str, Any] = {
        "version": 1, "name": "connector", "work_dir": "work",
        "sources": [{"name": "events", "type": "kafka", "reader": "spark", "bootstrap_servers": "b:9092",
                     "topics": ["t"], "format": "json", "json_fields": FIELDS}],
        "transformation": {"function": "barrierflow.transforms.projection:project"},
        "sinks": [{"name": "out", "type": "parquet", "path": "file://out"}],
        "checkpoint": {"storage": "file://chk"}, "spark": {"state_store": "rocksdb"}}
    spec = tmp_path / "pipeline.yaml"
    for malformed, warned in [(None, True), ("nulls", False), ("dead_letter", False)]:
        if malformed is not None:
            data["sources"][0]["malformed"] = malformed
        spec.write_text(yaml.safe_dump(data), encoding="utf-8")
        assert main(["validate", str(spec)]) == 0
        err = capsys.readouterr().err
        assert ("warning: pipeline 'connector': Kafka source 'events' (reader: spark) turns malformed records" in err
                and "into rows of nulls, silently" in err and "Set 'malformed: dead_letter'" in err) == warned, err
    data["sources"][0].update(reader="python", malformed="nulls")
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["validate", str(spec)]) == 2
    assert "malformed: nulls needs reader 'spark'" in capsys.readouterr().err
