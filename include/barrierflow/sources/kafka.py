"""The barrier-aware Kafka source (``format("barrierflow_kafka")``).

Clients (:mod:`barrierflow.kafka_io` says why): offset ranges are read with confluent-kafka
(:class:`~barrierflow.kafka_io.consumer.RangeReader`: one per executor Python worker, reused
across ranges and micro-batches; the driver has its own for barrier scans and event-time
peeks); topic metadata and the begin and end offsets are asked with kafka-python (a few
requests per micro-batch, on the driver).

Offsets. A source partition is the string ``"<topic>:<partition>"`` (Kafka topic names cannot
contain ``:``); the offset JSON is the common barrierflow format of
:mod:`barrierflow.barriers.offsets`, e.g. ``{"partitions": {"orders:0": 120, "orders:1": 98},
"barrier": 3}``, where each value is the Kafka offset of the next record to read (exclusive
end of the batch). A batch ``[start, end)`` of a partition holds every record with
``start <= offset < end`` that a ``read_committed`` consumer sees; with transactional
producers the offsets have gaps (commit/abort markers, aborted records), so a range may hold
fewer than ``end - start`` rows.

Barriers. ``latestOffset`` asks the broker for the end offsets (the last stable offset under
``read_committed``, so no batch is planned into an open transaction) of every partition of
the spec's topics and hands them (through :class:`~barrierflow.sources.planning.SourcePlanner`)
to the pure :func:`~barrierflow.barriers.planner.plan_batch`
with the barrier request and the hold flag of the :class:`ControlChannel`. A batch whose
plan carries a newer barrier ``n`` closes epoch ``n``; the decision is written into Spark's
offset log, so a replayed batch replays the same barrier at the same offsets.

Determinism. ``read`` re-reads a range from the broker, so the same ``[start, end)`` always
yields the same rows (and the same dead letters), as long as retention has not deleted the
records (then it fails with a :class:`SourceError` naming the range).

Partitions. ``initialOffset`` resolves ``starting_offsets``: ``earliest`` (each partition's
log start), ``latest`` (each partition's end) or explicit ``{topic: {partition: offset}}``
(``-2`` = earliest, ``-1`` = latest, like Spark; partitions not named start at earliest).
Partitions that appear later (topic metadata is refreshed at least every 30 s) start at
offset 0, i.e. earliest.

Formats. ``raw`` emits the Kafka record as it is (:data:`RAW_SCHEMA`). ``json`` decodes the
value as a JSON object and emits ``topic, partition, offset, timestamp`` plus the spec's
``json_fields``; a record whose value is not a JSON object, lacks a field, holds ``null`` or a
value of the wrong type goes to the dead-letter output
(:mod:`barrierflow.sources.dead_letter`) and is not emitted. JSON field types: ``string``
(a JSON string), ``long`` (an integer), ``double`` (a number), ``boolean`` (``true``/``false``)
and ``timestamp`` (an ISO-8601 string, UTC when it has no offset, or a number of epoch
milliseconds).

Failures never hang: every broker call is bounded by ``poll_timeout`` and a broker that cannot
be reached gives a :class:`SourceError` naming the bootstrap servers and what to check.

Event time and watermark alignment. Executors record the newest event time of every range
they read (:mod:`barrierflow.sources.event_times`) for manifests and reports. With
``event_time.alignment`` the driver also peeks at single records (its own consumer, cached):
a partition's place in event time is the event time of its next record (of its last one once
it has read everything), and the batch planner caps a partition at the last record not newer
than the alignment ceiling (a binary search over such peeks), exactly as it does with the
generator's computed event times. This assumes event times grow with offsets within a
partition.

Security. The spec's ``client`` block (SASL, TLS, allowed client options) reaches every client
the source builds, the executors' range readers included, through
:mod:`barrierflow.kafka_io.security`; secrets travel as references (``env:VAR``), resolved by
each process that builds a client. A refused login or an untrusted certificate is a
:class:`SourceError` naming the brokers and the setting, raised at once (not ridden out as an
outage).

Outages. Brokers that stop answering for a while (a restart, a network blip) are ridden out
for ``unavailable_timeout`` seconds (default 120): ``latestOffset`` offers no new data while
they do not answer (Spark plans no batch; a checkpoint due meanwhile cannot close its epoch
and counts against ``checkpoint.tolerable_failed_checkpoints`` if it times out), and reading
a planned range waits up to ``poll_timeout + unavailable_timeout`` for progress. Nothing is
skipped: planning resumes from the same offsets once the brokers answer. Past the bound the
query fails with a :class:`SourceError` naming the brokers, and a restart resumes from the
last checkpoint.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.errors import SourceError, SourceUnavailableError, UserInputError
from barrierflow.sources.json_columns import MAX_EPOCH_MS, arrow_type, decode_columns, iso_timestamp_us
from barrierflow.sources.planning import PlanningOptions, RowMeasure, SourcePlanner
from barrierflow.spec.models import KAFKA_METADATA_COLUMNS, KafkaSourceSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.fetcher import ConsumerRecord

    from barrierflow.kafka_io.consumer import Columns, ConsumerSettings, HeaderFilter, RangeReader

log = logging.getLogger(__name__)

RAW_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
    "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
#: The columns every format starts with.
METADATA_COLUMNS = KAFKA_METADATA_COLUMNS
#: Spark SQL type of each ``json_fields`` type.
JSON_SPARK_TYPES = {
    "string": "STRING",
    "long": "BIGINT",
    "double": "DOUBLE",
    "timestamp": "TIMESTAMP",
    "boolean": "BOOLEAN",
}
#: Rows per Arrow record batch yielded by ``read``.
CHUNK_ROWS = 10_000
#: Offsets the driver reads past one that holds no record (a transaction marker) when it peeks at event times.
PEEK_RECORDS = 16
#: Event times of single records the driver remembers (cleared when full).
EVENT_TIME_CACHE = 100_000
#: How often the driver's consumer refreshes topic metadata (new partitions), in ms.
METADATA_MAX_AGE_MS = 30_000
_EARLIEST, _LATEST = -2, -1
_INT64 = (-(2**63), 2**63 - 1)

_T = TypeVar("_T")


# --------------------------------------------------------------------------- partitions ids


def partition_id(topic: str, partition: int) -> str:
    """The source-partition key of ``topic``/``partition`` in the offset JSON."""
    return f"{topic}:{partition}"


def parse_partition_id(key: str) -> tuple[str, int]:
    """Inverse of :func:`partition_id`; raises :class:`SourceError` for a malformed key."""
    topic, sep, number = key.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise SourceError(
            f"not a Kafka source partition {key!r} (expected 'topic:partition'); was this Spark "
            "checkpoint written by another source? Use a fresh work_dir."
        )
    return topic, int(number)


# --------------------------------------------------------------------------- schema


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def schema_for(spec: KafkaSourceSpec) -> str:
    """The Spark DDL schema of the rows the source emits for ``spec``.

    Raises:
        UserInputError: a ``json_fields`` name collides with a metadata column.
    """
    if spec.format == "raw":
        return RAW_SCHEMA
    clash = sorted(set(spec.json_fields) & set(METADATA_COLUMNS))
    if clash:
        raise UserInputError(
            f"Kafka source {spec.name!r}: json_fields {clash} collide with the metadata columns "
            f"{list(METADATA_COLUMNS)}; rename them in a transformation instead of in json_fields"
        )
    fields = ", ".join(f"{_quote(n)} {JSON_SPARK_TYPES[t]}" for n, t in spec.json_fields.items())
    return "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, " + fields


# --------------------------------------------------------------------------- consumers


def bootstrap_servers(spec: KafkaSourceSpec) -> list[str]:
    """The ``host:port`` list of ``spec.bootstrap_servers`` (comma separated)."""
    servers = [s.strip() for s in spec.bootstrap_servers.split(",") if s.strip()]
    if not servers:
        raise UserInputError(f"Kafka source {spec.name!r}: bootstrap_servers is empty")
    return servers


def consumer_config(spec: KafkaSourceSpec) -> dict[str, Any]:
    """kafka-python consumer settings: no group, no auto commit, ``read_committed``, bounded.

    ``bootstrap_timeout_ms`` and ``request_timeout_ms`` follow ``poll_timeout`` so a dead
    broker fails fast; ``auto_offset_reset='none'`` makes a deleted range an error instead of
    a silent jump; topics are never auto-created by reading them. The spec's ``client`` block
    adds security and client options (:func:`~barrierflow.kafka_io.security.kafka_python_config`):
    the result holds resolved secrets, for the client constructor only.

    Raises:
        KafkaSecurityError: a secret reference or TLS file of ``client`` does not resolve here.
    """
    from barrierflow.kafka_io.security import kafka_python_config

    timeout_ms = max(int(spec.poll_timeout * 1000), 1000)
    return {
        "bootstrap_servers": bootstrap_servers(spec),
        "client_id": f"barrierflow-{spec.name}",
        "group_id": None,
        "enable_auto_commit": False,
        "isolation_level": "read_committed",
        "auto_offset_reset": "none",
        "allow_auto_create_topics": False,
        "bootstrap_timeout_ms": timeout_ms,
        "request_timeout_ms": timeout_ms,
        "reconnect_backoff_max_ms": 1000,
        "metadata_max_age_ms": METADATA_MAX_AGE_MS,
        "max_poll_records": CHUNK_ROWS,
        "metrics_enabled": False,
        **kafka_python_config(spec.client, "consumer"),
    }


def _unreachable(spec: KafkaSourceSpec, what: str, exc: BaseException) -> SourceUnavailableError:
    return SourceUnavailableError(
        f"Kafka source {spec.name!r}: {what} failed: cannot reach the brokers "
        f"{','.join(bootstrap_servers(spec))} within poll_timeout={spec.poll_timeout:g}s "
        f"({type(exc).__name__}: {exc}). Check that the brokers are running and listening on "
        "those addresses, that bootstrap_servers is right, that the brokers' advertised "
        "listeners resolve and are reachable from this host (driver and executors), and "
        "that no firewall blocks the port."
    )


def _insecure(spec: KafkaSourceSpec, what: str, exc: BaseException) -> SourceError | None:
    """A :class:`SourceError` (not one to ride out) when ``exc`` of a kafka-python call was a
    security failure (a refused login, an untrusted certificate: :mod:`barrierflow.kafka_io.security`)."""
    from barrierflow.kafka_io.security import kafka_python_failure

    found = kafka_python_failure(spec.client, ",".join(bootstrap_servers(spec)), exc, spec.poll_timeout)
    if found is None:
        return None
    return SourceError(f"Kafka source {spec.name!r}: {what} failed: {found}")


def open_consumer(spec: KafkaSourceSpec) -> KafkaConsumer:
    """A connected consumer for ``spec``; the caller closes it.

    Raises:
        SourceError: the brokers refused the client's credentials or certificate (or it theirs),
            or a secret of its ``client`` block does not resolve: at once, naming the setting.
        SourceUnavailableError: the brokers cannot be reached within ``poll_timeout``.
    """
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    from barrierflow.kafka_io.errors import KafkaSecurityError

    try:
        return KafkaConsumer(**consumer_config(spec))
    except KafkaSecurityError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: connecting failed: {exc}") from None
    except KafkaError as exc:
        insecure = _insecure(spec, "connecting", exc)
        if insecure is not None:
            raise insecure from None
        raise _unreachable(spec, "connecting", exc) from exc


def _call(spec: KafkaSourceSpec, what: str, fn: Callable[[], _T]) -> _T:
    """Run a broker call, turning kafka-python's errors into a :class:`SourceError`."""
    from kafka.errors import (
        KafkaConnectionError,
        KafkaError,
        KafkaTimeoutError,
        NodeNotReadyError,
        RequestTimedOutError,
    )

    try:
        return fn()
    except (KafkaTimeoutError, KafkaConnectionError, NodeNotReadyError, RequestTimedOutError) as exc:
        insecure = _insecure(spec, what, exc)
        if insecure is not None:
            raise insecure from None
        raise _unreachable(spec, what, exc) from exc
    except KafkaError as exc:
        insecure = _insecure(spec, what, exc)
        if insecure is not None:
            raise insecure from None
        raise SourceError(f"Kafka source {spec.name!r}: {what} failed: {type(exc).__name__}: {exc}") from exc


