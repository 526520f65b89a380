"""Topic metadata, offsets and topic creation, asked with kafka-python.

What the driver asks the brokers about a :class:`~barrierflow.spec.models.KafkaSourceSpec`'s
topics, a few requests per micro-batch or run: the partitions of each topic
(:func:`topic_partitions`), their log start offsets (:func:`beginning_offsets`, where
``earliest`` starts) and their end offsets (:func:`end_offsets`: the last stable offset, as a
``read_committed`` reader sees it, so no batch is planned into an open transaction). The
records themselves are read with confluent-kafka (:mod:`barrierflow.kafka_io.range_reads`);
:mod:`barrierflow.kafka_io` says why each client is used where.

For any client (a channel's, a sink's): :func:`ensure_topic` creates a topic unless it exists
(a :class:`~barrierflow.errors.SinkError` when it cannot, naming the setting or the brokers),
and :func:`partition_counts` counts the partitions of topics.

Contract: every call is bounded by the spec's ``poll_timeout``. Brokers that cannot be reached
give a :class:`~barrierflow.errors.SourceUnavailableError` (the source rides it out for
``unavailable_timeout``) naming the bootstrap servers and what to check; a refused login, an
untrusted certificate or a secret that does not resolve gives a
:class:`~barrierflow.errors.SourceError` at once, naming the setting
(:mod:`barrierflow.kafka_io.security`); any other broker error is a ``SourceError`` naming the
source and the call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from barrierflow.errors import SinkError, SourceError, SourceUnavailableError, UserInputError
from barrierflow.kafka_io.decoding import CHUNK_ROWS
from barrierflow.kafka_io.partition_ids import partition_id

if TYPE_CHECKING:  # kafka-python's types, also for the annotations of this module's callers
    from kafka import KafkaConsumer, TopicPartition

    from barrierflow.spec.kafka_params import KafkaClient, KafkaSource

#: How often the driver's consumer refreshes topic metadata (new partitions), in ms.
METADATA_MAX_AGE_MS = 30_000
#: Bound, in seconds, on each request of :func:`ensure_topic`.
TOPIC_TIMEOUT = 10.0

_T = TypeVar("_T")


def bootstrap_servers(spec: KafkaSource) -> list[str]:
    """The ``host:port`` list of ``spec.bootstrap_servers`` (comma separated)."""
    servers = [s.strip() for s in spec.bootstrap_servers.split(",") if s.strip()]
    if not servers:
        raise UserInputError(f"Kafka source {spec.name!r}: bootstrap_servers is empty")
    return servers


def consumer_config(spec: KafkaSource) -> dict[str, Any]:
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


def _unreachable(spec: KafkaSource, what: str, exc: BaseException) -> SourceUnavailableError:
    return SourceUnavailableError(
        f"Kafka source {spec.name!r}: {what} failed: cannot reach the brokers "
        f"{','.join(bootstrap_servers(spec))} within poll_timeout={spec.poll_timeout:g}s "
        f"({type(exc).__name__}: {exc}). Check that the brokers are running and listening on "
        "those addresses, that bootstrap_servers is right, that the brokers' advertised "
        "listeners resolve and are reachable from this host (driver and executors), and "
        "that no firewall blocks the port."
    )


def _insecure(spec: KafkaSource, what: str, exc: BaseException) -> SourceError | None:
    """A :class:`SourceError` (not one to ride out) when ``exc`` of a kafka-python call was a
    security failure (a refused login, an untrusted certificate: :mod:`barrierflow.kafka_io.security`)."""
    from barrierflow.kafka_io.security import kafka_python_failure

    found = kafka_python_failure(spec.client, ",".join(bootstrap_servers(spec)), exc, spec.poll_timeout)
    if found is None:
        return None
    return SourceError(f"Kafka source {spec.name!r}: {what} failed: {found}")


def open_consumer(spec: KafkaSource) -> KafkaConsumer:
    """A connected consumer for ``spec``; the caller closes it.

    Raises:
        SourceError: the brokers refused the client's credentials or certificate (or it theirs),
            or a secret of its ``client`` block does not resolve: at once, naming the setting.
        SourceUnavailableError: the brokers cannot be reached within ``poll_timeout``.
    """
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    from barrierflow.kafka_io.errors import KafkaSecurityError
    from barrierflow.kafka_io.security import connect_kafka_python

    try:
        config = consumer_config(spec)
        return connect_kafka_python(lambda ms: KafkaConsumer(**{**config, "bootstrap_timeout_ms": ms}), spec.client,
                                    ",".join(config["bootstrap_servers"]), spec.poll_timeout)
    except KafkaSecurityError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: connecting failed: {exc}") from None
    except KafkaError as exc:
        insecure = _insecure(spec, "connecting", exc)
        if insecure is not None:
            raise insecure from None
        raise _unreachable(spec, "connecting", exc) from exc


def broker_call(spec: KafkaSource, what: str, fn: Callable[[], _T]) -> _T:
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


def topic_partitions(spec: KafkaSource, consumer: KafkaConsumer) -> list[TopicPartition]:
    """Every partition of the spec's topics, sorted.

    Raises:
        SourceError: a topic does not exist (or the brokers cannot be reached).
    """
    from kafka import TopicPartition

    out: list[TopicPartition] = []
    for topic in spec.topics:
        numbers = broker_call(spec, f"listing the partitions of topic {topic!r}",
                        functools.partial(consumer.partitions_for_topic, topic))
        if not numbers:
            raise SourceError(
                f"Kafka source {spec.name!r}: topic {topic!r} does not exist on "
                f"{','.join(bootstrap_servers(spec))} (or this client may not describe it); "
                "create it, or fix 'topics' in the pipeline spec"
            )
        out += [TopicPartition(topic, p) for p in sorted(numbers)]
    return out


def _offsets_now(spec: KafkaSource, what: str, fetch: Callable[..., Any]) -> dict[str, int]:
    """``fetch(partitions, timeout_ms=...)`` (a consumer's ``end_offsets`` or ``beginning_offsets``)
    over every partition of the spec's topics, keyed by :func:`partition_id`."""
    consumer = open_consumer(spec)
    try:
        partitions = topic_partitions(spec, consumer)
        timeout_ms = int(spec.poll_timeout * 1000)
        found = broker_call(spec, f"fetching the {what} offsets of {spec.topics}",
                      lambda: fetch(consumer)(partitions, timeout_ms=timeout_ms))
        return {partition_id(tp.topic, tp.partition): int(found[tp]) for tp in partitions}
    finally:
        consumer.close()


def end_offsets(spec: KafkaSource) -> dict[str, int]:
    """The end offset (the last stable offset, as a ``read_committed`` reader sees it) of every
    partition of the spec's topics now: where a bounded run (``--until-exhausted``) stops.

    Raises:
        SourceError: a topic does not exist, or the brokers cannot be reached within ``poll_timeout``.
    """
    return _offsets_now(spec, "end", lambda consumer: consumer.end_offsets)


def beginning_offsets(spec: KafkaSource) -> dict[str, int]:
    """The log start offset of every partition of the spec's topics now (where ``earliest``
    starts), keyed like :func:`end_offsets`.

    Raises:
        SourceError: a topic does not exist, or the brokers cannot be reached within ``poll_timeout``.
    """
    return _offsets_now(spec, "beginning", lambda consumer: consumer.beginning_offsets)


def offsets_for_times(spec: KafkaSource, timestamp_ms: int) -> dict[str, int | None]:
    """Per partition of the spec's topics (keyed like :func:`end_offsets`), the earliest
    offset the broker still holds whose record timestamp is at or after ``timestamp_ms``
    (epoch milliseconds), as Kafka's offsets-for-times answers it; None for a partition with no
    such record. Every record of the partition before that offset that the broker holds has an
    older timestamp; records it has deleted (before the log start offset) are not searched.

    Raises:
        SourceError: a topic does not exist, or the brokers cannot be reached within ``poll_timeout``.
    """
    consumer = open_consumer(spec)
    try:
        partitions = topic_partitions(spec, consumer)
        timeout_ms = int(spec.poll_timeout * 1000)
        found = broker_call(spec, f"looking up the offsets of timestamp {timestamp_ms} ms in {spec.topics}",
                            lambda: consumer.offsets_for_times(dict.fromkeys(partitions, int(timestamp_ms)),
                                                               timeout_ms=timeout_ms))
        return {partition_id(tp.topic, tp.partition): (None if found.get(tp) is None else int(found[tp].offset))
                for tp in partitions}
    finally:
        consumer.close()


# --------------------------------------------------------------------------- topics of any client


def partition_counts(servers: str, topics: Sequence[str], client: KafkaClient | None = None) -> list[int]:
    """The number of partitions of each of ``topics`` (0 for a topic that does not exist), asked
    with one consumer connected with ``client``'s security settings and options."""
    from kafka import KafkaConsumer

    from barrierflow.kafka_io.security import kafka_python_config

    consumer = KafkaConsumer(bootstrap_servers=servers.split(","), group_id=None,
                             **kafka_python_config(client, "consumer"))
    try:
        return [len(consumer.partitions_for_topic(topic) or ()) for topic in topics]
    finally:
        consumer.close()


def ensure_topic(servers: str, topic: str, partitions: int, client: KafkaClient | None = None, *,
                 timeout: float = TOPIC_TIMEOUT) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists (replication 1 on a
    single broker, the cluster's default otherwise is not guessed: create it yourself there),
    connecting with ``client``'s security settings and options; each request is bounded by
    ``timeout`` seconds.

    Raises:
        SinkError: the brokers cannot be reached or refused the client's credentials or
            certificate (naming the setting), or the topic exists with fewer partitions.
    """
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    from barrierflow.kafka_io.errors import KafkaSecurityError
    from barrierflow.kafka_io.security import connect_kafka_python, kafka_python_config, kafka_python_failure

    listed = [s.strip() for s in servers.split(",") if s.strip()]
    try:
        settings = kafka_python_config(client, "consumer")
        consumer = connect_kafka_python(
            lambda ms: KafkaConsumer(bootstrap_servers=listed, group_id=None, enable_auto_commit=False,
                                     bootstrap_timeout_ms=ms, **settings), client, servers, timeout)
        try:
            existing = consumer.partitions_for_topic(topic)
        finally:
            consumer.close()
        if existing:
            if len(existing) < partitions:
                raise SinkError(f"channel topic {topic!r} on {servers} has {len(existing)} partitions, fewer than "
                                f"the {partitions} the spec asks for; raise them or fix 'partitions'")
            return
        admin = KafkaAdminClient(bootstrap_servers=listed, request_timeout_ms=int(timeout * 1000),
                                 **kafka_python_config(client, "admin"))
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
    except (KafkaError, KafkaSecurityError) as exc:
        insecure = kafka_python_failure(client, servers, exc, timeout)
        if insecure is not None:
            raise SinkError(f"creating channel topic {topic!r} failed: {insecure}") from None
        raise SinkError(f"creating channel topic {topic!r} on {servers} failed: {type(exc).__name__}: {exc}; check "
                        "that the brokers run and are reachable") from exc
