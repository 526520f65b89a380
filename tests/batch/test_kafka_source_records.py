"""Reading a Kafka source again for the stream-vs-batch comparison, without a broker: the rows of
``reader: python`` (barrierflow's decoder sends a bad record to the dead-letter output) come out
of the batch read as that decoder emits them, and the offset ranges a checkpoint covers are
chosen from where the stream began or an earlier checkpoint, never from a range Kafka deleted.

The connector's rows stand in as a static DataFrame of its columns (its decoding is the stream's
own function, tested in tests/sources/test_spark_kafka_decoding.py); the expected rows come from
barrierflow's Python decoder itself (:class:`barrierflow.kafka_io.decoding.RecordDecoder`), an
independent implementation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from barrierflow.batch.source_records import NotComparableError, _as_python_reader, kafka_ranges
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.kafka_io.decoding import RecordDecoder
from barrierflow.spec.models import KafkaSourceSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = KafkaSourceSpec.model_validate({
    "name": "events", "type": "kafka", "bootstrap_servers": "b:9092", "topics": ["t"], "format": "json",
    "json_fields": {"key": "long", "value": "double", "name": "string", "ok": "boolean", "event_time": "timestamp"}})
#: One good record and each way a record is bad for barrierflow's decoder (or good only there).
VALUES = [
    b'{"key": 1, "value": 2.5, "name": "a", "ok": true, "event_time": "2026-01-01T00:00:01"}',
    b'{"key": 2, "value": 3, "name": "b", "ok": false, "event_time": 1767225602000}',  # an int is a double
    b'{"key": 3, "value": 1, "name": 7, "ok": true, "event_time": "2026-01-01T00:00:03"}',  # a number as string
    b'{"key": 4, "value": 1, "name": "d", "ok": "true", "event_time": "2026-01-01T00:00:04"}',  # a string as bool
    b'{"key": 5.5, "value": 1, "name": "e", "ok": true, "event_time": "2026-01-01T00:00:05"}',  # a float as long
    b'{"key": 6, "value": "NaN", "name": "f", "ok": true, "event_time": "2026-01-01T00:00:06"}',  # text as double
    b'{"key": 7, "value": 1, "name": "g", "ok": true}',  # a field missing
    b'{"key": 8, "value": 1, "name": null, "ok": true, "event_time": "2026-01-01T00:00:08"}',  # a null field
    b'{"key": 9, "value": 1, "name": {"x": 1}, "ok": true, "event_time": "2026-01-01T00:00:09"}',  # an object
    b'[1, 2]', b'not json', b'{"key": 10, "value": 1e3, "name": "j", "ok": true, "event_time": "2026-01-01T00:00:10"}',
]


def test_the_python_readers_rows_are_what_its_decoder_emits(spark: Any) -> None:
    raw = spark.createDataFrame(
        [("t", 0, i, T0, None, v) for i, v in enumerate(VALUES)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary")
    got = [tuple(r) for r in _as_python_reader(raw, SPEC).orderBy("offset").collect()]

    decoder = RecordDecoder(SPEC)
    records = [SimpleNamespace(topic="t", partition=0, offset=i, timestamp=int(T0.timestamp() * 1000), key=None,
                               value=v, headers=None) for i, v in enumerate(VALUES)]
    want = [tuple(_naive_utc(v) for v in row.values()) for batch in decoder.batches(records)
            for row in batch.to_pylist()]

    assert [r[2] for r in want] == [0, 1, 11]  # what the stream emits: the rest are dead letters
    assert len(decoder.dead_letters) == len(VALUES) - 3
    assert got == want


def _naive_utc(value: Any) -> Any:
    """A timestamp as Spark collects it (the session's time zone is UTC): naive."""
    return value.astimezone(UTC).replace(tzinfo=None) if isinstance(value, datetime) else value


def _manifest(cid: int, offsets: dict[str, int], newest: datetime | None) -> Manifest:
    stamp = T0 + timedelta(minutes=cid)
    return Manifest(
        pipeline="p", checkpoint_id=cid, attempt=1, spark_batch_id=cid, first_batch_id=cid, state_version=cid + 1,
        barrier_offsets={"events": offsets}, max_event_time={"events": dict.fromkeys(offsets, newest)},
        trigger_time=stamp, barrier_time=stamp, completion_time=stamp, barrier_batch_ms=1.0, sync_ms=1.0,
        async_ms=1.0, total_ms=1.0, full_bytes=0, incremental_bytes=0, files=[])


def test_the_ranges_start_where_the_stream_began_or_at_the_newest_retained_checkpoint() -> None:
    spec = SPEC.model_copy(update={"json_fields": {"key": "long"}, "topics": ["t"]})
    early = _manifest(1, {"t:0": 40, "t:1": 30}, T0 + timedelta(seconds=10))
    later = _manifest(2, {"t:0": 70, "t:1": 60}, T0 + timedelta(seconds=20))
    end = _manifest(3, {"t:0": 100, "t:1": 90}, T0 + timedelta(seconds=30))

    whole = kafka_ranges(spec, end, [early, later], retained={"t:0": 0, "t:1": 0})
    assert whole.ranges == {"t:0": (0, 100), "t:1": (0, 90)} and whole.after is None
    assert whole.origin == "the stream's first offsets"

    # Kafka deleted records at the stream's start: the oldest checkpoint still retained, its windows only
    trimmed = kafka_ranges(spec, end, [early, later], retained={"t:0": 50, "t:1": 0})
    assert trimmed.ranges == {"t:0": (70, 100), "t:1": (60, 90)} and trimmed.origin == "checkpoint 2"
    assert trimmed.after == T0 + timedelta(seconds=20, microseconds=1)

    # a start: the newest checkpoint whose records before it end before that start
    chosen = kafka_ranges(spec, end, [early, later], start=T0 + timedelta(seconds=15), retained={"t:0": 0, "t:1": 0})
    assert chosen.origin == "checkpoint 1" and chosen.ranges == {"t:0": (40, 100), "t:1": (30, 90)}

    # the canary: from the checkpoint it continued from
    since = kafka_ranges(spec, end, [], since=later, retained={"t:0": 0, "t:1": 0})
    assert since.ranges == {"t:0": (70, 100), "t:1": (60, 90)}

    with pytest.raises(NotComparableError, match=r"records of t:0 from offset 70 are no longer retained \(Kafka's "
                                                 r"oldest retained offset there is 80\)"):
        kafka_ranges(spec, end, [early, later], retained={"t:0": 80, "t:1": 0})
    # a checkpoint after which no window closes before the range's end is no start: nothing to compare from it
    with pytest.raises(NotComparableError, match="from checkpoint 1, the records of t:0 from offset 40"):
        kafka_ranges(spec, end, [early, later], before=T0 + timedelta(seconds=20), retained={"t:0": 50, "t:1": 0})
    latest = spec.model_copy(update={"starting_offsets": "latest"})
    with pytest.raises(NotComparableError, match="starting_offsets latest"):
        kafka_ranges(latest, end, [], retained={"t:0": 0, "t:1": 0})


@pytest.mark.kafka
def test_the_batch_read_holds_exactly_the_offset_ranges_for_either_reader(spark: Any, kafka_endpoint: Any) -> None:
    """Spark's Kafka batch source reads exactly ``[start, end)`` of each partition from the broker;
    ``reader: spark`` keeps a malformed record (nulls, as its stream does), ``reader: python``
    drops it (a dead letter in its stream)."""
    import json
    import uuid

    from barrierflow.batch.source_records import kafka_records

    from tests.support.kafka_broker import create_topic, produce

    topic = f"kr-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, 2)
    values = {p: [json.dumps({"key": i, "event_time": "2026-01-01T00:00:00"}).encode() if i != 4 else b"{}"
                  for i in range(10)] for p in range(2)}
    produce(kafka_endpoint, topic, [(p, None, v, None) for p in range(2) for v in values[p]])
    fields = {"key": "long", "event_time": "timestamp"}
    ranges = {f"{topic}:0": (2, 8), f"{topic}:1": (0, 3)}

    def read(reader: str) -> list[tuple[int, int, int | None]]:
        spec = KafkaSourceSpec.model_validate({
            "name": "events", "type": "kafka", "reader": reader, "bootstrap_servers": kafka_endpoint.bootstrap_servers,
            "topics": [topic], "format": "json", "json_fields": fields})
        rows = kafka_records(spark, spec, ranges).select("partition", "offset", "key").collect()
        return sorted((r.partition, r.offset, r.key) for r in rows)

    assert read("spark") == [(0, i, None if i == 4 else i) for i in range(2, 8)] + [(1, i, i) for i in range(3)]
    assert read("python") == [(0, i, i) for i in range(2, 8) if i != 4] + [(1, i, i) for i in range(3)]
