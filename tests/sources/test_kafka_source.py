"""The barrier-aware Kafka source against the tests' Apache Kafka broker (or an external Kafka)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.barriers.control import ControlChannel
from barrierflow.errors import SourceError, SourceUnavailableError
from barrierflow.local_ports import free_port
from barrierflow.sources.dead_letter import count_dead_letters, read_dead_letters
from barrierflow.sources.kafka import RAW_SCHEMA, KafkaDataSource, KafkaStreamReader, schema_for
from barrierflow.spec.models import KafkaSourceSpec

from tests.support.kafka_broker import KafkaEndpoint, create_topic, produce

pytestmark = pytest.mark.kafka

ReaderFactory = Callable[..., KafkaStreamReader]


def _topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _spec(bootstrap: str, topics: list[str], **overrides: Any) -> KafkaSourceSpec:
    body: dict[str, Any] = {"type": "kafka", "bootstrap_servers": bootstrap, "topics": topics,
                            "poll_timeout": 5.0}
    body.update(overrides)
    return KafkaSourceSpec.model_validate(body)


@pytest.fixture
def reader_factory(tmp_path: Path) -> Iterator[ReaderFactory]:
    """Builds readers (control dir in tmp_path) and stops them after the test."""
    readers: list[KafkaStreamReader] = []

    def make(spec: KafkaSourceSpec, dead_letter_uri: str = "") -> KafkaStreamReader:
        control = tmp_path / "control"
        ControlChannel(control).reset()
        reader = KafkaStreamReader(
            {"spec": spec.model_dump_json(), "control_dir": str(control), "dead_letter_uri": dead_letter_uri}
        )
        readers.append(reader)
        return reader

    yield make
    for reader in readers:
        reader.stop()


def _read_all(reader: KafkaStreamReader, start: dict, end: dict) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            assert isinstance(batch, pa.RecordBatch)
            rows += batch.to_pylist()
    return rows


def _offsets(topic: str, **by_partition: int) -> dict[str, int]:
    return {f"{topic}:{p.removeprefix('p')}": o for p, o in by_partition.items()}


# --------------------------------------------------------------------------- initialOffset


def test_initial_offset_earliest_latest_explicit(kafka_endpoint: KafkaEndpoint,
                                                 reader_factory: ReaderFactory) -> None:
    topic = _topic()
    create_topic(kafka_endpoint, topic, 2)
    produce(kafka_endpoint, topic, [(0, None, b"a", None)] * 3 + [(1, None, b"b", None)] * 2)
    servers = kafka_endpoint.bootstrap_servers

    earliest = reader_factory(_spec(servers, [topic])).initialOffset()
    assert earliest == {"partitions": _offsets(topic, p0=0, p1=0), "barrier": 0}

    latest = reader_factory(_spec(servers, [topic], starting_offsets="latest")).initialOffset()
    assert latest == {"partitions": _offsets(topic, p0=3, p1=2), "barrier": 0}

    explicit = reader_factory(_spec(servers, [topic], starting_offsets={topic: {"0": 1}})).initialOffset()
    assert explicit["partitions"] == _offsets(topic, p0=1, p1=0)  # unnamed partitions: earliest

    special = reader_factory(_spec(servers, [topic], starting_offsets={topic: {"0": -1, "1": -2}}))
    assert special.initialOffset()["partitions"] == _offsets(topic, p0=3, p1=0)


def test_unknown_topic_is_a_source_error(kafka_endpoint: KafkaEndpoint, reader_factory: ReaderFactory) -> None:
    missing = _topic("missing")
    with pytest.raises(SourceError, match=missing):
        reader_factory(_spec(kafka_endpoint.bootstrap_servers, [missing])).initialOffset()


# --------------------------------------------------------------------------- latestOffset


def test_latest_offset_caps_per_partition_and_injects_requested_barriers(
    kafka_endpoint: KafkaEndpoint, reader_factory: ReaderFactory, tmp_path: Path
) -> None:
    topic = _topic()
    create_topic(kafka_endpoint, topic, 2)
    produce(kafka_endpoint, topic, [(0, None, b"x", None)] * 7 + [(1, None, b"y", None)] * 2)
    reader = reader_factory(_spec(kafka_endpoint.bootstrap_servers, [topic], max_records_per_batch=3))
    control = ControlChannel(tmp_path / "control")
    start = reader.initialOffset()

    # No request: capped at 3 per partition, no barrier.
    first = reader.latestOffset(start, None)
    assert first == {"partitions": _offsets(topic, p0=3, p1=2), "barrier": 0}

    # A request newer than start's barrier: this batch closes epoch 1 and records when
    # checkpoint 1 was triggered (for the barrier records a channel writer appends).
    triggered = datetime(2026, 11, 26, 12, 0, 0, 250000, tzinfo=UTC)
    control.request_barrier(1, triggered)
    second = reader.latestOffset(first, None)
    triggered_ms = round(triggered.timestamp() * 1000)
    assert second == {"partitions": _offsets(topic, p0=6, p1=2), "barrier": 1, "barrier_triggered_ms": triggered_ms}

    # The same request again (start already carries barrier 1): sticky, no new barrier.
    third = reader.latestOffset(second, None)
    assert third == {"partitions": _offsets(topic, p0=7, p1=2), "barrier": 1, "barrier_triggered_ms": triggered_ms}

    # Held: nothing advances, no barrier even if a newer one is requested.
    produce(kafka_endpoint, topic, [(1, None, b"z", None)])
    control.request_barrier(2)
    control.set_hold(True)
    assert reader.latestOffset(third, None) == third
    control.set_hold(False)
    fourth = reader.latestOffset(third, None)
    assert (fourth["partitions"], fourth["barrier"]) == (_offsets(topic, p0=7, p1=3), 2)
    assert fourth["barrier_triggered_ms"] > triggered_ms  # request_barrier's default: now


# --------------------------------------------------------------------------- read


def test_read_returns_the_produced_records_in_order_and_rereads_identically(
    kafka_endpoint: KafkaEndpoint, reader_factory: ReaderFactory
) -> None:
    topic = _topic()
    create_topic(kafka_endpoint, topic, 2)
    records = [
        (i % 2, None if i == 4 else f"k{i}".encode(), f"v{i}".encode(),
         [("h", f"{i}".encode()), ("n", b"")] if i % 3 == 0 else None)
        for i in range(20)
    ]
    before = datetime.now(UTC).replace(microsecond=0)
    produce(kafka_endpoint, topic, records)
    reader = reader_factory(_spec(kafka_endpoint.bootstrap_servers, [topic]))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["partitions"] == _offsets(topic, p0=10, p1=10)

    rows = _read_all(reader, start, end)
    expected = []
    for p in (0, 1):
        mine = [r for r in records if r[0] == p]
        for offset, (_, key, value, headers) in enumerate(mine):
            expected.append((topic, p, offset, key, value, [{"key": k, "value": v} for k, v in headers or []]))
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in rows] == expected
    assert all(r["timestamp"].tzinfo is not None and r["timestamp"] >= before for r in rows)

    assert _read_all(reader, start, end) == rows  # re-reading the same range: identical rows
    part = reader.partitions({"partitions": _offsets(topic, p0=3, p1=10)}, {"partitions": _offsets(topic, p0=6, p1=10)})
    assert [r["offset"] for b in reader.read(part[0]) for r in b.to_pylist()] == [3, 4, 5]


def test_read_stops_at_the_end_across_transaction_markers(kafka_endpoint: KafkaEndpoint,
                                                          reader_factory: ReaderFactory) -> None:
    from kafka import KafkaProducer

    topic = _topic("txn")
    create_topic(kafka_endpoint, topic, 1)
    producer = KafkaProducer(bootstrap_servers=kafka_endpoint.bootstrap_servers, linger_ms=0,
                             transactional_id=f"barrierflow-tests-{topic}")
    try:
        producer.init_transactions()
        for txn in range(2):  # each commit marker takes an offset: 0,1,2,[3], 4,5,6,[7]
            producer.begin_transaction()
            for i in range(3):  # the three in one produce request where the client batches them
                producer.send(topic, value=f"{txn}-{i}".encode(), partition=0)
            producer.commit_transaction()  # flushes first
    finally:
        producer.close()
    reader = reader_factory(_spec(kafka_endpoint.bootstrap_servers, [topic], poll_timeout=120.0))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["partitions"] == {f"{topic}:0": 8}
    began = time.monotonic()
    rows = _read_all(reader, start, end)
    assert [(r["offset"], r["value"]) for r in rows] == [
        (0, b"0-0"), (1, b"0-1"), (2, b"0-2"), (4, b"1-0"), (5, b"1-1"), (6, b"1-2")]
    # stopped at the position; waiting for 8 records would have lasted the whole 120 s poll timeout
    assert time.monotonic() - began < 60


def test_read_past_the_end_raises_after_poll_timeout(kafka_endpoint: KafkaEndpoint,
                                                     reader_factory: ReaderFactory) -> None:
    topic = _topic()
    create_topic(kafka_endpoint, topic, 1)
    produce(kafka_endpoint, topic, [(0, None, b"a", None)] * 2)
    reader = reader_factory(_spec(kafka_endpoint.bootstrap_servers, [topic], poll_timeout=1.0,
                                  unavailable_timeout=0))
    (part,) = reader.partitions({"partitions": {f"{topic}:0": 0}}, {"partitions": {f"{topic}:0": 5}})
    began = time.monotonic()
    with pytest.raises(SourceError, match=rf"{topic}:0 offsets \[0, 5\).*no progress"):
        list(reader.read(part))
    assert time.monotonic() - began < 10


def test_json_format_routes_malformed_records_to_dead_letters(
    kafka_endpoint: KafkaEndpoint, reader_factory: ReaderFactory, tmp_path: Path
) -> None:
    topic = _topic()
    create_topic(kafka_endpoint, topic, 1)
    good = [{"id": i, "name": f"n{i}", "amount": i * 1.5, "ok": i % 2 == 0,
             "at": f"2026-01-01T00:00:0{i}+00:00"} for i in range(4)]
    values = [
        json.dumps(good[0]).encode(),
        b'{"id": 1, "name": ',                                                   # 1: not JSON
        json.dumps({k: v for k, v in good[1].items() if k != "amount"}).encode(),  # 2: lacks amount
        json.dumps({**good[2], "id": "two"}).encode(),                           # 3: wrong type
        json.dumps(good[1]).encode(),
        b"\xff\xfe not utf-8",                                                   # 5: binary
        json.dumps([1, 2]).encode(),                                             # 6: not an object
        json.dumps({**good[3], "at": 1767225603000}).encode(),                   # epoch ms timestamp
    ]
    produce(kafka_endpoint, topic, [(0, None, v, None) for v in values])
    fields = {"id": "long", "name": "string", "amount": "double", "ok": "boolean", "at": "timestamp"}
    spec = _spec(kafka_endpoint.bootstrap_servers, [topic], format="json", json_fields=fields)
    dlq = f"file://{tmp_path / 'dead-letter'}"
    reader = reader_factory(spec, dead_letter_uri=dlq)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)

    rows = _read_all(reader, start, end)
    assert [r["offset"] for r in rows] == [0, 4, 7]
    assert [(r["id"], r["name"], r["amount"], r["ok"]) for r in rows] == [
        (0, "n0", 0.0, True), (1, "n1", 1.5, False), (3, "n3", 4.5, False)]
    assert rows[2]["at"] == datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert set(rows[0]) == {"topic", "partition", "offset", "timestamp", *fields}

    assert count_dead_letters(dlq) == 5
    letters = {d["offset"]: d for d in read_dead_letters(dlq)}
    assert sorted(letters) == [1, 2, 3, 5, 6]
    assert all(d["partition"] == f"{topic}:0" and d["source"] == spec.name for d in letters.values())
    assert "not valid JSON" in letters[1]["reason"] and letters[1]["payload"] == '{"id": 1, "name": '
    assert "'amount'" in letters[2]["reason"] and "missing" in letters[2]["reason"]
    assert "'id'" in letters[3]["reason"] and "long" in letters[3]["reason"]
    assert letters[5]["payload_encoding"] == "base64"
    assert "object" in letters[6]["reason"]

    assert _read_all(reader, start, end) == rows  # a replay rewrites the same dead letters
    assert count_dead_letters(dlq) == 5


def test_schema_follows_the_format() -> None:
    raw = _spec("127.0.0.1:9", ["t"])
    assert schema_for(raw) == RAW_SCHEMA
    typed = _spec("127.0.0.1:9", ["t"], format="json", json_fields={"a b": "long", "c": "timestamp"})
    assert schema_for(typed).endswith("`a b` BIGINT, `c` TIMESTAMP")


# --------------------------------------------------------------------------- dead broker


def test_dead_broker_gives_a_source_error_naming_the_servers(reader_factory: ReaderFactory) -> None:
    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    reader = reader_factory(_spec(servers, ["t"], poll_timeout=2.0, unavailable_timeout=0))
    began = time.monotonic()
    with pytest.raises(SourceError, match=servers) as info:
        reader.initialOffset()
    assert time.monotonic() - began < 8
    assert "Check that the brokers are running" in str(info.value)

    (part,) = reader.partitions({"partitions": {"t:0": 0}}, {"partitions": {"t:0": 3}})
    began = time.monotonic()
    with pytest.raises(SourceError, match=servers):
        list(reader.read(part))
    assert time.monotonic() - began < 8


def test_planning_rides_out_unanswering_brokers_for_unavailable_timeout(reader_factory: ReaderFactory) -> None:
    """While the brokers do not answer, latestOffset offers no new data (the start offsets);
    past unavailable_timeout it raises a SourceError naming the brokers and the setting."""
    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    reader = reader_factory(_spec(servers, ["t"], poll_timeout=1.0, unavailable_timeout=2.5))
    start = {"partitions": {"t:0": 7}, "barrier": 0}
    began = time.monotonic()
    assert reader.latestOffset(start, None) == start
    with pytest.raises(SourceUnavailableError, match=rf"{servers}.*unavailable_timeout=2.5s") as info:
        while time.monotonic() - began < 30:
            assert reader.latestOffset(start, None) == start
    assert "resumes from the last checkpoint" in str(info.value)


# --------------------------------------------------------------------------- Spark


@pytest.fixture
def kafka_spark(spark: Any) -> Any:
    """The shared session with the Kafka source registered (registration is idempotent)."""
    spark.dataSource.register(KafkaDataSource)
    return spark


@pytest.mark.spark
def test_streaming_query_sees_every_record_exactly_once(
    kafka_endpoint: KafkaEndpoint, kafka_spark: Any, tmp_path: Path
) -> None:
    topic = _topic("spark")
    create_topic(kafka_endpoint, topic, 2)
    first = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), None) for i in range(120)]
    produce(kafka_endpoint, topic, first)
    spec = _spec(kafka_endpoint.bootstrap_servers, [topic], max_records_per_batch=25)
    ControlChannel(tmp_path / "control").reset()
    seen: list[tuple[int, int, bytes]] = []
    batches: list[int] = []

    stamps: dict[int, list[Any]] = {0: [], 1: []}

    def collect(df: Any, batch_id: int) -> None:
        batches.append(batch_id)
        rows = df.collect()
        seen.extend((r["partition"], r["offset"], bytes(r["value"])) for r in rows)
        for r in rows:
            stamps[r["partition"]].append(r["timestamp"])

    def run() -> None:
        frame = (
            kafka_spark.readStream.format("barrierflow_kafka")
            .option("spec", spec.model_dump_json())
            .option("control_dir", str(tmp_path / "control"))
            .option("dead_letter_uri", f"file://{tmp_path / 'dlq'}")
            .option("event_time_uri", f"file://{tmp_path / 'event-times'}")
            .load()
        )
        query = (
            frame.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert len(batches) >= 3  # 60 records per partition, at most 25 per batch
    # A second run on the same checkpoint reads only what was produced since.
    second = [(i % 2, None, f"w{i}".encode(), None) for i in range(30)]
    produce(kafka_endpoint, topic, second)
    run()

    values = [v for *_, v in seen]
    assert len(seen) == len(set(seen)) == 150
    assert sorted(values) == sorted([v for *_, v, _ in first] + [v for *_, v, _ in second])
    for p in (0, 1):
        assert sorted(o for q, o, _ in seen if q == p) == list(range(75))
    # Each range's newest record timestamp was recorded by the executor that read it: what a
    # checkpoint at the end of the topic reports as max_event_time.
    from barrierflow.sources.event_times import EventTimeIndex

    index = EventTimeIndex(f"file://{tmp_path / 'event-times'}", spec.name)
    for p in (0, 1):
        newest = max(stamps[p]).astimezone(UTC)  # PySpark collects naive local-time datetimes
        assert index.max_event_time(f"{topic}:{p}", 75) == newest


# --------------------------------------------------------------------------- a bounded topic


def test_a_topics_bounded_end_is_its_end_offsets_when_asked(kafka_endpoint: KafkaEndpoint) -> None:
    from barrierflow.sources.registry import source_kind

    topic = _topic("ends")
    create_topic(kafka_endpoint, topic, 2)
    produce(kafka_endpoint, topic, [(i % 2, None, f"v{i}".encode(), None) for i in range(7)])
    spec = _spec(kafka_endpoint.bootstrap_servers, [topic])
    assert source_kind(spec).bounded_end(spec) == {f"{topic}:0": 4, f"{topic}:1": 3}


def test_a_bounded_end_from_a_dead_broker_names_the_servers() -> None:
    from barrierflow.sources.registry import source_kind

    spec = _spec(f"127.0.0.1:{free_port()}", ["t"], poll_timeout=1.0)
    with pytest.raises(SourceError, match=r"cannot reach the brokers 127\.0\.0\.1"):
        source_kind(spec).bounded_end(spec)


@pytest.mark.spark
def test_until_exhausted_reads_a_kafka_topic_to_its_last_record_and_stops(
        kafka_endpoint: KafkaEndpoint, spark: Any, tmp_path: Path) -> None:
    """``run --until-exhausted`` on a Kafka source: the run reads to the end offsets seen when it
    started, stops by itself after two checkpoints there, and the committed output holds every
    record once (not a timed stop: ``duration`` is far longer than the run)."""
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.sinks.parquet import read_committed
    from barrierflow.spec import parse_spec

    from tests.pipeline_specs import spec_dict

    topic = _topic("bounded")
    create_topic(kafka_endpoint, topic, 3)
    records = [(i % 3, None, json.dumps({"key": i % 11, "value": i}).encode(), None) for i in range(600)]
    produce(kafka_endpoint, topic, records)
    data = spec_dict(tmp_path, name="bounded")
    data["sources"] = [{"name": "orders", "type": "kafka", "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                        "topics": [topic], "format": "json", "json_fields": {"key": "long", "value": "long"},
                        "max_records_per_batch": 70, "poll_timeout": 5.0}]
    data["transformation"] = {"function": "barrierflow.transforms.projection:project",
                              "options": {"columns": {"key": "key", "value": "value"}}}
    data["sinks"] = [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]
    result = StreamingJob(parse_spec(data), spark=spark).run(until_exhausted=True, duration=300)
    assert result.elapsed_seconds < 300
    ends = {f"{topic}:{p}": 200 for p in range(3)}
    assert result.completed[-1].barrier_offsets["orders"] == ends
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None and sorted(table.column("value").to_pylist()) == list(range(600))