def topic_partitions(spec: KafkaSourceSpec, consumer: KafkaConsumer) -> list[TopicPartition]:
    """Every partition of the spec's topics, sorted.

    Raises:
        SourceError: a topic does not exist (or the brokers cannot be reached).
    """
    from kafka import TopicPartition

    out: list[TopicPartition] = []
    for topic in spec.topics:
        numbers = _call(spec, f"listing the partitions of topic {topic!r}",
                        functools.partial(consumer.partitions_for_topic, topic))
        if not numbers:
            raise SourceError(
                f"Kafka source {spec.name!r}: topic {topic!r} does not exist on "
                f"{','.join(bootstrap_servers(spec))} (or this client may not describe it); "
                "create it, or fix 'topics' in the pipeline spec"
            )
        out += [TopicPartition(topic, p) for p in sorted(numbers)]
    return out


def _offsets_now(spec: KafkaSourceSpec, what: str, fetch: Callable[..., Any]) -> dict[str, int]:
    """``fetch(partitions, timeout_ms=...)`` (a consumer's ``end_offsets`` or ``beginning_offsets``)
    over every partition of the spec's topics, keyed by :func:`partition_id`."""
    consumer = open_consumer(spec)
    try:
        partitions = topic_partitions(spec, consumer)
        timeout_ms = int(spec.poll_timeout * 1000)
        found = _call(spec, f"fetching the {what} offsets of {spec.topics}",
                      lambda: fetch(consumer)(partitions, timeout_ms=timeout_ms))
        return {partition_id(tp.topic, tp.partition): int(found[tp]) for tp in partitions}
    finally:
        consumer.close()


