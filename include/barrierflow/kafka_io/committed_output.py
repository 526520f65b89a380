"""What a Kafka sink committed, read back with kafka-python.

The exactly-once Kafka sink (:mod:`barrierflow.sinks.kafka`) produces each epoch's records and
one commit marker in one Kafka transaction; this module reads them back with the other client
(a second client reading what the first wrote is what the exactly-once checks want):

* :func:`marker_log` / :func:`committed_markers`: the commit markers a ``read_committed``
  consumer sees; :class:`MarkerReader` reads them incrementally (the sink's idempotence check
  before it produces an epoch);
* :func:`committed_records`: the records of the committed epochs, found through their markers;
* :func:`read_committed_topic`: every record a ``read_committed`` consumer sees of a topic
  (chaos's check of a scratch output);
* :func:`partition_numbers`: the partitions of a topic, an error naming the topic when it does
  not exist (the sink never auto-creates topics).

Every broker call is bounded by ``timeout`` seconds; failures are a
:class:`~barrierflow.errors.SinkError` naming the servers and what to check (a refused login or
an untrusted certificate names the setting, :mod:`barrierflow.kafka_io.security`), except in
:func:`read_committed_topic`, whose caller names the output it reads (a
:class:`~barrierflow.kafka_io.errors.KafkaIOError`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError
from barrierflow.kafka_io.errors import is_connectivity

if TYPE_CHECKING:
    from kafka import KafkaConsumer
    from kafka.consumer.fetcher import ConsumerRecord

    from barrierflow.spec.kafka_params import KafkaClient

#: Default bound, in seconds, on connecting to the brokers and on each broker request.
DEFAULT_TIMEOUT = 10.0
#: The headers the sink puts on every record of an epoch: its checkpoint id and the attempt
#: that opened the transaction (what :func:`committed_records` matches records with).
EPOCH_HEADER = "bf-epoch"
ATTEMPT_HEADER = "bf-attempt"


def split_servers(bootstrap_servers: str | Sequence[str]) -> list[str]:
    """The ``host:port`` list of a comma-separated string (or list)."""
    items = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    return [s.strip() for s in items if s.strip()]


def unreachable_error(servers: Sequence[str], what: str, timeout: float, exc: BaseException) -> SinkError:
    return SinkError(
        f"Kafka sink: {what} failed: cannot reach the brokers {','.join(servers)} within {timeout:g}s "
        f"({type(exc).__name__}: {exc}). Check that the brokers are running and listening on those "
        "addresses, that bootstrap_servers is right, that the advertised listeners resolve and are "
        "reachable from the driver, and that no firewall blocks the port. The epoch stays in the write-ahead log and "
        "pre-committed; it is committed by the next completed checkpoint or by a restore."
    )


def _read_failed(servers: Sequence[str], what: str, timeout: float, exc: BaseException) -> SinkError:
    """The error for a failed read of a topic: unreachable brokers, or what the broker said."""
    if is_connectivity(exc):
        return unreachable_error(servers, what, timeout, exc)
    return SinkError(f"Kafka sink: {what} on {','.join(servers)} failed: {type(exc).__name__}: {exc}")


def _insecure(servers: Sequence[str], what: str, timeout: float, exc: BaseException,
              client: KafkaClient | None) -> SinkError | None:
    """A :class:`SinkError` naming the setting when ``exc`` was a security failure (a refused
    login, an untrusted certificate, a secret that does not resolve), else None."""
    from barrierflow.kafka_io.security import kafka_python_failure

    found = kafka_python_failure(client, ",".join(servers), exc, timeout)
    return None if found is None else SinkError(f"Kafka sink: {what} failed: {found}")


def _consumer(servers: Sequence[str], timeout: float, isolation_level: str,
              client: KafkaClient | None = None) -> KafkaConsumer:
    """A group-less, non-committing consumer that never auto-creates topics (caller closes),
    with ``client``'s security and options."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    from barrierflow.kafka_io.errors import KafkaSecurityError
    from barrierflow.kafka_io.security import connect_kafka_python, kafka_python_config

    timeout_ms = max(int(timeout * 1000), 1000)
    try:
        settings = kafka_python_config(client, "consumer")
        return connect_kafka_python(lambda bootstrap_ms: KafkaConsumer(
            bootstrap_servers=list(servers),
            client_id="barrierflow-kafka-sink",
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation_level,
            auto_offset_reset="earliest",
            allow_auto_create_topics=False,
            bootstrap_timeout_ms=bootstrap_ms,
            request_timeout_ms=timeout_ms,
            reconnect_backoff_max_ms=1000,
            metrics_enabled=False,
            **settings,
        ), client, ",".join(servers), timeout)
    except (KafkaError, KafkaSecurityError) as exc:
        insecure = _insecure(servers, "connecting a consumer", timeout, exc, client)
        if insecure is not None:
            raise insecure from None
        raise unreachable_error(servers, "connecting a consumer", timeout, exc) from exc


