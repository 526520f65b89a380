"""The Kafka sink driven through the 2PC template (no Spark): write-ahead batches, a ledger on a
local store, Apache Kafka (started by the tests, or $BARRIERFLOW_TEST_KAFKA_BOOTSTRAP).

Records are read back from offset 0 with a consumer polling until it goes idle. A crashed
driver's transaction left open past its timeout is aborted by Kafka itself
(:func:`test_kafka_aborts_a_transaction_left_open_past_its_timeout_and_the_restore_commits_once`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.errors import SinkError
from barrierflow.kafka_io.committed_output import MarkerReader, committed_markers, committed_records
from barrierflow.local_ports import free_port
from barrierflow.sinks.json_rows import KEY_COLUMN, VALUE_COLUMN, encode_key, encode_value, encoded_records
from barrierflow.sinks.kafka import KafkaSink, transactional_id_for
from barrierflow.spec.models import KafkaSinkSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from tests.support.kafka_broker import KafkaEndpoint, create_topic

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]


def rows(ids: list[int]) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([f"v{i}" for i in ids], pa.string()),
        "x": pa.array([i * 0.5 for i in ids], pa.float64()),
        "ts": pa.array([datetime(2024, 1, 1, 12, 0, i % 60, tzinfo=UTC) for i in ids], pa.timestamp("us", tz="UTC")),
    })


def expected_value(i: int) -> dict[str, Any]:
    return {"id": i, "v": f"v{i}", "x": i * 0.5, "ts": f"2024-01-01T12:00:{i % 60:02d}+00:00"}


@dataclass
class Record:
    offset: int
    key: bytes | None
    value: dict[str, Any]
    headers: list[tuple[str, bytes]]


@dataclass
class Env:
    endpoint: KafkaEndpoint
    pipeline: str
    topic: str
    marker_topic: str
    write_ahead_uri: str
    ledger: TransactionLedger
    sinks: list[KafkaSink] = field(default_factory=list)

    def spec(self, **overrides: Any) -> KafkaSinkSpec:
        body: dict[str, Any] = {"type": "kafka", "name": "out", "bootstrap_servers": self.endpoint.bootstrap_servers,
                                "topic": self.topic, "key_column": "v", "commit_marker_topic": self.marker_topic,
                                "transaction_timeout_ms": 10_000}
        body.update(overrides)
        return KafkaSinkSpec.model_validate(body)

    def sink(self, attempt: int = 0, **overrides: Any) -> KafkaSink:
        spec = self.spec(**overrides)
        sink = KafkaSink(spec=spec, write_ahead_uri=self.write_ahead_uri, name=spec.name, pipeline=self.pipeline,
                         ledger=self.ledger, attempt=attempt, timeout=5.0)
        self.sinks.append(sink)
        return sink

    def stage(self, batch: int, ids: list[int]) -> None:
        write_ahead_batch(self.write_ahead_uri, batch, rows(ids))

    def read(self, topic: str | None = None, isolation: str = "read_committed") -> list[Record]:
        return read_topic(self.endpoint, topic or self.topic, isolation)

    def data_ids(self, isolation: str = "read_committed") -> list[int]:
        return [r.value["id"] for r in self.read(isolation=isolation)]

    def committed_ids(self) -> list[int]:
        """The ids of the committed epochs, read through the sink's commit markers (exact on
        the test broker too)."""
        return [json.loads(r.value)["id"] for r in committed_records(
            self.endpoint.bootstrap_servers, self.topic, self.marker_topic, pipeline=self.pipeline, sink="out",
            timeout=5.0)]


def read_topic(endpoint: KafkaEndpoint, topic: str, isolation: str = "read_committed",
               idle: float = 0.6, limit: float = 10.0) -> list[Record]:
    """Every record of partition 0 from offset 0, polling until nothing new comes for ``idle`` s."""
    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation, auto_offset_reset="earliest", metrics_enabled=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[Record] = []
        start = last_new = time.monotonic()
        while time.monotonic() - last_new < idle and time.monotonic() - start < limit:
            for records in consumer.poll(timeout_ms=100).values():
                for r in records:
                    out.append(Record(r.offset, r.key, json.loads(r.value), list(r.headers or [])))
                    last_new = time.monotonic()
        return out
    finally:
        consumer.close()


def zombie_commit(producer: KafkaProducer, wait: float = 5.0) -> str:
    """Try ``commit_transaction`` of a fenced producer, bounded: kafka-python waits without a
    bound (a broker that dropped the connection on a fenced EndTxn would leave the client
    retrying forever). Returns "fenced" (it raised), "stuck" (no answer within ``wait``) or
    "committed"."""
    outcome: list[str] = []

    def run() -> None:
        try:
            producer.commit_transaction()
            outcome.append("committed")
        except KafkaError:
            outcome.append("fenced")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    return outcome[0] if outcome else "stuck"


@pytest.fixture
def env(kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> Iterator[Env]:
    suffix = uuid.uuid4().hex[:10]
    topic, marker_topic = f"out-{suffix}", f"bf-commits-{suffix}"
    create_topic(kafka_endpoint, topic, 1)
    create_topic(kafka_endpoint, marker_topic, 1)
    e = Env(kafka_endpoint, f"p{suffix}", topic, marker_topic, f"file://{tmp_path / 'staging'}",
            TransactionLedger(LocalObjectStore(tmp_path / "checkpoints"), f"p{suffix}"))
    yield e
    for sink in e.sinks:
        sink.close()


# --------------------------------------------------------------------------- encoding


def test_encoding_of_values_and_keys() -> None:
    row = {"n": 1, "f": float("nan"), "b": b"\x00\x01", "t": datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
           "s": {"a": [1, None]}, "u": "é"}
    assert json.loads(encode_value(row)) == {"n": 1, "f": "NaN", "b": "AAE=", "t": "2024-05-06T07:08:09.123000+00:00",
                                             "s": {"a": [1, None]}, "u": "é"}
    assert encode_key("k1") == b"k1"
    assert encode_key(42) == b"42"
    assert encode_key(b"\xff") == b"\xff"
    assert encode_key(None) is None
    assert encode_key(datetime(2024, 1, 1, tzinfo=UTC)) == b"2024-01-01T00:00:00+00:00"


def test_rows_encoded_as_records_are_the_rows_values_and_keys() -> None:
    table = pa.table({"id": pa.array([1, 2, None], pa.int64()), "name": pa.array(["ä😀\"x", None, "k"]),
                      "ts": pa.array([datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)] * 3, pa.timestamp("us", tz="UTC"))})
    rows_ = table.to_pylist()
    keyed = encoded_records(table, "name", sink="out", where="a test table")
    assert keyed.column_names == [KEY_COLUMN, VALUE_COLUMN]
    assert keyed.column(VALUE_COLUMN).to_pylist() == [encode_value(r) for r in rows_]
    assert keyed.column(KEY_COLUMN).to_pylist() == [encode_key(r["name"]) for r in rows_]
    assert encoded_records(table, None, sink="out", where="a test table").column(KEY_COLUMN).to_pylist() == [None] * 3
    with pytest.raises(SinkError, match="key_column 'nope' is not a column of a test table"):
        encoded_records(table, "nope", sink="out", where="a test table")


def test_an_epoch_written_ahead_as_records_and_one_written_as_rows_commit_the_same_records(env: Env) -> None:
    """Executors write a Kafka sink's batches ahead as its records; batches written ahead as rows
    (by an earlier barrierflow, still pending at an upgrade) are encoded at the commit."""
    sink = env.sink()
    env.stage(0, [1, 2])  # rows
    write_ahead_batch(env.write_ahead_uri, 1, encoded_records(rows([3, 4]), "v", sink="out", where="a test"))
    sink.pre_commit_epoch(1, barrier_batch=1)
    sink.notify_checkpoint_complete(1, barrier_batch=1)
    got = env.read()
    assert [r.value for r in got] == [expected_value(i) for i in (1, 2, 3, 4)]
    assert [r.key for r in got] == [b"v1", b"v2", b"v3", b"v4"]


# --------------------------------------------------------------------------- visibility


def test_epoch_visible_only_after_checkpoint_complete(env: Env) -> None:
    sink = env.sink()
    env.stage(0, [1, 2])
    env.stage(1, [3])
    env.stage(2, [4, 5])
    [handle] = sink.pre_commit_epoch(1, barrier_batch=1)
    assert handle["batches"] == [0, 1]
    assert handle["transactional_id"] == transactional_id_for(env.pipeline, "out")
    assert env.ledger.get("out", 1).state is TxnState.PRECOMMITTED  # type: ignore[union-attr]
    # Write-ahead: nothing reaches the broker before the checkpoint completes, on any broker.
    assert env.read(isolation="read_uncommitted") == []
    assert env.read(env.marker_topic, isolation="read_uncommitted") == []

    sink.notify_checkpoint_complete(1, barrier_batch=1)
    got = env.read()
    assert [r.value for r in got] == [expected_value(i) for i in (1, 2, 3)]
    assert [r.key for r in got] == [b"v1", b"v2", b"v3"]
    assert all(r.headers == [("bf-epoch", b"1"), ("bf-attempt", b"0")] for r in got)
    txn = env.ledger.get("out", 1)
    assert txn is not None and txn.state is TxnState.COMMITTED
    assert sink.write_ahead.batches() == [2]
    markers = env.read(env.marker_topic)
    assert [(m.key, m.value["checkpoint_id"], m.value["records"]) for m in markers] == \
        [(txn.transaction_id.encode(), 1, 3)]

    sink.pre_commit_epoch(2, barrier_batch=2)
    sink.notify_checkpoint_complete(2, barrier_batch=2)
    got = env.read()
    assert [r.value["id"] for r in got] == [1, 2, 3, 4, 5]
    assert [r.headers[0] for r in got[3:]] == [("bf-epoch", b"2")] * 2
    assert set(committed_markers(env.endpoint.bootstrap_servers, env.marker_topic, pipeline=env.pipeline,
                                 sink="out")) == {t.transaction_id for t in env.ledger.list("out")}
    # Each transaction ends with a control record (its commit marker), so the end offset is
    # one past the last record a read_committed consumer reads.
    consumer = KafkaConsumer(bootstrap_servers=env.endpoint.bootstrap_servers, isolation_level="read_committed",
                             metrics_enabled=False)
    try:
        tp = TopicPartition(env.topic, 0)
        assert consumer.end_offsets([tp])[tp] == got[-1].offset + 2
    finally:
        consumer.close()


def test_keyless_and_empty_epoch(env: Env) -> None:
    sink = env.sink(key_column=None)
    env.stage(0, [7])
    sink.pre_commit_epoch(1, barrier_batch=0)
    sink.notify_checkpoint_complete(1, barrier_batch=0)
    sink.pre_commit_epoch(2, barrier_batch=0)  # no new batch: an empty epoch still commits (marker only)
    sink.notify_checkpoint_complete(2, barrier_batch=0)
    got = env.read()
    assert [(r.key, r.value["id"]) for r in got] == [(None, 7)]
    assert [m.value["records"] for m in env.read(env.marker_topic)] == [1, 0]


# --------------------------------------------------------------------------- idempotence


def test_retried_commit_after_crash_before_ledger_update_produces_no_duplicates(env: Env) -> None:
    """The first commit's marker is committed: the retried commit finds it and produces nothing."""
    first = env.sink(attempt=0)
    env.stage(0, [1, 2])
    env.stage(1, [3])
    first.pre_commit_epoch(1, barrier_batch=1)
    txn = env.ledger.get("out", 1)
    assert txn is not None and txn.state is TxnState.PRECOMMITTED
    first.commit(txn)  # commit_transaction done; the "crash" comes before the ledger update
    assert env.data_ids() == [1, 2, 3]
    assert env.ledger.get("out", 1).state is TxnState.PRECOMMITTED  # type: ignore[union-attr]

    second = env.sink(attempt=1)  # another process
    decisions = second.restore(1, barrier_batch=1)
    assert [(d.transaction_id, d.action) for d in decisions] == [(txn.transaction_id, "COMMIT")]
    assert env.data_ids() == [1, 2, 3]
    assert len(env.read(env.marker_topic)) == 1
    assert env.ledger.get("out", 1).state is TxnState.COMMITTED  # type: ignore[union-attr]
    assert second.write_ahead.batches() == []
    second.commit(txn)  # and once more: still a no-op
    assert env.data_ids() == [1, 2, 3]


