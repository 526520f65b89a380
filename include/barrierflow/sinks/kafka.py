"""The Kafka sink: exactly-once through a write-ahead two-phase commit.

Clients: records and markers are produced with confluent-kafka's transactional producer
(:class:`barrierflow.kafka_io.transactions.TransactionalProducer`: real producer batches,
keys placed by the Java client's murmur2 partitioner); the marker topic and the committed
output are read with kafka-python (a few requests per commit; and a second client reading
what the first wrote is what the exactly-once tests want).

Design: write-ahead, not Flink's resume-the-open-transaction design. Flink keeps epoch n's
Kafka transaction open from pre-commit to commit and, after a crash, resumes it from another
process with the recorded producer id and epoch. Neither Python client can resume another
producer's id/epoch, so a Kafka transaction cannot outlive the driver process that opened it.
The staged micro-batches (:mod:`barrierflow.sinks.staging`) already make epoch n durable and
invisible, i.e. they are a write-ahead log; so the whole epoch is produced in one short
transaction at commit time:

* ``pre_commit(txn)``: nothing at the broker; the handle records the records topic, the
  commit-marker topic and the transactional id.
* ``commit(txn)``: with a producer whose ``transactional_id`` is stable per pipeline and sink
  (``bf.<pipeline>.<sink>``; ``init_transactions()`` of a restarted driver therefore fences
  the zombie and aborts its lingering transaction), once per sink object ``init_transactions``;
  then ``begin_transaction``, every row of the transaction's staged batches in batch order
  (value: the row as a JSON object, timestamps as ISO-8601 strings; key: the ``key_column``'s
  value as UTF-8 text when set; headers ``bf-epoch`` = checkpoint id and ``bf-attempt`` =
  attempt that opened the transaction), then one commit-marker record to
  ``commit_marker_topic`` keyed by the ledger's transaction id, then ``commit_transaction``.
  The marker is in the same Kafka transaction as the records, so it is visible exactly when
  they are.
* Idempotence: before producing, the marker topic is read with ``read_committed``; if a marker
  for the transaction id is there, the epoch was already committed (a crash between
  ``commit_transaction`` and the ledger update) and the commit is a no-op.
* ``abort(txn)``: nothing at the broker (no open transaction survives a process); if this
  sink object has an open producer transaction for ``txn``, it is aborted.

Staged data is never deleted here; the template deletes it after the ledger says COMMITTED.

Caveats:

* The marker check needs a broker that hides aborted transactional records from
  ``read_committed`` consumers, as Kafka does; on one that does not (some Kafka-protocol
  imitations) an aborted marker (a driver that crashed
  after producing the marker but before ``commit_transaction``) would be taken as committed.
* A transaction left open by a dead driver: Kafka aborts it after ``transaction_timeout_ms``
  (tests/sinks/test_kafka_sink.py shows it). The sink does not wait for that: the restarted
  driver's ``init_transactions`` (same transactional id) fences the dead producer and aborts
  it before anything is produced.
  Meanwhile a ``read_committed`` reader of the topic waits at that transaction.
* Records travel in producer batches (``linger.ms`` 5, idempotent, ``acks=all``); the marker is
  sent after every record of the epoch was acknowledged, carrying each partition's
  acknowledged offset span (what :func:`committed_records` reads).
* The marker topic must exist (it is never auto-created), and its retention must be longer
  than the longest time a pre-committed epoch may wait for a retried commit (the default
  7 days is ample). Each commit reads it from the beginning, filtered to this pipeline/sink.
* With several partitions in the records topic, order is kept per partition (per key).

Every broker call is bounded by ``timeout`` seconds (reading the marker topic may wait up to
``transaction_timeout_ms`` longer for another producer's open transaction to end); an
unreachable broker, an unknown topic or a fenced producer gives a :class:`SinkError` that
names the servers and what to check.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError
from barrierflow.faults import crash_point
from barrierflow.spec.models import KafkaSinkSpec
from barrierflow.transactions.ledger import Transaction
from barrierflow.transactions.staged import StagedBatches
from barrierflow.transactions.two_phase import TwoPhaseCommitSink, mid_commit_crash_point

if TYPE_CHECKING:
    from kafka import KafkaConsumer
    from kafka.consumer.fetcher import ConsumerRecord

    from barrierflow.kafka_io.transactions import TransactionalProducer
    from barrierflow.spec.kafka_client import KafkaClientSpec

log = logging.getLogger(__name__)

#: Default bound, in seconds, on connecting to the brokers and on each broker request.
DEFAULT_TIMEOUT = 10.0
EPOCH_HEADER = "bf-epoch"
ATTEMPT_HEADER = "bf-attempt"


# --------------------------------------------------------------------------- helpers


def split_servers(bootstrap_servers: str | Sequence[str]) -> list[str]:
    """The ``host:port`` list of a comma-separated string (or list)."""
    items = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    return [s.strip() for s in items if s.strip()]


def transactional_id_for(pipeline: str, sink: str) -> str:
    """The stable Kafka ``transactional_id`` of a pipeline's sink (same across restarts)."""
    return f"bf.{pipeline}.{sink}"