def partition_numbers(servers: Sequence[str], topic: str, *, timeout: float = DEFAULT_TIMEOUT,
                     consumer: KafkaConsumer | None = None, client: KafkaClient | None = None) -> list[int]:
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
        if is_connectivity(exc):
            raise unreachable_error(servers, f"describing topic {topic!r}", timeout, exc) from exc
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
                      client: KafkaClient | None = None) -> dict[str, dict[str, Any]]:
    """The commit markers visible to a ``read_committed`` consumer, by transaction id (the
    last one of a transaction id when there are several); see :func:`marker_log`."""
    return {m["transaction_id"]: m for m in marker_log(bootstrap_servers, marker_topic, pipeline=pipeline,
                                                       sink=sink, timeout=timeout,
                                                       open_transaction_wait=open_transaction_wait, client=client)}


def marker_log(bootstrap_servers: str | Sequence[str], marker_topic: str, *, pipeline: str | None = None,
               sink: str | None = None, timeout: float = DEFAULT_TIMEOUT,
               open_transaction_wait: float = 60.0, client: KafkaClient | None = None) -> list[dict[str, Any]]:
    """Every commit marker visible to a ``read_committed`` consumer, in log order per partition:
    one :meth:`MarkerReader.read_new` of a new reader (see there).

    Raises:
        SinkError: unknown topic, unreachable brokers, or no progress within the bound.
    """
    reader = MarkerReader(bootstrap_servers, marker_topic, pipeline=pipeline, sink=sink, timeout=timeout,
                          open_transaction_wait=open_transaction_wait, client=client)
    try:
        return reader.read_new()
    finally:
        reader.close()


class MarkerReader:
    """Reads a marker topic's commit markers incrementally: each :meth:`read_new` returns the
    markers that became readable since the previous call (every marker at the first), so a
    sink that checks the markers before each commit reads each marker once in its lifetime
    instead of the whole topic at every commit (which grows with every checkpoint).

    Contract of :meth:`read_new`: reads every partition of the topic (partitions added since
    the last call from their beginning) up to the high watermark taken when the call starts, so
    a marker acknowledged before the call is always returned once committed, by this call or
    an earlier one. Under ``read_committed`` the position stops at another producer's open
    transaction; the call waits up to ``timeout + open_transaction_wait`` seconds without
    progress for it to end. Markers are filtered to ``pipeline``/``sink`` when given; records
    that are not barrierflow markers are skipped. ``client``: the security settings and client
    options of the sink's ``client`` block. A call that fails leaves the reader as new (the next
    call reads from the beginning again), so no marker is ever skipped. Needs a broker whose
    ``read_committed`` hides aborted records (Kafka does). :meth:`close` closes its consumers.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], marker_topic: str, *, pipeline: str | None = None,
                 sink: str | None = None, timeout: float = DEFAULT_TIMEOUT, open_transaction_wait: float = 60.0,
                 client: KafkaClient | None = None) -> None:
        self.servers = split_servers(bootstrap_servers)
        self.marker_topic = marker_topic
        self.pipeline, self.sink = pipeline, sink
        self.timeout, self.open_transaction_wait, self.client = timeout, open_transaction_wait, client
        #: Marker-topic records read so far (markers of any pipeline and other records alike).
        self.records_read = 0
        self._committed: KafkaConsumer | None = None
        self._probe: KafkaConsumer | None = None
        self._positions: dict[Any, int] = {}

    def read_new(self) -> list[dict[str, Any]]:
        """The markers readable since the previous call (see the class contract).

        Raises:
            SinkError: unknown topic, unreachable brokers, or no progress within the bound.
        """
        try:
            return self._read_new()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the consumers; the next :meth:`read_new` starts from the beginning."""
        for consumer in (self._committed, self._probe):
            if consumer is not None:
                consumer.close()
        self._committed = self._probe = None
        self._positions = {}

    def _read_new(self) -> list[dict[str, Any]]:
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        servers, timeout = self.servers, self.timeout
        if self._committed is None:
            self._committed = _consumer(servers, timeout, "read_committed", self.client)
        if self._probe is None:
            self._probe = _consumer(servers, timeout, "read_uncommitted", self.client)
        committed = self._committed
        tps = [TopicPartition(self.marker_topic, p)
               for p in partition_numbers(servers, self.marker_topic, timeout=timeout, consumer=committed,
                                          client=self.client)]
        try:
            targets: dict[Any, int] = self._probe.end_offsets(tps)
        except KafkaError as exc:
            raise unreachable_error(servers, f"reading the end offsets of {self.marker_topic!r}", timeout,
                                    exc) from exc
        found: list[dict[str, Any]] = []
        positions = self._positions
        behind = {tp for tp in tps if targets.get(tp, 0) > positions.get(tp, 0)}
        if not behind:
            return found
        new = [tp for tp in tps if tp not in positions]
        if new:  # a new assignment: partitions read before go on from where they stopped
            committed.assign(sorted({*positions, *tps}, key=lambda tp: tp.partition))
            committed.seek_to_beginning(*new)
            for tp, position in positions.items():
                committed.seek(tp, position)
        progressed_at = time.monotonic()
        while behind:
            try:
                fetched = committed.poll(timeout_ms=200)
                for records in fetched.values():
                    for record in records:
                        self.records_read += 1
                        marker = _parse_marker(record.key, record.value)
                        if marker is None:
                            continue
                        if (self.pipeline is None or marker.get("pipeline") == self.pipeline) and \
                                (self.sink is None or marker.get("sink") == self.sink):
                            found.append(marker)
                now = {tp: committed.position(tp, timeout_ms=int(timeout * 1000)) for tp in tps}
            except KafkaError as exc:
                raise _read_failed(servers, f"reading the marker topic {self.marker_topic!r}", timeout, exc) from exc
            for tp, position in now.items():
                if position is not None and position > positions.get(tp, -1):
                    positions[tp] = position
                    progressed_at = time.monotonic()
            behind = {tp for tp in behind if positions.get(tp, 0) < targets[tp]}
            if behind and time.monotonic() - progressed_at > timeout + self.open_transaction_wait:
                stuck = ", ".join(f"{tp.topic}:{tp.partition} at {positions.get(tp, 0)} < {targets[tp]}"
                                  for tp in sorted(behind, key=lambda tp: tp.partition))
                raise SinkError(
                    f"Kafka sink: reading the marker topic {self.marker_topic!r} on {','.join(servers)} made no "
                    f"progress for {timeout + self.open_transaction_wait:g}s ({stuck}). Likely an open "
                    "transaction of another producer holds the read_committed position (it ends at its "
                    "transaction_timeout_ms), or the broker became unreachable; the commit is retried later"
                )
        return found