def end_offsets(spec: KafkaSourceSpec) -> dict[str, int]:
    """The end offset (the last stable offset, as a ``read_committed`` reader sees it) of every
    partition of the spec's topics now: where a bounded run (``--until-exhausted``) stops.

    Raises:
        SourceError: a topic does not exist, or the brokers cannot be reached within ``poll_timeout``.
    """
    return _offsets_now(spec, "end", lambda consumer: consumer.end_offsets)


def beginning_offsets(spec: KafkaSourceSpec) -> dict[str, int]:
    """The log start offset of every partition of the spec's topics now (where ``earliest``
    starts), keyed like :func:`end_offsets`.

    Raises:
        SourceError: a topic does not exist, or the brokers cannot be reached within ``poll_timeout``.
    """
    return _offsets_now(spec, "beginning", lambda consumer: consumer.beginning_offsets)


# --------------------------------------------------------------------------- reading a range


def reader_settings(spec: KafkaSourceSpec) -> ConsumerSettings:
    """How ranges of ``spec``'s topics are read (confluent-kafka; see :mod:`barrierflow.kafka_io`)."""
    from barrierflow.kafka_io.consumer import ConsumerSettings

    return ConsumerSettings(servers=",".join(bootstrap_servers(spec)), timeout=max(spec.poll_timeout, 1.0),
                            client_id=f"barrierflow-{spec.name}", client=spec.client)


def read_range(spec: KafkaSourceSpec, topic: str, partition: int, start: int, end: int,
               reader: RangeReader | None = None) -> Iterator[Any]:
    """The ``read_committed`` records of ``topic``/``partition`` with ``start <= offset < end``
    (:class:`~barrierflow.kafka_io.consumer.Record` values, with the attribute names of
    kafka-python's ``ConsumerRecord``).

    Read with ``reader`` (the driver's), else with this process's shared reader
    (:func:`~barrierflow.kafka_io.consumer.shared_reader`: an executor's Python worker reuses
    one consumer across ranges and micro-batches). Reading stops when the position passes
    ``end`` (not after ``end - start`` records: transaction markers leave gaps). Raises
    :class:`SourceError` when the position makes no progress for ``poll_timeout +
    unavailable_timeout`` seconds (an outage is waited out) or when the range was deleted by
    retention.
    """
    return _read(spec, topic, partition, start, end, reader, columns=False)