def test_the_marker_check_reads_each_marker_once_and_sees_markers_others_committed_since(env: Env) -> None:
    """A sink reads the marker topic from its beginning at its first commit only; each later
    commit reads what was added since. A marker another process committed in between (here a
    second sink object committing the epoch first) is still found, so nothing is produced twice."""
    first = env.sink(attempt=0)
    for epoch, batch in ((1, 0), (2, 1), (3, 2)):
        env.stage(batch, [epoch * 10, epoch * 10 + 1])
        first.pre_commit_epoch(epoch, barrier_batch=batch)
        first.notify_checkpoint_complete(epoch, barrier_batch=batch)
    reader = MarkerReader(env.endpoint.bootstrap_servers, env.marker_topic, pipeline=env.pipeline, sink="out",
                          timeout=5.0)
    try:
        assert [m["checkpoint_id"] for m in reader.read_new()] == [1, 2, 3]
        assert reader.records_read == 3
        env.stage(3, [40])
        first.pre_commit_epoch(4, barrier_batch=3)
        txn = env.ledger.get("out", 4)
        assert txn is not None
        second = env.sink(attempt=1)  # another process commits epoch 4 first
        second.commit(txn)
        assert [m["checkpoint_id"] for m in reader.read_new()] == [4]
        assert reader.records_read == 4  # the three older markers were not read again
        assert reader.read_new() == [] and reader.records_read == 4
    finally:
        reader.close()
    first.commit(txn)  # its reader read markers 1-3 before; it finds 4 and produces nothing
    assert env.data_ids() == [10, 11, 20, 21, 30, 31, 40]
    assert len(env.read(env.marker_topic)) == 4


