"""A throwaway Kafka-protocol broker for tests: noida-db, shipped as a binary by ``noida-db``.

``running_kafka_broker()`` starts noida-db's Kafka service (through the production launcher
:mod:`barrierflow.sources.embedded_broker`, which ``bootstrap: embedded`` channels use too)
with its data in a temporary dir on 127.0.0.1 on a free port, waits until kafka-python can
actually bootstrap from it and list topics, yields a :class:`KafkaEndpoint` and stops the
broker afterwards (SIGTERM, then SIGKILL; the data dir is removed). If
``BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` is set, that broker (a real cluster) is used instead and
nothing is started (``is_test_broker`` is then False).

noida-db gets right what the earlier test broker (tansu) got wrong, measured for issue 29:
end offsets after batched (multi-record) produce requests, ``read_committed`` skipping
aborted records, the last stable offset with a transaction open, fencing of a zombie
producer, and keeping its records across a stop and start of its data dir. So tests run the
same assertions on it as on a real Kafka. What it does not model (known gaps):

* a transaction left open past its ``transaction.timeout.ms`` is never aborted by the broker
  (a real Kafka aborts it); barrierflow's sink aborts its own in-doubt transactions on
  restore, which tests/sinks/test_kafka_sink.py shows;
* it is single-node: no replication, ISR, leader election or ``acks`` semantics beyond one
  broker, so ``min.insync.replicas`` and broker failover are not tested here;
* it writes its data to disk about once a second (and on SIGTERM): a SIGKILL of the broker
  process itself can lose the last second of acknowledged writes, which a real Kafka with
  ``acks=all`` on several replicas would not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.errors import BarrierflowError
from barrierflow.sources import embedded_broker as embedded

from tests.support.processes import free_port as shared_free_port

logger = logging.getLogger(__name__)

EXTERNAL_BOOTSTRAP_ENV = "BARRIERFLOW_TEST_KAFKA_BOOTSTRAP"

#: ``(partition, key, value, headers)`` of one record to produce.
ProducedRecord = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes]] | None]


class KafkaBrokerError(BarrierflowError):
    """The test Kafka broker could not be started, did not become ready, or refused a request."""


@dataclass(frozen=True)
class KafkaEndpoint:
    """A Kafka broker for tests.

    Attributes:
        bootstrap_servers: ``host:port`` (comma-separated list for an external cluster).
        is_test_broker: True for a broker these helpers started (noida-db; see the module
            docstring for what it does not model), False for the external broker of
            ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``.
    """

    bootstrap_servers: str
    is_test_broker: bool
    pid: int | None = None


def broker_binary() -> Path:
    """Path of the ``noida-db`` binary shipped in the ``noida-db`` package."""
    try:
        return embedded.broker_binary()
    except embedded.EmbeddedBrokerError as exc:
        raise KafkaBrokerError(f"{exc} (or set {EXTERNAL_BOOTSTRAP_ENV} to a running broker)") from exc


def free_port(host: str = "127.0.0.1") -> int:
    return shared_free_port(host)


def _servers(endpoint: KafkaEndpoint) -> list[str]:
    return [s.strip() for s in endpoint.bootstrap_servers.split(",") if s.strip()]


def _admin(bootstrap_servers: str | list[str], timeout_ms: int = 5000) -> object:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        client_id="barrierflow-tests",
        bootstrap_timeout_ms=timeout_ms,
        request_timeout_ms=timeout_ms,
    )


def _answers(bootstrap_servers: str, timeout: float) -> bool:
    """Whether kafka-python can bootstrap from the broker and list its topics."""
    return embedded.broker_answers(bootstrap_servers, timeout)


@contextlib.contextmanager
def _started_broker(startup_timeout: float, stop_timeout: float) -> Iterator[KafkaEndpoint]:
    """The production launcher (:func:`barrierflow.sources.embedded_broker.embedded_broker`)
    on a temporary data dir, its errors raised as :class:`KafkaBrokerError`."""
    broker_binary()  # the hint about the external broker if noida-db is missing
    stack = contextlib.ExitStack()
    try:
        bootstrap = stack.enter_context(embedded.embedded_broker(None, startup_timeout, stop_timeout))
    except embedded.EmbeddedBrokerError as exc:
        raise KafkaBrokerError(str(exc)) from exc
    with stack:
        yield KafkaEndpoint(bootstrap_servers=bootstrap, is_test_broker=True, pid=embedded.broker_pid(bootstrap))


@contextlib.contextmanager
def running_kafka_broker(
    startup_timeout: float = 30.0, stop_timeout: float = 10.0
) -> Iterator[KafkaEndpoint]:
    """Yield a Kafka broker: ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` if set, else a fresh noida-db.

    The started broker keeps its data in a temporary dir (removed afterwards), listens on
    127.0.0.1 on a free port, answers kafka-python's metadata requests when this yields and is
    stopped on exit. Raises
    :class:`KafkaBrokerError` if it cannot be started within ``startup_timeout`` seconds.
    """
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        logger.info("using the external Kafka broker from %s", EXTERNAL_BOOTSTRAP_ENV)
        yield KafkaEndpoint(bootstrap_servers=external, is_test_broker=False)
        return
    with _started_broker(startup_timeout, stop_timeout) as endpoint:
        yield endpoint


@contextlib.contextmanager
def own_kafka_broker(startup_timeout: float = 30.0, stop_timeout: float = 10.0) -> Iterator[KafkaEndpoint]:
    """A fresh noida-db broker for one test alone, even when ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``
    names another: for tests that pause or stop the broker (``pid`` is set), which they must
    never do to a shared one."""
    with _started_broker(startup_timeout, stop_timeout) as endpoint:
        yield endpoint


def create_topic(endpoint: KafkaEndpoint, name: str, partitions: int, timeout: float = 10.0) -> None:
    """Create topic ``name`` with ``partitions`` partitions (replication 1) and wait until its
    metadata shows every partition. Raises :class:`KafkaBrokerError` on failure or timeout."""
    from kafka import KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    servers = _servers(endpoint)
    try:
        admin = _admin(servers, timeout_ms=int(timeout * 1000))
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])  # type: ignore[attr-defined]
        finally:
            admin.close()  # type: ignore[attr-defined]
        consumer = KafkaConsumer(
            bootstrap_servers=servers,
            group_id=None,
            enable_auto_commit=False,
            bootstrap_timeout_ms=int(timeout * 1000),
        )
    except KafkaError as exc:
        raise KafkaBrokerError(
            f"creating topic {name!r} on {endpoint.bootstrap_servers} failed: {exc}"
        ) from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            consumer.topics()  # forces a metadata refresh
            if len(consumer.partitions_for_topic(name) or ()) == partitions:
                return
            if time.monotonic() > deadline:
                raise KafkaBrokerError(
                    f"topic {name!r} did not show {partitions} partitions within {timeout}s"
                )
            time.sleep(0.05)
    finally:
        consumer.close()


def recreate_topic(endpoint: KafkaEndpoint, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Delete topic ``name`` and create it again, empty (what an operator's mistake or a
    broker that lost its data looks like to a pipeline). A real cluster deletes in the
    background: creating is retried until it succeeds or ``timeout`` passes."""
    from kafka.errors import KafkaError

    admin = _admin(_servers(endpoint))
    try:
        admin.delete_topics([name])  # type: ignore[attr-defined]
    except KafkaError as exc:
        raise KafkaBrokerError(f"deleting topic {name!r} on {endpoint.bootstrap_servers} failed: {exc}") from exc
    finally:
        admin.close()  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while True:
        try:
            create_topic(endpoint, name, partitions)
            return
        except KafkaBrokerError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def produce(
    endpoint: KafkaEndpoint, topic: str, records: Sequence[ProducedRecord], timeout: float = 10.0
) -> list[int]:
    """Produce ``records`` (``(partition, key, value, headers)``) in order; return their offsets.

    Each record is sent in a request of its own and acknowledged before the next is sent
    (``linger_ms=0``, wait on every send), so the returned offsets follow the order of
    ``records`` exactly even across partitions. (The earlier test broker, tansu, also needed
    it for correct end offsets; noida-db does not: tests that want real producer batches
    produce them themselves, see tests/sources/test_kafka_bounded_topic.py.)
    """
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        producer = KafkaProducer(
            bootstrap_servers=_servers(endpoint),
            linger_ms=0,
            acks="all",
            bootstrap_timeout_ms=int(timeout * 1000),
        )
    except KafkaError as exc:
        raise KafkaBrokerError(
            f"connecting a producer to {endpoint.bootstrap_servers} failed: {exc}"
        ) from exc
    offsets: list[int] = []
    try:
        for partition, key, value, headers in records:
            future = producer.send(
                topic, key=key, value=value, partition=partition, headers=list(headers) if headers else None
            )
            offsets.append(future.get(timeout=timeout).offset)
        producer.flush(timeout=timeout)
    except KafkaError as exc:
        raise KafkaBrokerError(
            f"producing to {topic!r} on {endpoint.bootstrap_servers} failed: {exc}"
        ) from exc
    finally:
        producer.close(timeout=timeout)
    return offsets


def channel_rows(endpoint: KafkaEndpoint, partition: str, start: int, end: int) -> int:
    """The data rows the records of ``partition`` (``topic:p``) in ``[start, end)`` hold
    (barrier records hold none; an independent reader, kafka-python)."""
    from barrierflow.barriers.records import decode_barrier
    from barrierflow.kafka_io.row_batches import rows_in
    from kafka import KafkaConsumer, TopicPartition

    topic, number = partition.rsplit(":", 1)
    tp = TopicPartition(topic, int(number))
    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap_servers, group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        rows, position = 0, start
        while position < end:
            for record in consumer.poll(timeout_ms=1000).get(tp, []):
                if record.offset < end and decode_barrier(record.headers) is None:
                    rows += rows_in(record.headers)
                position = max(position, record.offset + 1)
        return rows
    finally:
        consumer.close()


def partition_records(endpoint: KafkaEndpoint, topic: str, partition: int, timeout: float = 60.0) -> list[Any]:
    """Every record of ``topic``/``partition`` up to its end offset when called, in offset order
    (kafka-python: a reader independent of barrierflow's). Offsets may have gaps (transaction
    markers). Raises :class:`KafkaBrokerError` when the records do not arrive within ``timeout``."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap_servers, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise KafkaBrokerError(f"{topic}/{partition}: read up to offset {consumer.position(tp)} of {end} "
                                       f"within {timeout:g}s")
            records += consumer.poll(timeout_ms=1000, max_records=50_000).get(tp, [])
        return [r for r in records if r.offset < end]
    finally:
        consumer.close()
