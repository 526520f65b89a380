"""Reading an offset range of one partition (confluent-kafka / librdkafka), ``read_committed``.

:class:`RangeReader` reads ``[start, end)`` of a partition: it assigns the partition at
``start`` (no group membership, nothing committed; librdkafka needs a ``group.id`` but assign
never joins it) and yields :class:`Record` values in offset order until its position passes
``end``. It fetches 1 MB per partition and request and prefetches at most about one chunk
(:data:`CHUNK` records) ahead, since what it fetched past a range's end is dropped when the
next range is assigned. It is reused across ranges: :func:`shared_reader` keeps one per
settings per process (a Spark Python worker is reused across tasks and micro-batches, so
connecting and the first metadata request are paid once).

Ending a range: ``read_committed`` readers do not see transaction markers and aborted records,
so a range may hold fewer than ``end - start`` records. The read is over when a record at or
past ``end - 1`` arrived, or the broker reports the end of the partition (a partition-EOF event
carrying the last stable offset) at or past ``end``. When neither happens for ``stall`` seconds
the read fails with :class:`ReadStalled` (the brokers do not answer, or a transaction below
``end`` is still open); a range that starts before the log start (deleted by retention, a
recreated topic) fails with :class:`RangeGone`. Contract: one thread uses a reader at a time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from barrierflow.kafka_io.errors import KafkaIOError, KafkaSecurityError
from barrierflow.kafka_io.security import librdkafka_client_config, librdkafka_failure

if TYPE_CHECKING:
    from barrierflow.spec.kafka_params import KafkaClient

log = logging.getLogger(__name__)

#: Records taken from the client per ``consume`` call.
CHUNK = 10_000
#: Seconds one ``consume`` call waits for its records at most.
WAIT = 0.1


class ReadStalled(KafkaIOError):
    """A range read made no progress for its ``stall`` bound."""


class RangeGone(KafkaIOError):
    """The range's first offsets are no longer on the broker (retention, a recreated topic)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


#: ``(offset, headers or None) -> whether to leave the record out`` (:meth:`RangeReader.read_columns`)
HeaderFilter = Callable[[int, Sequence[tuple[str, bytes]] | None], bool]