def committed_records(bootstrap_servers: str | Sequence[str], topic: str, marker_topic: str, *,
                      pipeline: str | None = None, sink: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                      open_transaction_wait: float = 60.0,
                      client: KafkaClient | None = None) -> list[ConsumerRecord]:
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
    check both); it does not depend on the broker's ``read_committed`` being right, so it is
    exact on any Kafka-protocol broker.

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


def read_committed_topic(servers: str, topic: str, client: KafkaClient | None = None, *,
                         stall: float = 60.0) -> Iterator[ConsumerRecord]:
    """Every record of ``topic`` a ``read_committed`` consumer sees, from each partition's
    beginning up to its last stable offset taken when the read starts (kafka-python: the sink
    produces with confluent-kafka, so a check of its output does not share a client with it);
    ``client``: the sink's ``client`` settings. The consumer is closed when the iteration ends.

    Raises:
        KafkaIOError: the topic does not exist, or the read made no progress for ``stall``
            seconds (the message names the positions and end offsets of the partitions behind).
        kafka.errors.KafkaError: any other failure of the client, as it is.
    """
    from kafka import KafkaConsumer, TopicPartition

    from barrierflow.kafka_io.errors import KafkaIOError
    from barrierflow.kafka_io.security import kafka_python_config

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","), group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             request_timeout_ms=30_000, **kafka_python_config(client, "consumer"))
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        if not partitions:
            raise KafkaIOError(f"topic {topic} does not exist on {servers}", retriable=False)
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)  # under read_committed: the last stable offsets
        behind = {tp for tp in tps if ends[tp] > 0}
        idle_since = None
        while behind:
            fetched = consumer.poll(timeout_ms=1000)
            for records in fetched.values():
                yield from records
            behind = {tp for tp in behind if consumer.position(tp) < ends[tp]}
            if fetched:
                idle_since = None
            elif behind:
                idle_since = idle_since or datetime.now(UTC)
                if (datetime.now(UTC) - idle_since).total_seconds() > stall:
                    stuck = {f"{tp.topic}:{tp.partition}": (consumer.position(tp), ends[tp]) for tp in behind}
                    raise KafkaIOError(f"reading topic {topic} on {servers} made no progress for {stall:g}s "
                                       f"(position, end offset): {stuck}")
    finally:
        consumer.close()
