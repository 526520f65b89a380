"""A window change on a Kafka-fed pipeline through ``barrierflow upgrade``: the state rebuilt from a
bounded replay of the records the topic retains, and, once retention no longer holds them, a
refusal that names per partition what is needed and what is retained, and the way forward.

The pipeline is the user-totals shape: Kafka JSON payments (``user_id``, ``amount``,
``event_time``) -> per-user event-time window sums (``examples/user-totals``'s transformation,
``options.window``), append -> Parquet, RocksDB state, a 10 s watermark delay. Record ``i`` goes to
partition ``i % 2`` with user ``u<i % 3>``, amount ``(i % 7 + 1) * 0.25`` (exact in binary, so
sums compare exactly) and event time ``START + 1.5 s * i``, which is also its Kafka timestamp
(event time under the test's control; no wall clock).

1. The first ``FIRST`` records are produced, the 1-minute pipeline runs over them and is
   savepointed (its watermark ``W``); the rest are produced; ``upgrade`` to 2-minute windows
   rebuilds the state from the records of the oldest window open at ``W`` on (not from offset 0:
   the planned replay starts past every partition's first offset), its canary passes, and the new
   spec runs to the end of the topic. The output holds every 1-minute window closed by ``W`` and
   every 2-minute window closed after it, once, each with the sums of all its records (a 2-minute
   window that began before the savepoint has its earlier records from the replay), as a plain
   Python recount of the produced records says.
2. The same pipeline on another topic, savepointed; the topic's records are deleted (the admin
   API's delete_records) past where the 2-minute windows open at ``W`` begin: ``upgrade`` exits 2
   naming per partition the oldest offset needed and the oldest retained, and prints the
   savepoint's offsets as ``starting_offsets`` (what ``checkpoints show`` prints too); nothing is
   recorded. State that is not windowed (planned only: no Spark) replays from offset 0, which the
   topic holds before the deletion and not after it.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.savepoint import savepoint
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spark import commit_log, offset_log
from barrierflow.spec import load_spec
from barrierflow.upgrade.record import read_record
from barrierflow.upgrade.replay_range import RetentionNotCoveredError, plan_replay
from barrierflow.upgrade.report import report_for

from tests.support.in_session_runs import run_spec as run
from tests.support.in_session_runs import write_spec
from tests.support.kafka_broker import KafkaEndpoint

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "user-totals"
START = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(seconds=1.5)
FIRST, RECORDS, PARTITIONS = 240, 400, 2


def payment(i: int) -> dict[str, Any]:
    return {"user_id": f"u{i % 3}", "amount": (i % 7 + 1) * 0.25, "event_time": (START + STEP * i).isoformat()}


def create_topic(endpoint: KafkaEndpoint, topic: str) -> None:
    """``topic`` with ``PARTITIONS`` partitions and no time-based retention (its records' timestamps
    are the test's event times, which a broker's default 7 days would delete at once)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": endpoint.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])
    for future in futures.values():
        future.result(timeout=30)
    del admin  # librdkafka's client ends with its last reference (no reconnect logs after the broker stops)