def _jsonable(value: Any) -> Any:
    """``value`` (from ``pyarrow`` ``to_pylist``) as something :func:`json.dumps` encodes.

    Timestamps, dates and times become ISO-8601 strings, decimals exact strings, bytes base64,
    durations ISO-8601 ``PT<seconds>S``, non-finite floats ``"NaN"``/``"Infinity"``/
    ``"-Infinity"`` (as Spark's ``to_json``), structs objects, lists and maps arrays."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, datetime | date | dtime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"PT{value.total_seconds()!r}S"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def encode_value(row: dict[str, Any]) -> bytes:
    """A row as a compact UTF-8 JSON object (see :func:`_jsonable` for the types)."""
    return json.dumps(_jsonable(row), ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def encode_key(value: Any) -> bytes | None:
    """A key column's value as UTF-8 text: strings as they are, bytes untouched, timestamps
    ISO-8601, numbers in their JSON form; None stays None (no key)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    text = _jsonable(value)
    return (text if isinstance(text, str) else json.dumps(text, separators=(",", ":"))).encode()


def _unreachable(servers: Sequence[str], what: str, timeout: float, exc: BaseException) -> SinkError:
    return SinkError(
        f"Kafka sink: {what} failed: cannot reach the brokers {','.join(servers)} within {timeout:g}s "
        f"({type(exc).__name__}: {exc}). Check that the brokers are running and listening on those "
        "addresses, that bootstrap_servers is right, that the advertised listeners resolve and are "
        "reachable from the driver, and that no firewall blocks the port. The epoch stays staged and "
        "pre-committed; it is committed by the next completed checkpoint or by a restore."
    )


def _read_failed(servers: Sequence[str], what: str, timeout: float, exc: BaseException) -> SinkError:
    """The error for a failed read of a topic: unreachable brokers, or what the broker said."""
    if _is_connectivity(exc):
        return _unreachable(servers, what, timeout, exc)
    return SinkError(f"Kafka sink: {what} on {','.join(servers)} failed: {type(exc).__name__}: {exc}")


def _is_connectivity(exc: BaseException) -> bool:
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError

    # kafka-python 3 reports a failed bootstrap as KafkaTimeoutError (2.x: NoBrokersAvailable).
    return isinstance(exc, KafkaTimeoutError | KafkaConnectionError | NodeNotReadyError | RequestTimedOutError) \
        or type(exc).__name__ == "NoBrokersAvailable"


def _is_fenced(exc: BaseException) -> bool:
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    return isinstance(exc, ProducerFencedError | InvalidProducerEpochError) or "ProducerFenced" in str(exc)


def _insecure(servers: Sequence[str], what: str, timeout: float, exc: BaseException,
              client: KafkaClientSpec | None) -> SinkError | None:
    """A :class:`SinkError` naming the setting when ``exc`` was a security failure (a refused
    login, an untrusted certificate, a secret that does not resolve), else None."""
    from barrierflow.kafka_io.security import kafka_python_failure

    found = kafka_python_failure(client, ",".join(servers), exc, timeout)
    return None if found is None else SinkError(f"Kafka sink: {what} failed: {found}")