def test_sigkill_at_mid_sink_commit_then_restore(env: Env, tmp_path: Path) -> None:
    """A real second process: the first driver is SIGKILLed right after commit_transaction."""
    env.stage(0, [1, 2, 3])
    env.sink().pre_commit_epoch(1, barrier_batch=0)
    script = textwrap.dedent(f"""
        from barrierflow.sinks.kafka import KafkaSink
        from barrierflow.spec.models import KafkaSinkSpec
        from barrierflow.storage.local import LocalObjectStore
        from barrierflow.transactions.ledger import TransactionLedger
        spec = KafkaSinkSpec.model_validate_json({env.spec().model_dump_json()!r})
        ledger = TransactionLedger(LocalObjectStore({str(tmp_path / "checkpoints")!r}), {env.pipeline!r})
        sink = KafkaSink(spec=spec, write_ahead_uri={env.write_ahead_uri!r}, name="out", pipeline={env.pipeline!r},
                         ledger=ledger, attempt=0, timeout=5.0)
        sink.notify_checkpoint_complete(1, 0)
        print("not crashed")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "BARRIERFLOW_CRASH_AT": "mid_sink_commit"})
    assert proc.returncode == -9, proc.stderr
    assert "injected crash at mid_sink_commit" in proc.stderr
    assert env.data_ids() == [1, 2, 3]
    assert env.ledger.get("out", 1).state is TxnState.PRECOMMITTED  # type: ignore[union-attr]

    decisions = env.sink(attempt=1).restore(1, barrier_batch=0)
    assert [d.action for d in decisions] == ["COMMIT"]
    assert env.data_ids() == [1, 2, 3]
    assert env.ledger.get("out", 1).state is TxnState.COMMITTED  # type: ignore[union-attr]


def test_crash_before_commit_transaction_is_redone_exactly_once(env: Env) -> None:
    """A driver died after producing the epoch and its marker but before commit_transaction:
    the restarted driver's init_transactions aborts that transaction and the marker check must
    not see the aborted marker."""
    env.stage(0, [1, 2])
    env.sink().pre_commit_epoch(1, barrier_batch=0)
    txn = env.ledger.get("out", 1)
    assert txn is not None
    zombie = KafkaProducer(bootstrap_servers=env.endpoint.bootstrap_servers,
                           transactional_id=transactional_id_for(env.pipeline, "out"), linger_ms=0)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(env.topic, key=b"v1", value=json.dumps(expected_value(1)).encode()).get(timeout=10)
        zombie.send(env.marker_topic, key=txn.transaction_id.encode(),
                    value=json.dumps({"transaction_id": txn.transaction_id, "pipeline": env.pipeline,
                                      "sink": "out"}).encode()).get(timeout=10)
        env.sink(attempt=1).restore(1, barrier_batch=0)
        assert zombie_commit(zombie) == "fenced"
    finally:
        zombie.close(timeout=1)
    assert env.data_ids() == [1, 2]
    assert [m.value["attempt"] for m in env.read(env.marker_topic)] == [0]


def _last_stable_offset(env: Env) -> tuple[int, int]:
    """``(last stable offset, high watermark)`` of partition 0 of the records topic: what a
    ``read_committed`` and a ``read_uncommitted`` consumer see as its end."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(bootstrap_servers=env.endpoint.bootstrap_servers, isolation_level=isolation,
                                 metrics_enabled=False)
        try:
            tp = TopicPartition(env.topic, 0)
            ends.append(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()
    return ends[0], ends[1]


def test_kafka_aborts_a_transaction_left_open_past_its_timeout_and_the_restore_commits_once(env: Env) -> None:
    """A driver process is SIGKILLed with its Kafka transaction open (the epoch's records and
    its marker produced, no commit_transaction). Until the broker acts, the partition's last
    stable offset stays at the transaction's first record. Kafka itself aborts the transaction
    once its ``transaction.timeout.ms`` (1 s here) passed: an abort marker follows the dead
    records and the last stable offset reaches the high watermark, with no barrierflow process
    running. The restarted driver then commits the epoch once (its ``init_transactions`` with
    the same transactional id, ``bf.<pipeline>.<sink>``, would also have fenced and aborted
    the dead producer had the broker not done so yet). read_committed readers never see the
    dead transaction's records."""
    env.stage(0, [1, 2])
    env.sink().pre_commit_epoch(1, barrier_batch=0)
    txn = env.ledger.get("out", 1)
    assert txn is not None
    timeout_ms = 1000
    script = textwrap.dedent(f"""
        import json, time
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers={env.endpoint.bootstrap_servers!r}, linger_ms=0,
                                 transactional_id={transactional_id_for(env.pipeline, "out")!r},
                                 transaction_timeout_ms={timeout_ms})
        producer.init_transactions()
        producer.begin_transaction()
        for i in (1, 2):
            producer.send({env.topic!r}, key=b"v", value=json.dumps({{"id": i, "stale": True}}).encode(),
                          headers=[("bf-epoch", b"1"), ("bf-attempt", b"0")]).get(timeout=10)
        producer.send({env.marker_topic!r}, key={txn.transaction_id!r}.encode(),
                      value=json.dumps({{"transaction_id": {txn.transaction_id!r}, "pipeline": {env.pipeline!r},
                                         "sink": "out", "attempt": 0}}).encode()).get(timeout=10)
        print("open", flush=True)
        time.sleep(120)
    """)
    dead = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert dead.stdout is not None and dead.stdout.readline().strip() == "open"
    finally:
        dead.kill()
        dead.wait(timeout=10)
    stable, high = _last_stable_offset(env)
    # Open (its two records, nothing stable), or already aborted by the broker (an abort marker at
    # offset 2): which one a reader sees first depends on how soon it looks, not on the code.
    assert (stable, high) in ((0, 2), (3, 3)), (stable, high)
    deadline = time.monotonic() + 90  # the broker's abort timer: 1 s on the test broker, 10 s by default
    while (stable, high) != (3, 3):  # the broker aborted it: an abort marker at offset 2
        assert time.monotonic() < deadline, f"Kafka did not abort the timed-out transaction: {(stable, high)}"
        time.sleep(0.2)
        stable, high = _last_stable_offset(env)
    assert env.data_ids() == []

    decisions = env.sink(attempt=1).restore(1, barrier_batch=0)
    assert [(d.transaction_id, d.action) for d in decisions] == [(txn.transaction_id, "COMMIT")]
    got = env.read()
    assert [r.value["id"] for r in got] == [1, 2] and not any(r.value.get("stale") for r in got)
    assert [r.offset for r in got] == [3, 4]  # after the dead records (0, 1) and their abort marker (2)
    assert env.committed_ids() == [1, 2]
    markers = env.read(env.marker_topic)
    assert [m.key for m in markers] == [txn.transaction_id.encode()] and "records" in markers[0].value
    stable, high = _last_stable_offset(env)
    assert stable == high  # nothing left open


# --------------------------------------------------------------------------- restore and abort


def test_restore_before_the_epoch_produces_nothing(env: Env) -> None:
    sink = env.sink()
    env.stage(0, [1])
    env.stage(1, [2])
    sink.pre_commit_epoch(1, barrier_batch=1)
    decisions = env.sink(attempt=1).restore(None, None)
    assert [d.action for d in decisions] == ["ABORT"]
    assert env.ledger.get("out", 1).state is TxnState.ABORTED  # type: ignore[union-attr]
    assert sink.write_ahead.batches() == []  # replayed by Spark from the restored offsets
    assert env.read(isolation="read_uncommitted") == []
    assert env.read(env.marker_topic, isolation="read_uncommitted") == []


def test_restore_commits_covered_epoch_and_discards_newer_batches(env: Env) -> None:
    sink = env.sink()
    for batch in range(4):
        env.stage(batch, [batch])
    sink.pre_commit_epoch(1, barrier_batch=1)
    sink.pre_commit_epoch(2, barrier_batch=3)
    decisions = env.sink(attempt=1).restore(1, barrier_batch=1)
    assert [(d.checkpoint_id, d.action) for d in decisions] == [(1, "COMMIT"), (2, "ABORT")]
    assert env.data_ids(isolation="read_uncommitted") == [0, 1]
    assert sink.write_ahead.batches() == []


def test_abort_keeps_staged_batches_for_the_next_epoch(env: Env) -> None:
    sink = env.sink()
    env.stage(0, [1])
    env.stage(1, [2])
    stale = env.ledger.open(sink="out", sink_type="kafka", transaction_id=sink.transaction_id(1), checkpoint_id=1,
                            attempt=0, batches=[0], handle={})  # pre-commit of checkpoint 1 never finished
    sink.abort(stale)
    assert sink.write_ahead.batches() == [0, 1]
    sink.pre_commit_epoch(2, barrier_batch=1)  # aborts the stale OPEN transaction, takes over its batch
    assert env.ledger.get("out", 1).state is TxnState.ABORTED  # type: ignore[union-attr]
    sink.notify_checkpoint_complete(2, barrier_batch=1)
    assert env.data_ids() == [1, 2]
    assert [r.headers[0] for r in env.read()] == [("bf-epoch", b"2")] * 2


# --------------------------------------------------------------------------- fencing


def test_zombie_sink_is_fenced_and_writes_nothing(env: Env) -> None:
    old = env.sink(attempt=0)
    env.stage(0, [1])
    old.pre_commit_epoch(1, barrier_batch=0)
    old.notify_checkpoint_complete(1, barrier_batch=0)  # old's producer is initialised

    new = env.sink(attempt=1)
    env.stage(1, [2])
    new.pre_commit_epoch(2, barrier_batch=1)
    new.notify_checkpoint_complete(2, barrier_batch=1)  # init_transactions fences old

    env.stage(2, [3])
    old.pre_commit_epoch(3, barrier_batch=2)
    with pytest.raises(SinkError, match="fenced"):
        old.notify_checkpoint_complete(3, barrier_batch=2)
    assert env.ledger.get("out", 3).state is TxnState.PRECOMMITTED  # type: ignore[union-attr]
    assert env.data_ids(isolation="read_uncommitted") == [1, 2]  # the fenced send was refused
    assert old.write_ahead.batches() == [2]
    new.notify_checkpoint_complete(3, barrier_batch=2)  # the live driver commits it (and fences old again)
    assert env.data_ids() == [1, 2, 3]


def test_zombie_producer_mid_transaction_is_fenced(env: Env) -> None:
    zombie = KafkaProducer(bootstrap_servers=env.endpoint.bootstrap_servers,
                           transactional_id=transactional_id_for(env.pipeline, "out"), linger_ms=0)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(env.topic, key=b"zombie", value=b'{"id": -1}').get(timeout=10)
        env.stage(0, [1])
        sink = env.sink()
        sink.pre_commit_epoch(1, barrier_batch=0)
        sink.notify_checkpoint_complete(1, barrier_batch=0)
        assert zombie_commit(zombie, wait=3.0) == "fenced"  # its EndTxn is answered with a fencing error
    finally:
        zombie.close(timeout=1)
    assert env.data_ids()[-1] == 1  # the live sink committed after fencing the zombie
    assert env.committed_ids() == [1]  # the zombie's aborted record has no marker
    assert env.data_ids() == [1]  # read_committed: the zombie's aborted record is hidden


def test_committed_records_are_those_of_the_markers(env: Env) -> None:
    """The reader through commit markers returns each committed epoch once, in order, and
    nothing of a transaction aborted before its marker, on any broker; each marker records
    the offsets of its records."""
    env.stage(0, [1, 2])
    first = env.sink()
    first.pre_commit_epoch(1, barrier_batch=0)
    first.notify_checkpoint_complete(1, barrier_batch=0)
    env.stage(1, [3, 4, 5])
    first.pre_commit_epoch(2, barrier_batch=1)
    # A driver that died in the middle of epoch 2's Kafka transaction: records, no marker.
    crashed = KafkaProducer(bootstrap_servers=env.endpoint.bootstrap_servers,
                            transactional_id=transactional_id_for(env.pipeline, "out"), linger_ms=0)
    try:
        crashed.init_transactions()
        crashed.begin_transaction()
        for i in (3, 4):
            crashed.send(env.topic, key=b"v", value=json.dumps(expected_value(i)).encode(),
                         headers=[("bf-epoch", b"2"), ("bf-attempt", b"0")]).get(timeout=10)
        env.sink(attempt=1).restore(2, barrier_batch=1)  # fences the crashed producer and commits epoch 2
    finally:
        crashed.close(timeout=1)
    assert env.committed_ids() == [1, 2, 3, 4, 5]
    markers = committed_markers(env.endpoint.bootstrap_servers, env.marker_topic, pipeline=env.pipeline, sink="out")
    spans = sorted((m["ranges"]["0"], m["records"]) for m in markers.values())
    assert [last - first + 1 for (first, last), _ in spans] == [records for _, records in spans] == [2, 3]
    assert spans[0][0][1] < spans[1][0][0]
    assert env.data_ids() == [1, 2, 3, 4, 5]  # a read_committed consumer agrees with the markers



# --------------------------------------------------------------------------- failures


def test_dead_broker_gives_sink_error_naming_servers(tmp_path: Path) -> None:
    servers = f"127.0.0.1:{free_port()}"
    spec = KafkaSinkSpec(type="kafka", name="out", bootstrap_servers=servers, topic="t", commit_marker_topic="m")
    ledger = TransactionLedger(LocalObjectStore(tmp_path / "checkpoints"), "dead")
    sink = KafkaSink(spec=spec, write_ahead_uri=f"file://{tmp_path / 'staging'}", name="out", pipeline="dead",
                     ledger=ledger, timeout=2.0)
    write_ahead_batch(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, barrier_batch=0)  # pre-commit needs no broker
    started = time.monotonic()
    with pytest.raises(SinkError, match=servers.replace(".", r"\.")):
        sink.notify_checkpoint_complete(1, barrier_batch=0)
    assert time.monotonic() - started < 8
    assert ledger.get("out", 1).state is TxnState.PRECOMMITTED  # type: ignore[union-attr]
    assert sink.write_ahead.batches() == [0]


@pytest.mark.parametrize("which", ["topic", "commit_marker_topic"])
def test_unknown_topic_gives_sink_error(env: Env, which: str) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    sink = env.sink(**{which: missing})
    env.stage(0, [1])
    sink.pre_commit_epoch(1, barrier_batch=0)
    started = time.monotonic()
    with pytest.raises(SinkError, match=f"topic '{missing}' does not exist"):
        sink.notify_checkpoint_complete(1, barrier_batch=0)
    assert time.monotonic() - started < 15
    assert env.ledger.get("out", 1).state is TxnState.PRECOMMITTED  # type: ignore[union-attr]
    assert env.read(isolation="read_uncommitted") == []