def produce(endpoint: KafkaEndpoint, topic: str, first: int, end: int) -> None:
    """Records ``first..end-1`` (module docstring), each with its event time as its Kafka timestamp."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=endpoint.bootstrap_servers, acks="all",
                             max_in_flight_requests_per_connection=1)
    try:
        for i in range(first, end):
            record = payment(i)
            producer.send(topic, value=json.dumps(record).encode(), key=record["user_id"].encode(),
                          partition=i % PARTITIONS, timestamp_ms=int((START + STEP * i).timestamp() * 1000))
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=30)


def clicks(tmp: Path, file: str, endpoint: KafkaEndpoint, topic: str, window: str) -> Path:
    return write_spec(tmp / file, {
        "version": 1, "name": "clicks", "work_dir": str(tmp / "work"),
        "sources": [{"name": "payments", "type": "kafka", "bootstrap_servers": endpoint.bootstrap_servers,
                     "topics": [topic], "format": "json", "max_records_per_batch": 40,
                     "poll_timeout": 60,  # a loaded test machine's broker may answer slowly
                     "json_fields": {"user_id": "string", "amount": "double", "event_time": "timestamp"}}],
        "transformation": {"function": "user_totals.transform:per_user_minute_sums", "output_mode": "append",
                           "options": {"window": window}},
        "event_time": {"column": "event_time", "watermark_delay": "10s"},
        "sinks": [{"name": "totals", "type": "parquet", "path": f"file://{tmp / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp / 'checkpoints'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "state_store": "rocksdb"},
    })


def watermark_of(spec_path: Path, batch: int) -> datetime:
    [stage] = open_pipeline(spec_path).stages
    millis = offset_log.read_offset_metadata(stage.layout.spark_checkpoint, batch)["batchWatermarkMs"]
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def recount(records: int, seconds: int) -> dict[tuple[str, datetime], tuple[float, int]]:
    """(user, window start) -> (sum of amounts, payments) of every tumbling ``seconds`` window,
    from the produced records alone."""
    out: dict[tuple[str, datetime], tuple[float, int]] = {}
    for i in range(records):
        record = payment(i)
        at = START + STEP * i
        start = datetime.fromtimestamp(int(at.timestamp()) // seconds * seconds, tz=UTC)
        total, count = out.get((record["user_id"], start), (0.0, 0))
        out[(record["user_id"], start)] = (total + record["amount"], count + 1)
    return out


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


@pytest.mark.slow(80)
def test_a_kafka_window_change_rebuilds_state_from_a_bounded_replay(
        spark: Any, tmp_path: Path, cli: Any, kafka_endpoint: KafkaEndpoint, example_on_path: None) -> None:
    import pyarrow.parquet as pq

    topic = f"clicks-rebuild-{tmp_path.name}"
    create_topic(kafka_endpoint, topic)
    produce(kafka_endpoint, topic, 0, FIRST)
    old = clicks(tmp_path, "clicks.yaml", kafka_endpoint, topic, "1 minute")
    run(spark, old, until_exhausted=True, duration=120)
    store = CheckpointStore.for_spec(load_spec(old))
    first = savepoint(old).checkpoint_id
    manifest = store.get(first)
    watermark = watermark_of(old, manifest.spark_batch_id)
    assert watermark > START + timedelta(minutes=4), watermark  # windows of several minutes closed before it
    produce(kafka_endpoint, topic, FIRST, RECORDS)

    longer = clicks(tmp_path, "clicks-2m.yaml", kafka_endpoint, topic, "2 minutes")
    code, out, err = cli("upgrade", str(old), "--to", str(longer), "--dry-run", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"] == "needs rewrite", report
    assert any(f.get("rebuild") and "window changed: 60 s -> 120 s" in f["reason"]
               for s in report["stages"] for f in s["findings"]), report
    # the replay is bounded: from the oldest 2-minute window open at the savepoint, not offset 0
    [stage] = open_pipeline(longer).stages
    planned = report_for(old, longer, checkpoint_id=first, spark=spark).stages[0].planned
    replay = plan_replay(stage, store, manifest, planned, pipeline="clicks")
    since = watermark - timedelta(minutes=2)
    assert replay.since_ms == int(since.timestamp() * 1000)
    until = manifest.barrier_offsets["payments"]
    assert replay.until == until and replay.covered
    for partition, start in replay.start.items():
        p = int(partition.rsplit(":", 1)[1])
        # offset o of partition p holds record 2o + p: the first at or after `since`
        expected = next(o for o in range(until[partition] + 1) if START + STEP * (2 * o + p) >= since)
        assert 0 < start == expected < until[partition], (partition, start, expected, until)

    code, out, err = cli("upgrade", str(old), "--to", str(longer), "--json")
    assert code == 0, err
    upgraded = json.loads(out)
    assert upgraded["rebuilt"] == ["clicks"] and upgraded["source_savepoint"] == first, upgraded
    assert upgraded["canary"]["step"] == "canary-passed" and upgraded["canary"]["verified"], upgraded["canary"]
    run(spark, longer, until_exhausted=True, duration=120)
    last = commit_log.latest_committed(open_pipeline(longer).stages[0].layout.spark_checkpoint)
    assert last is not None
    final = watermark_of(longer, last)
    assert final > watermark + timedelta(minutes=2), (watermark, final)

    rows = [r for part in sorted((tmp_path / "out").glob("part-*.parquet")) for r in pq.read_table(part).to_pylist()]
    by_width: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_width.setdefault(int((row["window_end"] - row["window_start"]).total_seconds()), []).append(row)
    assert set(by_width) == {60, 120}, set(by_width)
    for width, closes in ((60, lambda end: end <= watermark), (120, lambda end: watermark < end <= final)):
        written = Counter((r["user_id"], r["window_start"]) for r in by_width[width])
        assert max(written.values()) == 1, [k for k, n in written.items() if n > 1]  # no window twice
        expected = {k: v for k, v in recount(RECORDS, width).items() if closes(k[1] + timedelta(seconds=width))}
        assert len({k[1] for k in expected}) >= 2, (width, watermark, final)
        got = {(r["user_id"], r["window_start"]): (r["total"], r["payments"]) for r in by_width[width]}
        assert got == expected, (width, watermark, final, sorted(set(got) ^ set(expected))[:10])
    # a 2-minute window open at the savepoint holds records from before it (the replay's)
    straddling = [k for k in recount(RECORDS, 120) if k[1] < watermark < k[1] + timedelta(seconds=120)]
    assert straddling and all(k in {(r["user_id"], r["window_start"]) for r in by_width[120]} for k in straddling)


@pytest.mark.slow(20)
def test_a_kafka_window_change_is_refused_once_retention_dropped_what_it_needs(
        spark: Any, tmp_path: Path, cli: Any, kafka_endpoint: KafkaEndpoint, example_on_path: None) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"clicks-cut-{tmp_path.name}"
    create_topic(kafka_endpoint, topic)
    produce(kafka_endpoint, topic, 0, FIRST)
    old = clicks(tmp_path, "clicks.yaml", kafka_endpoint, topic, "1 minute")
    run(spark, old, until_exhausted=True, duration=120)
    store = CheckpointStore.for_spec(load_spec(old))
    first = savepoint(old).checkpoint_id
    manifest = store.get(first)
    watermark = watermark_of(old, manifest.spark_batch_id)
    until = manifest.barrier_offsets["payments"]
    since = watermark - timedelta(minutes=2)
    needed = {p: next(o for o in range(until[p] + 1) if START + STEP * (2 * o + int(p[-1])) >= since) for p in until}
    cut = {p: min(needed[p] + 5, until[p]) for p in until}  # past what the open windows need, before the savepoint
    assert all(needed[p] < cut[p] for p in until), (needed, cut, until)
    # state that is not windowed needs every record from the pipeline's first: held, so far
    [stage] = open_pipeline(old).stages
    unwindowed = [{"operator": "Aggregate", "grouping keys": ["user_id: string"]}]
    whole = plan_replay(stage, store, manifest, unwindowed, pipeline="clicks")
    assert whole.covered and whole.since_ms is None and whole.start == dict.fromkeys(until, 0), whole
    admin = AdminClient({"bootstrap.servers": kafka_endpoint.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, int(p[-1]), o) for p, o in sorted(cut.items())])
    for future in futures.values():
        future.result(timeout=30)
    del admin, futures

    with pytest.raises(RetentionNotCoveredError, match="every record from the pipeline's first") as refused:
        plan_replay(stage, store, manifest, unwindowed, pipeline="clicks")
    for p in sorted(until):
        assert f"{p}: oldest offset needed 0, oldest retained {cut[p]}, savepoint at {until[p]}" in str(refused.value)

    code, out, err = cli("checkpoints", "show", str(old), str(first))
    assert code == 0, err
    form = json.dumps({topic: {str(int(p[-1])): until[p] for p in sorted(until)}})
    assert f"source payments as starting_offsets: {form}" in out, out
    code, out, err = cli("checkpoints", "show", str(old), str(first), "--json")
    assert code == 0 and json.loads(out)["stages"]["clicks"]["starting_offsets"] == {"payments": json.loads(form)}

    longer = clicks(tmp_path, "clicks-2m.yaml", kafka_endpoint, topic, "2 minutes")
    code, out, err = cli("upgrade", str(old), "--to", str(longer))
    assert code == 2, (out, err)
    for p in sorted(until):
        assert (f"{p}: oldest offset needed below {cut[p]} (the broker deleted the records that would say which), "
                f"oldest retained {cut[p]}, savepoint at {until[p]}") in err, err
    assert f"starting_offsets: {form}" in err, err
    assert since.isoformat() in err, err
    assert read_record(open_pipeline(old).objects) is None  # nothing recorded: run continues the old spec
