"""A throwaway Apache Kafka broker for tests (single-node KRaft, from the pinned jars).

``running_kafka_broker()`` starts Apache Kafka through the production launcher
(:func:`barrierflow.kafka_io.kraft_broker.kraft_broker`, which ``bootstrap: embedded`` channels
use too) with its data in a temporary dir on 127.0.0.1 on free ports, waits until kafka-python
can bootstrap from it and list topics, yields a :class:`KafkaEndpoint` and stops it afterwards
(the data dir is removed). Besides its PLAINTEXT listener it offers a SASL_SSL one (SCRAM-SHA-256
and -512 over TLS) with a throwaway CA (:mod:`tests.support.tls`) and one SCRAM user, so secured
clients are tested against the real thing.

If ``BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` is set, that broker (a real cluster) is used instead and
nothing is started (``is_test_broker`` is then False); its SASL_SSL listener, if any, comes from
``BARRIERFLOW_TEST_KAFKA_SASL_SSL_BOOTSTRAP``, ``..._CA`` (a PEM file), ``..._USERNAME`` and
``..._PASSWORD`` (the SCRAM mechanism is ``BARRIERFLOW_TEST_KAFKA_SASL_MECHANISM``,
SCRAM-SHA-256 by default).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.errors import BarrierflowError
from barrierflow.jvm.lockfile import DEFAULT_LOCK, read_lock
from barrierflow.kafka_io import kraft_broker as kraft

from tests.support.tls import make_ca_and_server_cert

logger = logging.getLogger(__name__)

EXTERNAL_BOOTSTRAP_ENV = "BARRIERFLOW_TEST_KAFKA_BOOTSTRAP"
EXTERNAL_SECURE_PREFIX = "BARRIERFLOW_TEST_KAFKA_SASL_SSL_"
#: The test broker's JVM: C1 only (a short-lived broker spends its CPU starting), serial GC.
TEST_JVM_OPTIONS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    "-Djava.awt.headless=true")
SCRAM_USER = "barrierflow-test"

#: ``(partition, key, value, headers)`` of one record to produce.
ProducedRecord = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes]] | None]


class KafkaBrokerError(BarrierflowError):
    """The test Kafka broker could not be started, did not become ready, or refused a request."""


@dataclass(frozen=True)
class SecureListener:
    """A SASL_SSL listener: where, what to trust, and a SCRAM user of it."""

    bootstrap_servers: str
    ca_pem: Path
    username: str
    password: str = field(repr=False)  # never in a test report
    mechanism: str = "SCRAM-SHA-256"

    def kafka_python_options(self) -> dict[str, Any]:
        """Connection options for kafka-python clients."""
        return {"bootstrap_servers": self.bootstrap_servers, "security_protocol": "SASL_SSL",
                "sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                "sasl_plain_password": self.password, "ssl_cafile": str(self.ca_pem)}


@dataclass(frozen=True)
class KafkaEndpoint:
    """A Kafka broker for tests.

    Attributes:
        bootstrap_servers: ``host:port`` of the PLAINTEXT listener (a list for an external cluster).
        is_test_broker: True for a broker these helpers started, False for the external broker
            of ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``.
        pid: the started broker's process id (outage tests pause it).
        broker: what broker this is ("Apache Kafka 4.3.1", or "external ...").
        secure: its SASL_SSL listener, if it has one.
    """

    bootstrap_servers: str
    is_test_broker: bool
    pid: int | None = None
    broker: str = ""
    secure: SecureListener | None = None


def kafka_version() -> str:
    """The Apache Kafka version of the pinned jars (the ``kafka_2.13`` artifact of the lock)."""
    return next(a.version for a in read_lock(DEFAULT_LOCK) if a.artifact == "kafka_2.13")


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
    return kraft.broker_answers(bootstrap_servers, timeout)


@contextlib.contextmanager
def _started_broker(startup_timeout: float, stop_timeout: float) -> Iterator[KafkaEndpoint]:
    """Apache Kafka through the production launcher on a temporary data dir, with a SASL_SSL
    listener (a fresh CA and SCRAM password each time); its errors raised as :class:`KafkaBrokerError`."""
    with tempfile.TemporaryDirectory(prefix="bf-test-kafka-tls-") as tls_dir:
        tls = make_ca_and_server_cert(Path(tls_dir))
        password = secrets.token_urlsafe(16)
        security = kraft.BrokerSecurity(users={SCRAM_USER: password}, key_and_certificate_pem=tls.server_pem)
        stack = contextlib.ExitStack()
        try:
            broker = stack.enter_context(kraft.kraft_broker(
                None, startup_timeout=startup_timeout, stop_timeout=stop_timeout, security=security,
                jvm_options=TEST_JVM_OPTIONS))
        except kraft.KafkaBrokerStartError as exc:
            raise KafkaBrokerError(f"{exc} (or set {EXTERNAL_BOOTSTRAP_ENV} to a running broker)") from exc
        with stack:
            assert broker.secure_bootstrap_servers is not None
            yield KafkaEndpoint(
                bootstrap_servers=broker.bootstrap_servers, is_test_broker=True, pid=broker.pid,
                broker=f"Apache Kafka {kafka_version()} (KRaft, single node, pid {broker.pid})",
                secure=SecureListener(broker.secure_bootstrap_servers, tls.ca_pem, SCRAM_USER, password))


def _external_endpoint(bootstrap: str) -> KafkaEndpoint:
    env = {k[len(EXTERNAL_SECURE_PREFIX):]: v for k, v in os.environ.items() if k.startswith(EXTERNAL_SECURE_PREFIX)}
    secure = None
    if all(env.get(k) for k in ("BOOTSTRAP", "CA", "USERNAME", "PASSWORD")):
        secure = SecureListener(env["BOOTSTRAP"], Path(env["CA"]), env["USERNAME"], env["PASSWORD"],
                                os.environ.get("BARRIERFLOW_TEST_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256"))
    return KafkaEndpoint(bootstrap_servers=bootstrap, is_test_broker=False, broker=f"external Kafka at {bootstrap}",
                         secure=secure)


@contextlib.contextmanager
def running_kafka_broker(
    startup_timeout: float = 90.0, stop_timeout: float = 15.0
) -> Iterator[KafkaEndpoint]:
    """Yield a Kafka broker: ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` if set, else a fresh Apache Kafka.

    The started broker keeps its data in a temporary dir (removed afterwards), listens on
    127.0.0.1 on free ports, answers kafka-python's metadata requests when this yields and is
    stopped on exit. Raises :class:`KafkaBrokerError` if it cannot be started within
    ``startup_timeout`` seconds.
    """
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        logger.info("using the external Kafka broker from %s", EXTERNAL_BOOTSTRAP_ENV)
        yield _external_endpoint(external)
        return
    with _started_broker(startup_timeout, stop_timeout) as endpoint:
        yield endpoint


@contextlib.contextmanager
def own_kafka_broker(startup_timeout: float = 90.0, stop_timeout: float = 15.0) -> Iterator[KafkaEndpoint]:
    """A fresh Apache Kafka broker for one test alone, even when ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``
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
    ``records`` exactly even across partitions. Tests that want real producer batches produce
    them themselves (see tests/sources/test_kafka_bounded_topic.py).
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