def read_range_columns(spec: KafkaSourceSpec, topic: str, partition: int, start: int, end: int,
                       reader: RangeReader | None = None, *, drop: HeaderFilter | None = None) -> Iterator[Columns]:
    """The records of :func:`read_range` as :class:`~barrierflow.kafka_io.consumer.Columns`
    (offsets, timestamps, values), a chunk per fetch, without those ``drop`` picks by their
    headers (:meth:`~barrierflow.kafka_io.consumer.RangeReader.read_columns`); same reader and errors."""
    return _read(spec, topic, partition, start, end, reader, columns=True, drop=drop)


def read_range_marked(spec: KafkaSourceSpec, topic: str, partition: int, start: int, end: int,
                      header: str | frozenset[str], reader: RangeReader | None = None) -> Iterator[tuple[int, Any]]:
    """``(offset, headers)`` of the records of :func:`read_range` carrying a header named
    ``header`` (or one of several names: the channel source's scan for barrier and row-batch
    records); same reader and errors."""
    return _read(spec, topic, partition, start, end, reader, columns=False, marked=header)


def _read(spec: KafkaSourceSpec, topic: str, partition: int, start: int, end: int, reader: RangeReader | None,
          *, columns: bool, marked: str | frozenset[str] | None = None,
          drop: HeaderFilter | None = None) -> Iterator[Any]:
    from barrierflow.kafka_io import KafkaIOError, KafkaSecurityError
    from barrierflow.kafka_io.consumer import RangeGone, ReadStalled, shared_reader

    where = f"{topic}:{partition} offsets [{start}, {end})"
    if end <= start:
        return
    stall = spec.poll_timeout + spec.unavailable_timeout
    try:
        chosen = reader or shared_reader(reader_settings(spec))
    except KafkaSecurityError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where}: {exc}") from None
    except KafkaIOError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where} from {','.join(bootstrap_servers(spec))} "
                          f"failed: {exc}") from exc
    try:
        if marked is not None:
            yield from chosen.read_marked(topic, partition, start, end, marked, stall=stall)
        elif columns:
            yield from chosen.read_columns(topic, partition, start, end, stall=stall, drop=drop)
        else:
            yield from chosen.read(topic, partition, start, end, stall=stall)
    except RangeGone as exc:
        raise SourceError(
            f"Kafka source {spec.name!r}: {where} no longer exist on the broker (deleted by "
            "retention, or the topic was recreated). The checkpoint points at data that is "
            f"gone: restore from a newer checkpoint, or raise the topic's retention. ({exc})"
        ) from exc
    except ReadStalled as exc:
        raise SourceError(
            f"Kafka source {spec.name!r}: reading {where} from "
            f"{','.join(bootstrap_servers(spec))} made no progress for "
            f"poll_timeout + unavailable_timeout = {stall:g}s. Likely causes: the broker is unreachable, the "
            "partition's records up to the planned end were deleted or the topic recreated, "
            "or a transaction is still open (read_committed waits for it). Check the broker "
            f"and the topic, or raise unavailable_timeout. ({exc})"
        ) from exc
    except KafkaSecurityError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where}: {exc}") from None
    except KafkaIOError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where} from "
                          f"{','.join(bootstrap_servers(spec))} failed: {exc}") from exc


# --------------------------------------------------------------------------- decoding


def _timestamp_us(ms: int | None) -> int | None:
    return None if ms is None or ms < 0 else ms * 1000


def timestamps_us(millis: list[int | None]) -> pa.Array:
    """The ``timestamp`` column of records' epoch-ms timestamps (None or negative: null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = pa.array(millis, type=pa.int64())
    if len(array) and (array.null_count or pc.min(array).as_py() < 0):
        array = pc.if_else(pc.less(array, 0), pa.scalar(None, pa.int64()), array)
    return pc.multiply(array, 1000).cast(pa.timestamp("us", tz="UTC"))


class _Invalid(Exception):
    """A JSON value does not fit its field; the message is the dead-letter reason."""


def _coerce(name: str, kind: str, value: Any) -> Any:
    """``value`` converted to the Arrow-ready Python value of ``kind``, or :class:`_Invalid`."""
    if value is None:
        raise _Invalid(f"field {name!r} is null, expected {kind}")
    if kind == "string":
        if isinstance(value, str):
            return value
    elif kind == "boolean":
        if isinstance(value, bool):
            return value
    elif kind == "long":
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64[0] <= value <= _INT64[1]:
                raise _Invalid(f"field {name!r} is out of the long range: {value}")
            return value
    elif kind == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind == "timestamp":
        if isinstance(value, str):
            try:
                return iso_timestamp_us(value)
            except ValueError as exc:
                raise _Invalid(f"field {name!r} is not an ISO-8601 timestamp: {value[:60]!r}") from exc
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            if abs(value) > MAX_EPOCH_MS:
                raise _Invalid(f"field {name!r} is out of the timestamp range: {value} ms")
            return int(value * 1000)
    raise _Invalid(f"field {name!r} should be {kind}, got {type(value).__name__} {json.dumps(value)[:60]}")


def _payload(value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {"payload": None}
    try:
        return {"payload": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payload": base64.b64encode(value).decode("ascii"), "payload_encoding": "base64"}


def newest_event_time(batch: pa.RecordBatch, column: str, newest: datetime | None) -> datetime | None:
    """The newer of ``newest`` and the batch's largest ``column`` (Kafka's record ``timestamp``
    when the batch has no such timestamp column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if column not in names or not pa.types.is_timestamp(batch.schema.field(column).type):
        column = "timestamp"
    if column not in names:
        return newest
    value = pc.max(batch.column(names.index(column))).as_py()
    if value is None:
        return newest
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value if newest is None or value > newest else newest