def _consumer(servers: Sequence[str], timeout: float, isolation_level: str,
              client: KafkaClientSpec | None = None) -> KafkaConsumer:
    """A group-less, non-committing consumer that never auto-creates topics (caller closes),
    with ``client``'s security and options."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    from barrierflow.kafka_io.errors import KafkaSecurityError
    from barrierflow.kafka_io.security import kafka_python_config

    timeout_ms = max(int(timeout * 1000), 1000)
    try:
        return KafkaConsumer(
            bootstrap_servers=list(servers),
            client_id="barrierflow-kafka-sink",
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation_level,
            auto_offset_reset="earliest",
            allow_auto_create_topics=False,
            bootstrap_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
            reconnect_backoff_max_ms=1000,
            metrics_enabled=False,
            **kafka_python_config(client, "consumer"),
        )
    except (KafkaError, KafkaSecurityError) as exc:
        insecure = _insecure(servers, "connecting a consumer", timeout, exc, client)
        if insecure is not None:
            raise insecure from None
        raise _unreachable(servers, "connecting a consumer", timeout, exc) from exc


def topic_partitions(servers: Sequence[str], topic: str, *, timeout: float = DEFAULT_TIMEOUT,
                     consumer: KafkaConsumer | None = None, client: KafkaClientSpec | None = None) -> list[int]:
    """The partition numbers of ``topic``, sorted.

    Raises:
        SinkError: the topic does not exist, or the brokers cannot be reached within ``timeout``.
    """
    from kafka.errors import KafkaError

    own = consumer is None
    reader = consumer if consumer is not None else _consumer(servers, timeout, "read_committed", client)
    try:
        numbers = reader.partitions_for_topic(topic)
    except KafkaError as exc:
        insecure = _insecure(servers, f"describing topic {topic!r}", timeout, exc, client)
        if insecure is not None:
            raise insecure from None
        if _is_connectivity(exc):
            raise _unreachable(servers, f"describing topic {topic!r}", timeout, exc) from exc
        raise SinkError(f"Kafka sink: describing topic {topic!r} on {','.join(servers)} failed: "
                        f"{type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            reader.close()
    if not numbers:
        raise SinkError(
            f"Kafka sink: topic {topic!r} does not exist on {','.join(servers)} (or this client may not "
            "describe it); create it (the sink never auto-creates topics), or fix 'topic' / "
            "'commit_marker_topic' in the pipeline spec"
        )
    return sorted(numbers)


def committed_markers(bootstrap_servers: str | Sequence[str], marker_topic: str, *, pipeline: str | None = None,
                      sink: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                      open_transaction_wait: float = 60.0,
                      client: KafkaClientSpec | None = None) -> dict[str, dict[str, Any]]:
    """The commit markers visible to a ``read_committed`` consumer, by transaction id (the
    last one of a transaction id when there are several); see :func:`marker_log`."""
    return {m["transaction_id"]: m for m in marker_log(bootstrap_servers, marker_topic, pipeline=pipeline,
                                                       sink=sink, timeout=timeout,
                                                       open_transaction_wait=open_transaction_wait, client=client)}


def marker_log(bootstrap_servers: str | Sequence[str], marker_topic: str, *, pipeline: str | None = None,
               sink: str | None = None, timeout: float = DEFAULT_TIMEOUT,
               open_transaction_wait: float = 60.0, client: KafkaClientSpec | None = None) -> list[dict[str, Any]]:
    """Every commit marker visible to a ``read_committed`` consumer, in log order per partition.

    Reads every partition of ``marker_topic`` from its beginning up to the high watermark
    taken when the call starts, so a marker acknowledged before the call is always seen once
    committed. Under ``read_committed`` the position stops at another producer's open
    transaction; the call waits up to ``timeout + open_transaction_wait`` seconds without
    progress for it to end. Markers are filtered to ``pipeline``/``sink`` when given; records
    that are not barrierflow markers are skipped. ``client``: the security settings and client
    options of the sink's ``client`` block.

    Needs a broker whose ``read_committed`` hides aborted records (Kafka does).

    Raises:
        SinkError: unknown topic, unreachable brokers, or no progress within the bound.
    """
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    servers = split_servers(bootstrap_servers)
    found: list[dict[str, Any]] = []
    committed = _consumer(servers, timeout, "read_committed", client)
    try:
        tps = [TopicPartition(marker_topic, p)
               for p in topic_partitions(servers, marker_topic, timeout=timeout, consumer=committed, client=client)]
        probe = _consumer(servers, timeout, "read_uncommitted", client)
        try:
            targets: dict[Any, int] = probe.end_offsets(tps)
        except KafkaError as exc:
            raise _unreachable(servers, f"reading the end offsets of {marker_topic!r}", timeout, exc) from exc
        finally:
            probe.close()
        behind = {tp for tp in tps if targets.get(tp, 0) > 0}
        if not behind:
            return found
        committed.assign(sorted(behind, key=lambda tp: tp.partition))
        committed.seek_to_beginning(*behind)
        progressed_at = time.monotonic()
        positions: dict[Any, int] = {}
        while behind:
            try:
                fetched = committed.poll(timeout_ms=200)
                for records in fetched.values():
                    for record in records:
                        marker = _parse_marker(record.key, record.value)
                        if marker is None:
                            continue
                        if (pipeline is None or marker.get("pipeline") == pipeline) and \
                                (sink is None or marker.get("sink") == sink):
                            found.append(marker)
                now = {tp: committed.position(tp, timeout_ms=int(timeout * 1000)) for tp in behind}
            except KafkaError as exc:
                raise _read_failed(servers, f"reading the marker topic {marker_topic!r}", timeout, exc) from exc
            for tp, position in now.items():
                if position is not None and position > positions.get(tp, -1):
                    positions[tp] = position
                    progressed_at = time.monotonic()
            behind = {tp for tp in behind if positions.get(tp, 0) < targets[tp]}
            if behind and time.monotonic() - progressed_at > timeout + open_transaction_wait:
                stuck = ", ".join(f"{tp.topic}:{tp.partition} at {positions.get(tp, 0)} < {targets[tp]}"
                                  for tp in sorted(behind, key=lambda tp: tp.partition))
                raise SinkError(
                    f"Kafka sink: reading the marker topic {marker_topic!r} on {','.join(servers)} made no "
                    f"progress for {timeout + open_transaction_wait:g}s ({stuck}). Likely an open transaction "
                    "of another producer holds the read_committed position (it ends at its "
                    "transaction_timeout_ms), or the broker became unreachable; the commit is retried later"
                )
    finally:
        committed.close()
    return found


def committed_records(bootstrap_servers: str | Sequence[str], topic: str, marker_topic: str, *,
                      pipeline: str | None = None, sink: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                      open_transaction_wait: float = 60.0,
                      client: KafkaClientSpec | None = None) -> list[ConsumerRecord]:
    """The records of ``topic`` that belong to a committed epoch, found through the sink's own
    commit markers, sorted by partition and offset.

    Each marker lists the offset range, per partition, of the records produced in its Kafka
    transaction. A record is returned once for every visible marker whose range holds it (and
    whose epoch and attempt its headers carry, so another producer's records in between are not), so
    records of an aborted transaction without a marker (a crash or an outage mid-commit) are
    never returned, and an epoch committed twice would show twice. The records are read with
    ``read_uncommitted`` (no wait for open transactions); the markers with ``read_committed``
    (:func:`marker_log`).

    On Kafka this equals what a ``read_committed`` consumer sees of the sink's output (the tests
    check both). It predates the tests' use of Apache Kafka: on an earlier test broker (tansu),
    whose ``read_committed`` also returned aborted records, it was the only exact reader of the
    output.

    Raises:
        SinkError: unreachable brokers, an unknown topic, no progress within ``timeout``, or a
            marker without offset ranges (written by a barrierflow older than this reader).
    """
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    servers = split_servers(bootstrap_servers)
    wanted: dict[int, list[tuple[int, int, bytes, bytes]]] = {}
    for marker in marker_log(servers, marker_topic, pipeline=pipeline, sink=sink, timeout=timeout,
                             open_transaction_wait=open_transaction_wait, client=client):
        if marker.get("topic", topic) != topic:
            continue
        ranges = marker.get("ranges")
        if not isinstance(ranges, dict):
            raise SinkError(
                f"Kafka sink: commit marker of transaction {marker.get('transaction_id')!r} in {marker_topic!r} has "
                "no offset ranges (written by an older barrierflow); read "
                f"{topic!r} with a read_committed consumer on a real Kafka instead")
        epoch, attempt = str(marker["checkpoint_id"]).encode(), str(marker["attempt"]).encode()
        for partition, (first, last) in ranges.items():
            wanted.setdefault(int(partition), []).append((int(first), int(last), epoch, attempt))
    if not wanted:
        return []
    consumer = _consumer(servers, timeout, "read_uncommitted", client)
    out: list[ConsumerRecord] = []
    try:
        tps = {p: TopicPartition(topic, p) for p in wanted}
        consumer.assign(list(tps.values()))
        for p, spans in wanted.items():
            consumer.seek(tps[p], min(span[0] for span in spans))
        until = {p: max(span[1] for span in spans) + 1 for p, spans in wanted.items()}
        behind = set(wanted)
        progressed_at = time.monotonic()
        while behind:
            try:
                fetched = consumer.poll(timeout_ms=200)
            except KafkaError as exc:
                raise _read_failed(servers, f"reading {topic!r}", timeout, exc) from exc
            for tp, records in fetched.items():
                if records:
                    progressed_at = time.monotonic()
                spans = wanted[tp.partition]
                for r in records:
                    headers = dict(r.headers or [])
                    out += [r for first, last, epoch, attempt in spans if first <= r.offset <= last
                            and headers.get(EPOCH_HEADER) == epoch and headers.get(ATTEMPT_HEADER) == attempt]
                if records and records[-1].offset + 1 >= until[tp.partition]:
                    behind.discard(tp.partition)
            if behind and time.monotonic() - progressed_at > timeout:
                raise SinkError(f"Kafka sink: reading {topic!r} partitions {sorted(behind)} on {','.join(servers)} "
                                f"made no progress for {timeout:g}s; the committed ranges end at "
                                f"{ {p: until[p] for p in sorted(behind)} }: was the topic recreated or truncated?")
            for p in list(behind):  # a position past the range's end (records compacted away)
                if consumer.position(tps[p]) >= until[p]:
                    behind.discard(p)
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def _parse_marker(key: bytes | None, value: bytes | None) -> dict[str, Any] | None:
    if key is None or value is None:
        return None
    try:
        marker = json.loads(value)
    except ValueError:
        return None
    if not isinstance(marker, dict) or marker.get("transaction_id") != key.decode("utf-8", "replace"):
        return None
    return marker


# --------------------------------------------------------------------------- the sink


class KafkaSink(TwoPhaseCommitSink):
    """Exactly-once Kafka output per epoch (write-ahead design, see the module docstring).

    Contracts: records of epoch n are produced, in one Kafka transaction with their commit
    marker, only by :meth:`commit` (after checkpoint n completed), so ``read_committed``
    consumers see them then and only then; a repeated :meth:`commit` of a committed epoch
    produces nothing (marker check; exact on a real Kafka); :meth:`abort` never touches staged
    data. Not thread-safe: the checkpoint coordinator calls it on one thread.
    """

    sink_type = "kafka"

    def __init__(self, *, spec: KafkaSinkSpec, staging_uri: str, timeout: float = DEFAULT_TIMEOUT,
                 **template_kwargs: Any) -> None:
        """``template_kwargs`` are those of :class:`TwoPhaseCommitSink` (name, pipeline, ledger,
        attempt, now); ``timeout`` bounds connecting and every broker request, in seconds.
        Nothing connects to the brokers until the first commit."""
        super().__init__(staging=StagedBatches(staging_uri), **template_kwargs)
        self.spec = spec
        self.servers = split_servers(spec.bootstrap_servers)
        if not self.servers:
            raise SinkError(f"Kafka sink {self.name!r}: bootstrap_servers is empty")
        self.timeout = timeout
        self.transactional_id = transactional_id_for(self.pipeline, self.name)
        self._producer: TransactionalProducer | None = None
        self._open_transaction: str | None = None
        self._topics_checked = False

    # -- the template's hooks -------------------------------------------------------------
    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        return {"batches": batches, "staging": self.staging.uri}

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        """Nothing at the broker: the staged batches are the durable, invisible epoch."""
        return {"topic": self.spec.topic, "commit_marker_topic": self.spec.commit_marker_topic,
                "transactional_id": self.transactional_id}

    def commit(self, txn: Transaction) -> None:
        """Produce the epoch and its marker in one Kafka transaction; a no-op if its marker is
        already committed.

        Raises:
            SinkError: brokers unreachable, unknown topic, staged batch missing or unreadable,
                producer fenced by another process with the same transactional id. Nothing of
                the epoch is visible then (the Kafka transaction is aborted or times out) and
                the staged batches stay, so the commit can be retried.
        """
        producer = self._transactional_producer()
        if not self._topics_checked:
            topic_partitions(self.servers, self.spec.topic, timeout=self.timeout, client=self.spec.client)
            self._topics_checked = True
        markers = committed_markers(self.servers, self.spec.commit_marker_topic, pipeline=self.pipeline,
                                    sink=self.name, timeout=self.timeout,
                                    open_transaction_wait=self.spec.transaction_timeout_ms / 1000,
                                    client=self.spec.client)
        if txn.transaction_id in markers:
            log.info("Kafka sink %s: transaction %s (epoch %d) already committed to %s; nothing to produce",
                     self.name, txn.transaction_id, txn.checkpoint_id, self.spec.topic)
            return
        try:
            records = self._produce_transaction(producer, txn)
        except Exception as exc:
            self._discard_producer(abort=True)
            if isinstance(exc, SinkError):
                raise
            raise self._error(f"committing transaction {txn.transaction_id} (epoch {txn.checkpoint_id})",
                              exc) from exc
        log.info("Kafka sink %s: committed transaction %s (epoch %d): %d records to %s", self.name,
                 txn.transaction_id, txn.checkpoint_id, records, self.spec.topic)
        mid_commit_crash_point(self.name, 1)

    def abort(self, txn: Transaction) -> None:
        """Nothing at the broker: no Kafka transaction outlives the process that opened it (a
        restarted driver's ``init_transactions`` aborts a crashed one's). Aborts this object's
        open producer transaction for ``txn``, if any. Never deletes staged data."""
        if self._open_transaction == txn.transaction_id and self._producer is not None:
            log.info("Kafka sink %s: aborting the open producer transaction of %s", self.name,
                     txn.transaction_id)
            self._discard_producer(abort=True)

    def close(self) -> None:
        """Close the producer (aborting an open transaction). The sink reconnects if used again."""
        self._discard_producer(abort=True)

    # -- producing ------------------------------------------------------------------------
    def _transactional_producer(self) -> TransactionalProducer:
        """The sink's transactional producer, connected and initialised (fencing zombies)."""
        if self._producer is not None:
            return self._producer
        from barrierflow.kafka_io.transactions import TransactionalProducer, TransactionalSettings

        settings = TransactionalSettings(servers=",".join(self.servers), transactional_id=self.transactional_id,
                                         transaction_timeout_ms=self.spec.transaction_timeout_ms,
                                         timeout=self.timeout, client_id=f"barrierflow-{self.pipeline}-{self.name}",
                                         client=self.spec.client)
        try:
            producer = TransactionalProducer(settings)
        except Exception as exc:
            raise self._error(f"initialising transactional id {self.transactional_id!r}", exc) from exc
        log.info("Kafka sink %s: transactional producer %r ready on %s", self.name, self.transactional_id,
                 ",".join(self.servers))
        self._producer = producer
        return producer

    def _produce_transaction(self, producer: TransactionalProducer, txn: Transaction) -> int:
        headers = [(EPOCH_HEADER, str(txn.checkpoint_id).encode()), (ATTEMPT_HEADER, str(txn.attempt).encode())]
        producer.begin()
        self._open_transaction = txn.transaction_id
        records = 0
        for batch in txn.batches:
            table = self.staging.read(batch)
            if table is None:
                continue
            key_column = self.spec.key_column
            if key_column is not None and key_column not in table.column_names:
                raise SinkError(
                    f"Kafka sink {self.name!r}: key_column {key_column!r} is not a column of staged batch {batch} "
                    f"(columns: {table.column_names}); fix key_column in the pipeline spec or the query"
                )
            for chunk in table.to_batches():
                for row in chunk.to_pylist():
                    key = encode_key(row[key_column]) if key_column is not None else None
                    producer.send(self.spec.topic, encode_value(row), key=key, headers=headers)
                    records += 1
        ranges = {str(p): [first, last] for p, (first, last) in sorted(producer.settle().items())}
        crash_point("kafka_before_marker", sink=self.name, transaction=txn.transaction_id)
        marker = {
            "transaction_id": txn.transaction_id,
            "pipeline": self.pipeline,
            "sink": self.name,
            "checkpoint_id": txn.checkpoint_id,
            "attempt": txn.attempt,
            "committed_by_attempt": self.attempt,
            "batches": txn.batches,
            "topic": self.spec.topic,
            "records": records,
            "ranges": ranges,
            "transactional_id": self.transactional_id,
            "produced_at": self.now().astimezone(UTC).isoformat(),
        }
        producer.send(self.spec.commit_marker_topic, json.dumps(marker, separators=(",", ":")).encode(),
                      key=txn.transaction_id.encode(), headers=headers)
        producer.settle()
        crash_point("kafka_after_marker", sink=self.name, transaction=txn.transaction_id)
        producer.commit()
        self._open_transaction = None
        return records

    def _discard_producer(self, *, abort: bool) -> None:
        """Abort the open transaction (best effort) and close the producer; the next commit
        builds a new one, whose ``init_transactions`` also aborts anything left behind."""
        producer, self._producer = self._producer, None
        open_txn, self._open_transaction = self._open_transaction, None
        if producer is None:
            return
        if abort and open_txn is not None:
            try:
                producer.abort()
            except Exception as exc:
                log.warning("Kafka sink %s: aborting the producer transaction of %s failed (%s: %s); it ends "
                            "when the transactional id is next initialised or after transaction_timeout_ms",
                            self.name, open_txn, type(exc).__name__, exc)
        producer.close()

    def _error(self, what: str, exc: BaseException) -> SinkError:
        from barrierflow.kafka_io.errors import KafkaSecurityError
        from barrierflow.kafka_io.transactions import TransactionError

        if isinstance(exc, KafkaSecurityError):
            return SinkError(f"Kafka sink {self.name!r}: {what} failed: {exc}. The epoch stays staged and "
                             "pre-committed; it is committed once the setting is fixed (the next run or a restore)")
        kind = exc.kind if isinstance(exc, TransactionError) else None
        if kind == "fenced" or (kind is None and _is_fenced(exc)):
            return SinkError(
                f"Kafka sink {self.name!r}: {what} failed: the producer was fenced: another process "
                f"initialised transactional id {self.transactional_id!r} on {','.join(self.servers)} (a newer "
                "driver of this pipeline, or a reconcile run). Nothing of this attempt's transaction becomes "
                "visible; make sure only one driver runs the pipeline. The next commit starts a new producer."
            )
        if kind == "unreachable" or (kind is None and _is_connectivity(exc)):
            err = _unreachable(self.servers, what, self.timeout, exc)
            return SinkError(f"Kafka sink {self.name!r}: {str(err).removeprefix('Kafka sink: ')}")
        return SinkError(f"Kafka sink {self.name!r}: {what} on {','.join(self.servers)} failed: "
                         f"{type(exc).__name__}: {exc}")