class Record(NamedTuple):
    """One record, with the attribute names of kafka-python's ``ConsumerRecord`` that
    barrierflow reads (``timestamp`` in epoch ms, None when the record has none)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


class Columns(NamedTuple):
    """Consecutive records of one partition as columns: ``offsets``, ``timestamps`` (epoch
    ms, None when a record has none) and ``values``, index for index."""

    offsets: list[int]
    timestamps: list[int | None]
    values: list[bytes | None]


@dataclass(frozen=True)
class ConsumerSettings:
    """How a :class:`RangeReader` connects: ``servers`` (comma separated), ``timeout`` (seconds,
    each broker request), ``client_id``, ``client`` (security and client options; secrets as
    references, resolved by :meth:`config` in the process that builds the reader)."""

    servers: str
    timeout: float = 10.0
    client_id: str = "barrierflow"
    client: KafkaClient | None = None

    def config(self) -> dict[str, Any]:
        timeout_ms = max(1000, int(self.timeout * 1000))
        return librdkafka_client_config(self.servers, self.client_id, self.client, {
            "group.id": f"{self.client_id}-range-reader",  # required by librdkafka; assign() never joins it
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
            # librdkafka prefetches past the range's end (by default up to 100,000 records or
            # 64 MB per partition), discarded when the next range is assigned: bound the waste.
            "max.partition.fetch.bytes": 1024 * 1024,
            "queued.min.messages": CHUNK,
            "queued.max.messages.kbytes": 16 * 1024,
            # Once the local queue holds queued.min.messages, librdkafka postpones the next
            # fetch by this much (default 1000 ms) instead of fetching again as soon as the
            # queue drains: a range reader that takes CHUNK records per consume would then
            # wait for the broker after every chunk. Measured on a 100,000-record range with
            # 1.5 us of work per record: 91,000 records/s at the default, 330,000 at 1 ms.
            "fetch.queue.backoff.ms": 1,
            "socket.timeout.ms": timeout_ms,
        })


class RangeReader:
    """See the module docstring."""

    def __init__(self, settings: ConsumerSettings) -> None:
        from confluent_kafka import Consumer

        self.settings = settings
        self._broker_error = ""
        #: The brokers refused this client's credentials or certificate (or it theirs): reads fail at once.
        self._security: KafkaSecurityError | None = None
        config = settings.config()  # raises KafkaSecurityError: a secret or TLS file that does not resolve
        config["error_cb"] = self._on_error
        config["logger"] = log
        try:
            self._consumer = Consumer(config)
        except Exception as exc:  # KafkaException: a setting the client refuses
            found = librdkafka_failure(settings.client, settings.servers, exc.args[0]) \
                if exc.args and hasattr(exc.args[0], "code") else None
            if found is not None:
                raise found from exc
            raise KafkaIOError(f"creating a consumer for {settings.servers} failed: {exc}", retriable=False) from exc
        self._closed = False

    def _on_error(self, err: Any) -> None:
        self._broker_error = err.str()
        if self._security is None:
            self._security = librdkafka_failure(self.settings.client, self.settings.servers, err)

    def read(self, topic: str, partition: int, start: int, end: int, *, stall: float) -> Iterator[Record]:
        """The ``read_committed`` records of ``topic``/``partition`` with ``start <= offset < end``.

        Raises:
            ReadStalled: no progress for ``stall`` seconds.
            RangeGone: the range starts before the partition's log start.
            KafkaSecurityError: the brokers refused this client's credentials or certificate, or
                it does not trust theirs.
            KafkaIOError: the broker refused the fetch.
        """
        for messages in self._assigned_fetches(topic, partition, start, end, stall=stall):
            for message in messages:
                kind, stamp = message.timestamp()
                yield Record(topic, partition, message.offset(), stamp if kind else None, message.key(),
                             message.value(), message.headers() or ())

    def read_columns(self, topic: str, partition: int, start: int, end: int, *, stall: float,
                     drop: HeaderFilter | None = None) -> Iterator[Columns]:
        """The records of :meth:`read` as columns, a :class:`Columns` per fetch (up to
        :data:`CHUNK` records): what a reader that needs only offsets, timestamps and values
        (the Kafka source's ``json`` format) takes without a Python object per record.
        With ``drop``, a record for which ``drop(offset, headers)`` is true is left out (a
        channel's barrier records and stale records; ``headers`` None when it has none); a
        fetch whose records are all dropped yields nothing. Same errors as :meth:`read`."""
        for messages in self._assigned_fetches(topic, partition, start, end, stall=stall):
            if drop is not None:
                messages = [m for m in messages if not drop(m.offset(), m.headers())]
                if not messages:
                    continue
            stamps = [m.timestamp() for m in messages]
            yield Columns([m.offset() for m in messages], [t[1] if t[0] else None for t in stamps],
                          [m.value() for m in messages])

    def read_marked(self, topic: str, partition: int, start: int, end: int, header: str | frozenset[str], *,
                    stall: float) -> Iterator[tuple[int, Sequence[tuple[str, bytes]]]]:
        """``(offset, headers)`` of the records of :meth:`read` that carry a header named
        ``header`` (or any of a set of names), in offset order: a scan for marker records (a
        channel's barriers and row batches) that builds nothing for the others. Same errors as
        :meth:`read`."""
        names = frozenset([header]) if isinstance(header, str) else header
        for messages in self._assigned_fetches(topic, partition, start, end, stall=stall):
            for message in messages:
                headers = message.headers()
                if headers and any(name in names for name, _ in headers):
                    yield message.offset(), headers

    def _assigned_fetches(self, topic: str, partition: int, start: int, end: int, *, stall: float
                          ) -> Iterator[list[Any]]:
        """:meth:`_fetches` of the range with the partition assigned for the read only."""
        from confluent_kafka import TopicPartition

        if end <= start:
            return
        consumer = self._consumer
        consumer.assign([TopicPartition(topic, partition, start)])
        try:
            yield from self._fetches(consumer, topic, partition, start, end, stall=stall)
        finally:
            # An assigned partition keeps librdkafka fetching in the background (a request every
            # fetch.wait.max.ms): measured as about 20 % of a core per idle Python worker, and the
            # broker's CPU with it. Unassigned, the reader costs nothing between ranges.
            consumer.unassign()

    def _fetches(self, consumer: Any, topic: str, partition: int, start: int, end: int, *,
                 stall: float) -> Iterator[list[Any]]:
        """The range's messages, a list per ``consume`` call (in offset order, none empty)."""
        from confluent_kafka import KafkaError

        position, progressed_at = start, time.monotonic()
        while position < end:
            before = position
            # librdkafka's batch consume returns once it has that many messages or after the
            # timeout: never ask for more than the range still holds, and wait briefly (a range
            # with transaction markers holds fewer records than offsets).
            kept: list[Any] = []
            fetched = consumer.consume(min(CHUNK, end - position), WAIT)
            if self._security is not None:  # served by consume: credentials or certificates refused
                raise self._security
            for message in fetched:
                if message.partition() != partition or message.topic() != topic:
                    continue  # fetched for an earlier assignment
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        position = max(position, message.offset())
                    elif code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        raise RangeGone(f"{topic}:{partition} offsets [{start}, {end}): {error.str()}")
                    elif error.fatal() or not (error.retriable() or code < 0):
                        raise KafkaIOError(f"reading {topic}:{partition} from {self.settings.servers}: "
                                           f"{error.str()}", retriable=False)
                    continue  # a transient error (transport, all brokers down): the stall bound applies
                offset = message.offset()
                if offset >= end:
                    position = end
                    break
                position = offset + 1
                if offset >= start:
                    kept.append(message)
            if kept:
                yield kept
            if position > before:
                progressed_at = time.monotonic()
            elif time.monotonic() - progressed_at > stall:
                last = f"; last broker error: {self._broker_error}" if self._broker_error else ""
                raise ReadStalled(f"reading {topic}:{partition} offsets [{start}, {end}) from {self.settings.servers} "
                                  f"made no progress for {stall:g}s (stuck at offset {position}){last}")

    def close(self) -> None:
        """Close the consumer and forget it in the shared cache."""
        if self._closed:
            return
        self._closed = True
        _SHARED.pop((os.getpid(), self.settings), None)
        try:
            self._consumer.close()
        except Exception:  # closing a consumer of dead brokers; nothing to keep
            log.debug("closing a range reader", exc_info=True)


_SHARED: dict[tuple[int, ConsumerSettings], RangeReader] = {}


def shared_reader(settings: ConsumerSettings) -> RangeReader:
    """This process's reader for ``settings`` (built on first use, reused across ranges)."""
    key = (os.getpid(), settings)
    reader = _SHARED.get(key)
    if reader is None or reader._closed:
        reader = _SHARED[key] = RangeReader(settings)
    return reader