@dataclass
class RecordDecoder:
    """Turns Kafka records into Arrow record batches for ``spec.format``.

    Malformed records (format ``json`` only) are collected in :attr:`dead_letters` as
    dead-letter objects (``source``, ``partition`` = ``"topic:p"``, ``offset``, ``payload``,
    ``reason``) instead of being emitted.
    """

    spec: KafkaSourceSpec
    #: Decode chunks with Arrow's JSON reader where it gives the same rows
    #: (:mod:`barrierflow.sources.json_columns`); False only to measure the per-record path.
    vectorized: bool = True

    def __post_init__(self) -> None:
        self.dead_letters: list[dict[str, Any]] = []

    def batches(self, records: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        """Arrow batches of at most :data:`CHUNK_ROWS` rows of one topic each, in record order."""
        chunk: list[Any] = []
        for record in records:
            if chunk and record.topic != chunk[0].topic:
                batch = self._batch(chunk)
                chunk = []
                if batch is not None:
                    yield batch
            chunk.append(record)
            if len(chunk) >= CHUNK_ROWS:
                batch = self._batch(chunk)
                chunk = []
                if batch is not None:
                    yield batch
        if chunk:
            batch = self._batch(chunk)
            if batch is not None:
                yield batch

    def column_batches(self, topic: str, partition: int, chunks: Iterable[Columns]) -> Iterator[pa.RecordBatch]:
        """As :meth:`batches` for format ``json``, from one partition's records read as columns
        (:func:`read_range_columns`): no Python object per record on the way (a chunk Arrow
        cannot decode alike goes record by record, with the same rows and dead letters)."""
        offsets: list[int] = []
        stamps: list[int | None] = []
        values: list[bytes | None] = []
        for chunk in chunks:
            offsets += chunk.offsets
            stamps += chunk.timestamps
            values += chunk.values
            if len(offsets) >= CHUNK_ROWS:
                batch = self._column_batch(topic, partition, offsets, stamps, values)
                offsets, stamps, values = [], [], []
                if batch is not None:
                    yield batch
        if offsets:
            batch = self._column_batch(topic, partition, offsets, stamps, values)
            if batch is not None:
                yield batch

    def _column_batch(self, topic: str, partition: int, offsets: list[int], stamps: list[int | None],
                      values: list[bytes | None]) -> pa.RecordBatch | None:
        import pyarrow as pa

        carried = self.spec.fields_of(topic)
        columns = decode_columns(values, carried) if self.vectorized else None
        if columns is None:
            from barrierflow.kafka_io.consumer import Record

            return self._json([Record(topic, partition, o, t, None, v, ())
                               for o, t, v in zip(offsets, stamps, values, strict=True)], vectorized=False)
        rows = len(offsets)
        metadata = [pa.array([topic] * rows, type=pa.string()), pa.array([partition] * rows, type=pa.int32()),
                    pa.array(offsets, type=pa.int64()), timestamps_us(stamps)]
        return pa.RecordBatch.from_arrays([*metadata, *self._all_fields(columns, carried, rows)],
                                          names=[*METADATA_COLUMNS, *self.spec.json_fields])

    def _batch(self, records: list[ConsumerRecord]) -> pa.RecordBatch | None:
        if self.spec.format == "raw":
            return self._raw(records)
        return self._json(records)

    @staticmethod
    def _metadata(records: list[ConsumerRecord]) -> list[pa.Array]:
        import pyarrow as pa

        return [
            pa.array([r.topic for r in records], type=pa.string()),
            pa.array([r.partition for r in records], type=pa.int32()),
            pa.array([r.offset for r in records], type=pa.int64()),
            pa.array([_timestamp_us(r.timestamp) for r in records], type=pa.timestamp("us", tz="UTC")),
        ]

    def _raw(self, records: list[ConsumerRecord]) -> pa.RecordBatch:
        import pyarrow as pa

        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        headers = [[{"key": k, "value": v} for k, v in (r.headers or [])] for r in records]
        return pa.RecordBatch.from_arrays(
            [
                *self._metadata(records),
                pa.array([r.key for r in records], type=pa.binary()),
                pa.array([r.value for r in records], type=pa.binary()),
                pa.array(headers, type=pa.list_(header)),
            ],
            names=["topic", "partition", "offset", "timestamp", "key", "value", "headers"],
        )

    def _decode(self, record: ConsumerRecord, fields: Mapping[str, str] | None = None) -> list[Any]:
        """The values of ``fields`` (default: every json field) in ``record``'s JSON object, or
        :class:`_Invalid` naming what is wrong."""
        if record.value is None:
            raise _Invalid("value is null (a tombstone), expected a JSON object")
        try:
            obj = json.loads(record.value)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Invalid(f"value is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise _Invalid(f"value is a JSON {type(obj).__name__}, expected an object")
        row = []
        for name, kind in (self.spec.json_fields if fields is None else fields).items():
            if name not in obj:
                raise _Invalid(f"field {name!r} is missing")
            row.append(_coerce(name, kind, obj[name]))
        return row

    def _json(self, records: list[ConsumerRecord], *, vectorized: bool = True) -> pa.RecordBatch | None:
        import pyarrow as pa

        names = [*METADATA_COLUMNS, *self.spec.json_fields]
        carried = self.spec.fields_of(records[0].topic)  # a chunk is one topic's (batches)
        tried = self.vectorized and vectorized
        columns = decode_columns([r.value for r in records], carried) if tried else None
        if columns is not None:
            return pa.RecordBatch.from_arrays([*self._metadata(records), *self._all_fields(columns, carried,
                                                                                           len(records))],
                                              names=names)
        kept: list[ConsumerRecord] = []
        rows: list[list[Any]] = []
        for record in records:
            try:
                rows.append(self._decode(record, carried))
            except _Invalid as exc:
                self.dead_letters.append(
                    {
                        "source": self.spec.name,
                        "partition": partition_id(record.topic, record.partition),
                        "offset": record.offset,
                        **_payload(record.value),
                        "reason": str(exc),
                    }
                )
                continue
            kept.append(record)
        if not kept:
            return None
        columns = [pa.array([row[i] for row in rows], type=arrow_type(kind))
                   for i, kind in enumerate(carried.values())]
        return pa.RecordBatch.from_arrays([*self._metadata(kept), *self._all_fields(columns, carried, len(kept))],
                                          names=names)

    def _all_fields(self, columns: list[pa.Array], carried: Mapping[str, str], rows: int) -> list[pa.Array]:
        """A column per json field in the spec's order: ``columns`` (of the ``carried`` fields)
        and nulls for the fields this topic's records do not carry (``topic_fields``)."""
        import pyarrow as pa

        if len(carried) == len(self.spec.json_fields):
            return columns
        given = dict(zip(carried, columns, strict=True))
        return [given[name] if name in given else pa.nulls(rows, type=arrow_type(kind))
                for name, kind in self.spec.json_fields.items()]


# --------------------------------------------------------------------------- Spark source


class KafkaDataSource(DataSource):
    """Options: ``spec`` (KafkaSourceSpec as JSON), ``control_dir``, ``dead_letter_uri``."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_kafka"

    def schema(self) -> str:
        return schema_for(KafkaSourceSpec.model_validate(json.loads(self.options["spec"])))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The micro-batch reader; see the module docstring for the offset and barrier contract.

    ``initialOffset``/``latestOffset`` run on the driver and share one long-lived consumer and
    range reader (closed by ``stop``); ``read`` runs on executors with their Python worker's
    shared range reader.
    Spark's read ``limit`` is ignored: the per-partition cap ``max_records_per_batch`` applied
    by the batch planner is the source's admission control. With ``Trigger.AvailableNow`` the
    end offsets seen by :meth:`prepareForTriggerAvailableNow` bound every later batch, so the
    query runs as many capped batches as needed to reach them and then stops.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.spec = KafkaSourceSpec.model_validate(json.loads(options["spec"]))
        self.control = ControlChannel(options["control_dir"])
        self.dead_letter_uri = options.get("dead_letter_uri", "")
        self.event_time_uri = options.get("event_time_uri", "")
        self.event_time_column = options.get("event_time_column", "timestamp")
        self._consumer: KafkaConsumer | None = None
        self._reader: RangeReader | None = None
        self._available_now_target: dict[str, int] | None = None
        self._last_available: dict[str, int] | None = None
        self._unavailable_since: float | None = None
        self.planner = SourcePlanner(PlanningOptions.from_json(options.get("planning")), self.control)
        self._event_time_cache: dict[tuple[str, int, bool], datetime | None] = {}
        self._search: tuple[dict[str, int], dict[str, int]] = ({}, {})

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled to the executors; a live consumer (and the planner's bookkeeping)
        # must not travel with it.
        state = dict(self.__dict__)
        state["_consumer"] = None
        state["_reader"] = None
        state["planner"] = None
        state["_event_time_cache"] = {}
        return state

    # -- driver side ---------------------------------------------------------------------

    def _driver_consumer(self) -> KafkaConsumer:
        """The driver's kafka-python consumer: topic metadata and offsets (a few calls per batch)."""
        if self._consumer is None:
            self._consumer = open_consumer(self.spec)
        return self._consumer

    def _driver_reader(self) -> RangeReader:
        """The driver's range reader (confluent-kafka): barrier scans and event-time peeks."""
        if self._reader is None:
            from barrierflow.kafka_io import KafkaSecurityError
            from barrierflow.kafka_io.consumer import RangeReader

            try:
                self._reader = RangeReader(reader_settings(self.spec))
            except KafkaSecurityError as exc:
                raise SourceError(f"Kafka source {self.spec.name!r}: {exc}") from None
        return self._reader

    def _offsets(self, which: str, partitions: list[TopicPartition]) -> dict[str, int]:
        consumer = self._driver_consumer()
        timeout_ms = int(self.spec.poll_timeout * 1000)
        fetch = consumer.beginning_offsets if which == "earliest" else consumer.end_offsets
        found = _call(self.spec, f"fetching the {which} offsets of {self.spec.topics}",
                      lambda: fetch(partitions, timeout_ms=timeout_ms))
        return {partition_id(tp.topic, tp.partition): int(found[tp]) for tp in partitions}

    def available(self) -> dict[str, int]:
        """The end offset (last stable offset) of every partition of the spec's topics,
        bounded by the ``Trigger.AvailableNow`` target when one was taken."""
        found = self._offsets("latest", topic_partitions(self.spec, self._driver_consumer()))
        target = self._available_now_target
        if target is not None:
            found = {k: min(v, target[k]) for k, v in found.items() if k in target}
        self._last_available = found
        return found

    def _available_riding_out_outages(self) -> dict[str, int] | None:
        """:meth:`available`, or None while the brokers have not answered for less than
        ``unavailable_timeout`` seconds (the driver's consumer is rebuilt after each failure).

        Raises:
            SourceUnavailableError: the brokers have not answered for longer than that.
        """
        try:
            found = self.available()
        except SourceUnavailableError as exc:
            self.stop()  # a fresh consumer next time, not one stuck in a broken state
            now = time.monotonic()
            if self._unavailable_since is None:
                self._unavailable_since = now
                log.warning("source %s: the brokers do not answer; riding it out for up to unavailable_timeout=%gs "
                            "(no new batches meanwhile): %s", self.spec.name, self.spec.unavailable_timeout, exc)
            if now - self._unavailable_since > self.spec.unavailable_timeout:
                raise SourceUnavailableError(
                    f"Kafka source {self.spec.name!r}: the brokers {','.join(bootstrap_servers(self.spec))} have not "
                    f"answered for {now - self._unavailable_since:.0f}s, more than unavailable_timeout="
                    f"{self.spec.unavailable_timeout:g}s; the query stops (a restart resumes from the last "
                    f"checkpoint). Last error: {exc}") from exc
            return None
        if self._unavailable_since is not None:
            log.warning("source %s: the brokers answer again after %.1fs", self.spec.name,
                        time.monotonic() - self._unavailable_since)
            self._unavailable_since = None
        return found

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the current end offsets as the last data this ``availableNow`` run reads;
        partitions created after this call are left for the next run."""
        self._available_now_target = None
        self._available_now_target = self.available()
        log.info("source %s: Trigger.AvailableNow target %s", self.spec.name, self._available_now_target)

    def reportLatestOffset(self) -> dict | None:
        """The end offsets seen by the last ``latestOffset`` (no broker call), for progress."""
        if self._last_available is None:
            return None
        return {"partitions": dict(sorted(self._last_available.items()))}

    def initialOffset(self) -> dict:
        """Resolve ``starting_offsets``; see the module docstring."""
        partitions = topic_partitions(self.spec, self._driver_consumer())
        wanted = self.spec.starting_offsets
        if wanted in ("earliest", "latest"):
            return SourceOffset(self._offsets(str(wanted), partitions)).to_json()
        assert isinstance(wanted, Mapping)
        unknown_topics = sorted(set(wanted) - set(self.spec.topics))
        if unknown_topics:
            raise UserInputError(
                f"Kafka source {self.spec.name!r}: starting_offsets names topics {unknown_topics} "
                f"that are not in topics {self.spec.topics}"
            )
        existing = {partition_id(tp.topic, tp.partition) for tp in partitions}
        explicit: dict[str, int] = {}
        for topic, by_partition in wanted.items():
            for number, offset in by_partition.items():
                key = partition_id(topic, int(number))
                if key not in existing:
                    raise SourceError(
                        f"Kafka source {self.spec.name!r}: starting_offsets names partition {key} "
                        f"that does not exist (the topic has {sorted(existing)})"
                    )
                explicit[key] = int(offset)
        earliest = self._offsets("earliest", partitions)
        needs_latest = any(v == _LATEST for v in explicit.values())
        latest = self._offsets("latest", partitions) if needs_latest else {}
        resolved: dict[str, int] = {}
        for key, first in earliest.items():
            offset = explicit.get(key, _EARLIEST)
            if offset == _EARLIEST:
                resolved[key] = first
            elif offset == _LATEST:
                resolved[key] = latest[key]
            elif offset < 0:
                raise UserInputError(
                    f"Kafka source {self.spec.name!r}: starting offset {offset} of {key} is invalid "
                    "(use an offset >= 0, -2 for earliest or -1 for latest)"
                )
            else:
                resolved[key] = offset
        return SourceOffset(resolved).to_json()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        """Plan the next batch's end from the brokers' end offsets and the control channel
        (through :class:`~barrierflow.sources.planning.SourcePlanner`: idleness, adaptive batch
        sizing and, with ``event_time.alignment``, watermark alignment over event times the
        driver peeks at: :meth:`_event_times_at`, :meth:`_offset_at`)."""
        begin = SourceOffset.from_json(start)
        available = self._available_riding_out_outages()
        if available is None:
            return start  # the brokers do not answer (yet): no new data, nothing skipped
        end = self.flow_plan(begin, available)
        if end.barrier > begin.barrier:
            log.info("source %s: batch ending at %s closes epoch %d", self.spec.name, end.partitions, end.barrier)
        return end.to_json()

    def flow_plan(self, begin: SourceOffset, available: Mapping[str, int],
                  amend: Callable[[SourceOffset], SourceOffset] | None = None,
                  measure: RowMeasure | None = None, offered: Mapping[str, int] | None = None) -> SourceOffset:
        """The batch end the planner gives from ``begin`` with ``available`` records: capped at
        ``max_records_per_batch`` (or the adaptive size), paused partitions held, and with
        watermark alignment every partition capped at the alignment ceiling (event times
        peeked at by the driver); ``amend`` and ``offered`` as in :meth:`SourcePlanner.plan`."""
        if self.planner.options.max_drift is not None:
            self._search = (dict(begin.partitions), dict(available))
            return self.planner.plan(begin, available, self.spec.max_records_per_batch,
                                     self._event_times_at, self._offset_at, amend=amend, measure=measure,
                                     offered=offered)
        return self.planner.plan(begin, available, self.spec.max_records_per_batch,
                                 lambda offsets: dict.fromkeys(offsets), amend=amend, measure=measure,
                                 offered=offered)

    # -- event times the driver peeks at (watermark alignment) -----------------------------

    def _event_time_of(self, partition: str, offset: int, *, newest_row: bool = False) -> datetime | None:
        """The event time of the first record at or after ``offset`` of ``partition`` (a few
        offsets on: transaction markers leave gaps), read by the driver's consumer and decoded
        like :meth:`read` does (the spec's event-time column, else Kafka's timestamp); None when
        there is no record there or it has no event time (malformed). A record holding many
        rows (a channel's row batch) has its first row's event time, or with ``newest_row``
        its newest row's. Cached: a record's event time never changes."""
        key = (partition, offset, newest_row)
        if key in self._event_time_cache:
            return self._event_time_cache[key]
        topic, number = parse_partition_id(partition)
        end = min(offset + PEEK_RECORDS, (self._last_available or {}).get(partition, offset + PEEK_RECORDS))
        found: datetime | None = None
        if end > offset:
            records = list(itertools.islice(self._peekable(topic, number, offset, end), 1))
            decoder = self._decoder(peek=not newest_row)
            for batch in decoder.batches(records):
                found = newest_event_time(batch, self.event_time_column, found)
        if len(self._event_time_cache) >= EVENT_TIME_CACHE:
            self._event_time_cache.clear()
        self._event_time_cache[key] = found
        return found

    def _decoder(self, *, peek: bool = False) -> RecordDecoder:
        """The decoder of this source's records (``peek``: for the driver's event-time peeks,
        where a record's event time is that of its first row)."""
        return RecordDecoder(self.spec)

    def _peekable(self, topic: str, number: int, start: int, end: int) -> Iterator[Any]:
        """The records of ``[start, end)`` whose event time the driver may peek at (all of them;
        the channel source leaves out its barrier records)."""
        return read_range(self.spec, topic, number, start, end, self._driver_reader())

    def _event_times_at(self, offsets: Mapping[str, int]) -> dict[str, datetime | None]:
        """Each partition's place in event time at ``offsets``: the event time of its next
        record, or of its last one when it has read everything (like the generator's exact
        answer, but read from the log). Assumes event times grow with offsets within a
        partition, as alignment does in general; a partition that goes back in time only
        makes alignment pause it less."""
        available = self._last_available or {}
        out: dict[str, datetime | None] = {}
        for partition, offset in offsets.items():
            if offset < available.get(partition, 0):
                out[partition] = self._event_time_of(partition, offset)
            else:
                out[partition] = self._event_time_of(partition, offset - 1) if offset > 0 else None
        return out

    def _offset_at(self, partition: str, newest: datetime) -> int:
        """The end (exclusive) of the records of ``partition`` whose every row is at or before
        ``newest``, between the batch's start and the partition's end offset: a binary search
        over single-record peeks (about log2 of the backlog reads, cached). A record holding
        many rows counts with its newest: cut by its first, a channel's row batch spanning more
        event time than ``max_drift`` let a partition overshoot the alignment ceiling by that
        span (measured: 20 s ahead with a 2 s ``max_drift``, rows dropped as late)."""
        starts, available = self._search
        lo, hi = starts.get(partition, 0), available.get(partition, 0)
        while lo < hi:
            mid = (lo + hi) // 2
            when = self._event_time_of(partition, mid, newest_row=True)
            if when is not None and when > newest:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One input partition ``(topic, partition, start, end)`` per non-empty range."""
        s, e = SourceOffset.from_json(start), SourceOffset.from_json(end)
        out = []
        for key in sorted(e.partitions, key=parse_partition_id):
            begin = s.partitions.get(key, 0)
            if e.partitions[key] > begin:
                topic, number = parse_partition_id(key)
                out.append(InputPartition((topic, number, begin, e.partitions[key])))
        return out

    def commit(self, end: dict) -> None:
        """Nothing to release: offsets live in Spark's log, not in a consumer group."""

    def stop(self) -> None:
        """Close the driver-side consumer and range reader."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- executor side -------------------------------------------------------------------

    def _records(self, topic: str, number: int, start: int, end: int) -> Iterator[Any]:
        """The records ``read`` decodes (subclasses filter them)."""
        return read_range(self.spec, topic, number, start, end)

    def _batches(self, decoder: RecordDecoder, topic: str, number: int, start: int, end: int
                 ) -> Iterator[pa.RecordBatch]:
        """The range's Arrow batches (format ``json``: read as columns, no object per record)."""
        if self.spec.format == "json":
            return decoder.column_batches(topic, number, read_range_columns(self.spec, topic, number, start, end))
        return decoder.batches(self._records(topic, number, start, end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow batches of the range; malformed records go to the dead-letter output."""
        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()
        topic, number, start, end = partition.value
        decoder = self._decoder()
        newest, rows = None, 0
        for batch in self._batches(decoder, topic, number, start, end):
            newest, rows = newest_event_time(batch, self.event_time_column, newest), rows + batch.num_rows
            yield batch
        if self.event_time_uri:
            from barrierflow.sources.event_times import record_range

            record_range(self.event_time_uri, self.spec.name, partition_id(topic, number), start, end, newest, rows)
        if decoder.dead_letters:
            key = partition_id(topic, number)
            if self.dead_letter_uri:
                from barrierflow.sources.dead_letter import write_dead_letters

                write_dead_letters(self.dead_letter_uri, self.spec.name, key, start, end, decoder.dead_letters)
            else:
                log.warning("source %s: dropped %d malformed records of %s [%d, %d): no dead_letter_uri",
                            self.spec.name, len(decoder.dead_letters), key, start, end)
