"""A batching Kafka producer (confluent-kafka / librdkafka) with bounded, reported delivery.

:class:`BatchProducer` sends records to explicit partitions and :meth:`~BatchProducer.settle`
waits until every record sent since the last settle was acknowledged by the brokers
(``acks=all``), or raises :class:`~barrierflow.kafka_io.errors.KafkaIOError`. Records travel in
real producer batches (``linger.ms``, ``batch.size``); with ``idempotence`` librdkafka's
retries within ``delivery_timeout`` never duplicate nor reorder a partition's records. A
record not acknowledged within ``delivery_timeout`` seconds (librdkafka retries until then:
brokers down, leader moves) fails; failures are never silent: ``settle`` raises if any record
since the last settle failed or is still unacknowledged.

Contract: a producer is used by one thread at a time. :func:`shared_producer` keeps one per
settings per process (a Spark Python worker runs one task at a time and is reused across
tasks, so the connection and the metadata outlive a micro-batch); a producer whose settle
failed is dropped from the cache (:meth:`BatchProducer.close`), the next call builds a fresh one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.kafka_io.errors import KafkaIOError, KafkaSecurityError
from barrierflow.kafka_io.security import librdkafka_client_config, librdkafka_failure

if TYPE_CHECKING:
    from barrierflow.spec.kafka_params import KafkaClient

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]
#: Records sent between two polls of the delivery-report queue.
POLL_EVERY = 5_000
#: Seconds ``settle`` waits beyond ``delivery_timeout`` for the last delivery reports.
SETTLE_MARGIN = 5.0
#: How many failure texts a producer keeps for its error message.
KEPT_FAILURES = 3


@dataclass(frozen=True)
class ProducerSettings:
    """How a :class:`BatchProducer` connects and batches.

    Attributes:
        servers: the bootstrap ``host:port`` list, comma separated.
        linger_ms: how long a partition's batch waits for more records (``linger.ms``).
        batch_bytes: a partition's batch size limit (``batch.size``).
        idempotence: ``enable.idempotence`` (the broker must support ``InitProducerId``).
        delivery_timeout: seconds a record may take to be acknowledged, retries included
            (``message.timeout.ms``); also bounds connecting and metadata requests.
        queue_records: records buffered in the client at most; ``send`` waits when it is full.
        client_id: the Kafka client id.
        client: security and client options (secrets as references, resolved by :meth:`config`
            in the process that builds the producer: a Spark executor's for the channel writer).
    """

    servers: str
    linger_ms: int = 5
    batch_bytes: int = 1_000_000
    idempotence: bool = True
    delivery_timeout: float = 30.0
    queue_records: int = 500_000
    client_id: str = "barrierflow"
    client: KafkaClient | None = None

    def config(self) -> dict[str, Any]:
        """The librdkafka configuration."""
        timeout_ms = max(1000, int(self.delivery_timeout * 1000))
        return librdkafka_client_config(self.servers, self.client_id, self.client, {
            "acks": "all",
            "enable.idempotence": self.idempotence,
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_bytes,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": self.queue_records,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": timeout_ms,
            "socket.timeout.ms": min(timeout_ms, 60_000),
            "request.timeout.ms": min(timeout_ms, 30_000),
            "delivery.report.only.error": True,
        })


class BatchProducer:
    """See the module docstring."""

    def __init__(self, settings: ProducerSettings) -> None:
        from confluent_kafka import Producer

        self.settings = settings
        self._sent = 0
        self._failed = 0
        self._failures: list[str] = []
        self._broker_error = ""
        #: The brokers refused this client's credentials or certificate (or it theirs).
        self._security: KafkaSecurityError | None = None
        config = settings.config()  # raises KafkaSecurityError: a secret or TLS file that does not resolve
        config["error_cb"] = self._on_error
        config["on_delivery"] = self._on_delivery
        config["logger"] = log
        try:
            self._producer = Producer(config)
        except Exception as exc:  # confluent_kafka.KafkaException: a setting the client refuses
            found = librdkafka_failure(settings.client, settings.servers, exc.args[0]) \
                if exc.args and hasattr(exc.args[0], "code") else None
            if found is not None:
                raise found from exc
            raise KafkaIOError(f"creating a producer for {settings.servers} failed: {exc}", retriable=False) from exc
        self._closed = False

    # -- callbacks (run inside poll/flush, on the calling thread) ---------------------------

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:  # only errors are reported (delivery.report.only.error)
            self._failed += 1
            if len(self._failures) < KEPT_FAILURES:
                self._failures.append(f"{msg.topic()}:{msg.partition()}: {err.str()}")

    def _on_error(self, err: Any) -> None:
        self._broker_error = err.str()
        if self._security is None:
            self._security = librdkafka_failure(self.settings.client, self.settings.servers, err)
        if err.fatal():
            self._failed += 1
            self._failures.append(f"fatal: {err.str()}")

    # -- API ----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records sent since the last :meth:`settle`."""
        return self._sent

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``, sorted.

        Raises:
            KafkaSecurityError: the brokers refused this client's credentials or certificate, or
                it does not trust theirs (found within a second or so, not after the timeout).
            KafkaIOError: the brokers did not answer within ``delivery_timeout``, or the topic
                does not exist.
        """
        deadline = time.monotonic() + self.settings.delivery_timeout
        while True:
            # Asked in short steps: librdkafka reports a refused login through the error callback,
            # which only poll serves, while list_topics would wait for its whole timeout.
            try:
                metadata = self._producer.list_topics(topic, timeout=min(1.0, max(0.1, deadline - time.monotonic())))
                break
            except Exception as exc:  # KafkaException
                self._producer.poll(0)
                if self._security is not None:
                    raise self._security from exc
                if time.monotonic() >= deadline:
                    raise KafkaIOError(f"listing the partitions of {topic!r} failed: {exc}"
                                       f"{self._last_broker_error()}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            reason = found.error.str() if found is not None and found.error is not None else "no such topic"
            raise KafkaIOError(f"topic {topic!r} has no partitions on {self.settings.servers}: {reason}",
                               retriable=False)
        return sorted(found.partitions)

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None,
             headers: Headers | None = None) -> None:
        """Queue one record for ``partition``; waits (bounded) while the client's queue is full.

        Raises:
            KafkaIOError: a record failed meanwhile, or the queue stayed full for longer than
                ``delivery_timeout`` plus a margin.
        """
        try:
            self._producer.produce(topic, value, key, partition, headers=headers)
        except BufferError:
            self._wait_for_room(topic, partition, value, key, headers)
        self._sent += 1
        if self._sent % POLL_EVERY == 0:
            self._producer.poll(0)

    def send_all(self, topic: str, values: Sequence[bytes], partitions: Sequence[int],
                 keys: Sequence[bytes | None] | None = None, headers: Headers | None = None) -> None:
        """:meth:`send` for each ``values[i]`` to ``partitions[i]`` with ``keys[i]`` (a loop
        with the lookups hoisted: the channel writer's hot path)."""
        produce, poll = self._producer.produce, self._producer.poll
        sent = self._sent
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            try:
                produce(topic, value, key, partitions[i], headers=headers)
            except BufferError:
                self._sent = sent
                self._wait_for_room(topic, partitions[i], value, key, headers)
            sent += 1
            if sent % POLL_EVERY == 0:
                poll(0)
        self._sent = sent

    def _wait_for_room(self, topic: str, partition: int, value: bytes, key: bytes | None,
                       headers: Headers | None) -> None:
        deadline = time.monotonic() + self.settings.delivery_timeout + SETTLE_MARGIN
        while True:
            self._producer.poll(0.05)
            if self._failed:
                self._raise(f"{self._sent} records sent, {self._failed} failed")
            try:
                self._producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    self._raise(f"the client's queue ({self.settings.queue_records} records) stayed full for "
                                f"{self.settings.delivery_timeout + SETTLE_MARGIN:g}s")

    def settle(self) -> int:
        """Wait until every record sent since the last settle was acknowledged; return how many.

        Raises:
            KafkaIOError: a record failed (after librdkafka's retries within
                ``delivery_timeout``) or is still unacknowledged after ``delivery_timeout`` plus
                a margin; the records' fate is then unknown (some may have been written).
        """
        remaining = self._producer.flush(self.settings.delivery_timeout + SETTLE_MARGIN)
        sent, self._sent = self._sent, 0
        if self._failed or remaining:
            failed = self._failed
            self._failed = 0
            self._raise(f"{sent} records sent, {failed} failed, {remaining} unacknowledged after "
                        f"{self.settings.delivery_timeout:g}s")
        return sent

    def _last_broker_error(self) -> str:
        return f"; last broker error: {self._broker_error}" if self._broker_error else ""

    def _raise(self, what: str) -> None:
        if self._security is not None:
            security = self._security
            self.close()
            raise security
        failures = "; ".join(self._failures)
        self._failures = []
        retriable = not failures.startswith("fatal")
        self.close()
        raise KafkaIOError(f"producing to {self.settings.servers}: {what}"
                           f"{f' ({failures})' if failures else ''}{self._last_broker_error()}",
                           retriable=retriable)

    def close(self) -> None:
        """Drop the records still queued (after a failure) and forget this producer in the
        shared cache; a closed producer must not be used again."""
        if self._closed:
            return
        self._closed = True
        _SHARED.pop((os.getpid(), self.settings), None)
        try:
            self._producer.purge()
            self._producer.flush(0)
        except Exception:  # best effort on a producer that is being thrown away
            log.debug("purging a failed producer", exc_info=True)


_SHARED: dict[tuple[int, ProducerSettings], BatchProducer] = {}


def shared_producer(settings: ProducerSettings) -> BatchProducer:
    """This process's producer for ``settings`` (built on first use; see the module docstring).
    The process id is part of the key: a forked child never uses its parent's client."""
    key = (os.getpid(), settings)
    producer = _SHARED.get(key)
    if producer is None or producer._closed:
        producer = _SHARED[key] = BatchProducer(settings)
    return producer
