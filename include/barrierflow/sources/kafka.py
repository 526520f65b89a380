"""The barrier-aware Kafka source (``format("barrierflow_kafka")``).

This module is the Spark side only; what talks to Kafka lives in :mod:`barrierflow.kafka_io`
(which says why each client is used where): topic metadata and the begin and end offsets are
asked with kafka-python (:mod:`~barrierflow.kafka_io.admin`: a few requests per micro-batch, on
the driver); offset ranges are read with confluent-kafka
(:mod:`~barrierflow.kafka_io.range_reads`: one reader per executor Python worker, reused across
ranges and micro-batches; the driver has its own for barrier scans and event-time peeks);
records become Arrow batches and dead letters in :mod:`~barrierflow.kafka_io.decoding`.

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
(:mod:`barrierflow.sources.dead_letter`) and is not emitted
(:class:`~barrierflow.kafka_io.decoding.RecordDecoder`). JSON field types: ``string``
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

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.errors import SourceError, SourceUnavailableError, UserInputError
from barrierflow.kafka_io.admin import bootstrap_servers, broker_call, open_consumer, topic_partitions
from barrierflow.kafka_io.decoding import METADATA_COLUMNS, RecordDecoder, newest_event_time
from barrierflow.kafka_io.partition_ids import parse_partition_id, partition_id
from barrierflow.kafka_io.range_reads import read_range, read_range_columns, reader_settings
from barrierflow.sources.planning import REPLAY_FROM, REPLAY_UNTIL, PlanningOptions, RowMeasure, SourcePlanner
from barrierflow.spec.kafka_params import KafkaSourceParams

if TYPE_CHECKING:
    import pyarrow as pa

    from barrierflow.kafka_io.admin import KafkaConsumer, TopicPartition  # kafka-python's, for annotations
    from barrierflow.kafka_io.consumer import RangeReader
    from barrierflow.spec.kafka_params import KafkaSource

log = logging.getLogger(__name__)

RAW_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
    "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
#: Spark SQL type of each ``json_fields`` type.
JSON_SPARK_TYPES = {
    "string": "STRING",
    "long": "BIGINT",
    "double": "DOUBLE",
    "timestamp": "TIMESTAMP",
    "boolean": "BOOLEAN",
}
#: Offsets the driver reads past one that holds no record (a transaction marker) when it peeks at event times.
PEEK_RECORDS = 16
#: Event times of single records the driver remembers (cleared when full).
EVENT_TIME_CACHE = 100_000
_EARLIEST, _LATEST = -2, -1


# --------------------------------------------------------------------------- schema


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def schema_for(spec: KafkaSource) -> str:
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


# --------------------------------------------------------------------------- Spark source


class KafkaDataSource(DataSource):
    """Options: ``spec`` (KafkaSourceSpec as JSON, read as :class:`KafkaSourceParams`), ``control_dir``,
    ``dead_letter_uri``."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_kafka"

    def schema(self) -> str:
        return schema_for(KafkaSourceParams.from_json(self.options["spec"]))

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
        self.spec = KafkaSourceParams.from_json(options["spec"])
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
        # a bounded replay (planning.REPLAY_FROM/REPLAY_UNTIL): [from, until) in one batch, then nothing
        replay_from, until = options.get(REPLAY_FROM), options.get(REPLAY_UNTIL)
        self.replay_from = SourceOffset.from_json(json.loads(replay_from)) if replay_from else None
        self.until = SourceOffset.from_json(json.loads(until)) if until else None

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
        found = broker_call(self.spec, f"fetching the {which} offsets of {self.spec.topics}",
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
        """Resolve ``starting_offsets``; see the module docstring (a bounded replay starts at
        its :data:`~barrierflow.sources.planning.REPLAY_FROM` offsets instead)."""
        if self.replay_from is not None:
            return self.replay_from.to_json()
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
        if self.until is not None:  # a bounded replay: one batch to its end, then nothing
            return self.until.to_json()
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
